package driver_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/retryhost/retryhost/driver"
)

// A group balances two deployments of gpt-4o; when one is overloaded the
// request fails over to the other inside the group, and only when both
// fail do the rules move on to the next group. The error names every
// deployment tried.
func ExampleGroup() {
	overloaded := &driver.ProviderError{Provider: "azure", Status: 503, Message: "overloaded"}
	east := &fakeModel{key: "gpt-4o-east", err: overloaded}
	west := &fakeModel{key: "gpt-4o-west", answer: "Paris."}
	gpt := driver.Group("gpt-4o", driver.LatencyAware, east, west)
	claude := driver.Group("claude", driver.WeightedRandom, &fakeModel{key: "claude-a", err: overloaded})

	r, err := driver.New(gpt, driver.WithRules(driver.OnStatus(503).Switch(claude)))
	if err != nil {
		panic(err)
	}
	resp, err := r.Generate(context.Background(), &driver.Request{})
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Text())

	west.err = overloaded
	_, err = r.Generate(context.Background(), &driver.Request{})
	var re *driver.RetryError
	if errors.As(err, &re) {
		// Both gpt-4o deployments (in the order the strategy chose), then claude.
		fmt.Println(len(re.Attempts), "attempts, the last on", re.Attempts[2].Model.Key())
	}
	// Output:
	// Paris.
	// 3 attempts, the last on claude-a
}
