package driver_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// A call that switches to another model when the first answers HTTP 429.
func ExampleDo() {
	primary := &fakeModel{key: "openai/gpt-4o", err: &driver.ProviderError{
		Provider: "openai", Status: 429, Message: "Rate limit reached"}}
	fallback := &fakeModel{key: "anthropic/claude-sonnet-4", answer: "Paris."}

	r, err := driver.New(primary,
		driver.WithRules(driver.OnStatus(429).Switch(fallback)),
		driver.WithOnRetry(func(_ context.Context, in driver.RetryInfo) *driver.Overrides {
			fmt.Printf("attempt %d on %s failed (%s), trying %s\n",
				in.Failed.Number, in.Failed.Model, in.Failed.Class, in.Next.Key())
			return nil
		}))
	if err != nil {
		panic(err)
	}

	req := &driver.Request{Messages: []driver.Message{{Role: driver.RoleUser,
		Content: []driver.Content{{Text: "Capital of France?"}}}}}
	resp, err := driver.Do(context.Background(), r,
		func(ctx context.Context, c *driver.Call) (*driver.Response, error) {
			return c.Model.Generate(ctx, c.Request(req))
		})
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Text())
	// Output:
	// attempt 1 on openai/gpt-4o failed (rate-limit), trying anthropic/claude-sonnet-4
	// Paris.
}

// A per-attempt deadline: the first model hangs, its attempt times out
// after 20ms, and the request fails over to a faster model.
func ExampleDo_timeoutSwitch() {
	slow := &fakeModel{key: "slow/model", hang: true}
	fast := &fakeModel{key: "fast/model", answer: "done"}

	r, err := driver.New(slow,
		driver.WithAttemptTimeout(20*time.Millisecond),
		driver.WithRules(driver.Timeout().Switch(fast).Timeout(time.Minute)),
		driver.WithOnError(func(_ context.Context, a *driver.Attempt) {
			fmt.Printf("attempt %d on %s: %s (%s deadline)\n", a.Number, a.Model, a.Class, a.Deadline)
		}))
	if err != nil {
		panic(err)
	}
	resp, err := driver.Do(context.Background(), r,
		func(ctx context.Context, c *driver.Call) (*driver.Response, error) {
			return c.Model.Generate(ctx, &driver.Request{})
		})
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Text())
	// Output:
	// attempt 1 on slow/model: timeout (attempt deadline)
	// done
}

// Inspecting the final error of a request that failed on every model.
func ExampleRetryError() {
	a := &fakeModel{key: "a/model", err: &driver.ProviderError{Provider: "a", Status: 503, Message: "unavailable"}}
	b := &fakeModel{key: "b/model", err: &driver.ProviderError{Provider: "b", Status: 500, Message: "internal"}}
	r, err := driver.New(a, driver.WithRules(driver.OnStatusRange(500, 599).Switch(b)))
	if err != nil {
		panic(err)
	}
	_, err = driver.Do(context.Background(), r,
		func(ctx context.Context, c *driver.Call) (*driver.Response, error) {
			return c.Model.Generate(ctx, &driver.Request{})
		})

	var re *driver.RetryError
	if errors.As(err, &re) {
		for _, at := range re.Attempts {
			fmt.Printf("#%d %s: %v\n", at.Number, at.Model.Key(), at.Err)
		}
	}
	var pe *driver.ProviderError
	if errors.As(err, &pe) { // the newest attempt's: what finally failed
		fmt.Println("final status:", pe.Status)
	}
	// Output:
	// #1 a/model: a: HTTP 503: unavailable
	// #2 b/model: b: HTTP 500: internal
	// final status: 500
}

// Configuration mistakes are reported by New, never at request time.
func ExampleNew_badInput() {
	m := &fakeModel{key: "a/model"}
	_, err := driver.New(m, driver.WithRules(driver.Timeout().Retry().Attempts(1)))
	fmt.Println(err)
	_, err = driver.ParseSticky("after-lunch")
	fmt.Println(err)
	// Output:
	// retryhost: rule "timeout": Retry needs Attempts(n) with n >= 2, got 1
	// retryhost: unknown sticky policy "after-lunch" (want after-request, after-N-requests or after-N-seconds)
}

// fakeModel answers every call the same way, in process.
type fakeModel struct {
	key    string
	answer string
	err    error
	hang   bool // wait for the ctx to end
}

func (m *fakeModel) Key() string { return m.key }

func (m *fakeModel) Generate(ctx context.Context, _ *driver.Request) (*driver.Response, error) {
	if m.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if m.err != nil {
		return nil, m.err
	}
	return &driver.Response{
		Content: []driver.Part{{Kind: abi.KindTextDelta, Delta: m.answer}},
		Finish:  driver.FinishReason{Unified: abi.ReasonStop},
	}, nil
}

func (m *fakeModel) Stream(context.Context, *driver.Request) (driver.Stream, error) {
	return nil, errors.New("not implemented")
}
