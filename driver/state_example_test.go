package driver_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/retryhost/retryhost/driver"
)

// Two Runners sharing one State act as two replicas: a 429 with a
// Retry-After seen by one keeps the other from calling the model at all.
// Across processes, a State on a shared store does the same.
func ExampleWithState() {
	limited := &fakeModel{key: "openai/gpt-4o", err: &driver.ProviderError{
		Provider: "openai", Status: 429, Message: "Rate limit reached",
		Header: http.Header{"Retry-After": {"20"}}}}
	fallback := &fakeModel{key: "anthropic/claude-sonnet-4", answer: "Paris."}

	shared := driver.NewLocalState()
	replica := func() *driver.Runner {
		r, err := driver.New(limited, driver.WithState(shared),
			driver.WithRules(driver.OnStatus(429).Switch(fallback)),
			driver.WithCooldown(driver.Cooldown{Failures: 3, For: 30 * time.Second}))
		if err != nil {
			panic(err)
		}
		return r
	}
	a, b := replica(), replica()
	for _, r := range []*driver.Runner{a, b} {
		var tried []string
		_, err := driver.Do(context.Background(), r, func(ctx context.Context, c *driver.Call) (*driver.Response, error) {
			tried = append(tried, c.Model.Key())
			return c.Model.Generate(ctx, &driver.Request{})
		})
		if err != nil {
			panic(err)
		}
		fmt.Println(tried)
	}
	// Output:
	// [openai/gpt-4o anthropic/claude-sonnet-4]
	// [anthropic/claude-sonnet-4]
}
