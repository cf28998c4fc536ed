// Command call-timeout-switch shows per-attempt deadlines: each attempt
// gets its own fresh timeout; when it fires, the driver fails over to a
// faster model. The caller's own cancellation, by contrast, is a hard stop:
// nothing fails over, since nobody is waiting for the answer.
//
//	go run ./examples/call-timeout-switch
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

func main() {
	slow := &fakeModel{key: "big/model-slow", latency: time.Hour, answer: "too late"}
	fast := &fakeModel{key: "small/model-fast", latency: time.Millisecond, answer: "42"}

	// Every attempt gets 50ms (WithAttemptTimeout); a timed-out attempt
	// switches to the fast model, which gets a more generous 5s of its own.
	r, err := driver.New(slow,
		driver.WithAttemptTimeout(50*time.Millisecond),
		driver.WithRules(driver.Timeout().Switch(fast).Timeout(5*time.Second)),
		driver.WithOnError(func(_ context.Context, a *driver.Attempt) {
			who := "the caller's deadline or cancellation"
			if a.Deadline != abi.DeadlineNone {
				who = "the driver's " + a.Deadline.String() + " deadline"
			}
			fmt.Printf("  attempt %d on %s failed: %s, by %s\n", a.Number, a.Model, a.Class, who)
		}),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	call := func(ctx context.Context, c *driver.Call) (*driver.Response, error) {
		fmt.Printf("attempt %d → %s (timeout %v)\n", c.Number, c.Model.Key(), c.Timeout)
		resp, err := c.Model.Generate(ctx, &driver.Request{})
		// context.Cause tells the attempt's own deadline from the caller's.
		var de *driver.DeadlineError
		if errors.As(context.Cause(ctx), &de) {
			fmt.Printf("  the driver's %s deadline of %v fired\n", de.Deadline, de.Limit)
		}
		return resp, err
	}

	fmt.Println("1. the slow model times out, the fast one answers:")
	resp, err := driver.Do(context.Background(), r, call)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("answer: %s\n\n", resp.Text())

	fmt.Println("2. the caller gives up first: no fail-over")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err = driver.Do(ctx, r, call)
	fmt.Printf("error: %v (caller's deadline: %v)\n", err, errors.Is(err, context.DeadlineExceeded))
}

// fakeModel answers after latency, unless its ctx ends first.
type fakeModel struct {
	key     string
	latency time.Duration
	answer  string
}

func (m *fakeModel) Key() string { return m.key }

func (m *fakeModel) Generate(ctx context.Context, _ *driver.Request) (*driver.Response, error) {
	t := time.NewTimer(m.latency)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return &driver.Response{
			Content: []driver.Part{{Kind: abi.KindTextDelta, Delta: m.answer}},
			Finish:  driver.FinishReason{Unified: abi.ReasonStop},
		}, nil
	}
}

func (m *fakeModel) Stream(context.Context, *driver.Request) (driver.Stream, error) {
	return nil, fmt.Errorf("%s: streaming is not faked in this example", m.key)
}
