package driver_test

import (
	"context"
	"fmt"
	"time"

	"github.com/retryhost/retryhost/driver"
)

// A model that keeps failing leaves the rotation for a while: after two
// 503s in a row, requests start on the fallback and stop paying for the
// dead model's failure first.
func ExampleWithCooldown() {
	primary := &fakeModel{key: "openai/gpt-4o", err: &driver.ProviderError{
		Provider: "openai", Status: 503, Message: "The server is overloaded"}}
	fallback := &fakeModel{key: "anthropic/claude-sonnet-4", answer: "Paris."}

	r, err := driver.New(primary,
		driver.WithRules(driver.OnStatusRange(500, 599).Switch(fallback)),
		driver.WithCooldown(driver.Cooldown{Failures: 2, For: 30 * time.Second,
			OnChange: func(model string, until time.Time) { fmt.Println(model, "cools down") }}))
	if err != nil {
		panic(err)
	}
	for range 3 {
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
	// openai/gpt-4o cools down
	// [openai/gpt-4o anthropic/claude-sonnet-4]
	// [anthropic/claude-sonnet-4]
}
