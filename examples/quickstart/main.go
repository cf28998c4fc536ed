// Command quickstart shows retryhost's call driver on fake, in-process
// models: no API keys, no network. The primary model is rate-limited once
// (and asks to wait 10ms), then overloaded; the driver retries it, then
// fails over to a second provider, which answers.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

func main() {
	// 1. The models. Real code uses a provider adapter; these fakes fail
	//    the way real providers do, with *driver.ProviderError.
	gpt := &fakeModel{key: "openai/gpt-4o", failures: []error{
		&driver.ProviderError{Provider: "openai", Status: 429, Message: "Rate limit reached",
			Header: http.Header{"Retry-After-Ms": {"10"}}, Retryable: true},
		&driver.ProviderError{Provider: "openai", Status: 503, Message: "The server is overloaded", Retryable: true},
	}}
	claude := &fakeModel{key: "anthropic/claude-sonnet-4", answer: "Paris is the capital of France."}

	// 2. The rules, asked in order after each failure: retry a rate limit on
	//    the same model (waiting what Retry-After asks), switch to Claude when
	//    OpenAI is overloaded. Any other error fails the request as it is.
	r, err := driver.New(gpt,
		driver.WithRules(
			driver.OnStatus(429).Retry(),
			driver.OnClass(abi.ClassOverloaded).Switch(claude),
		),
		driver.WithOnError(func(_ context.Context, a *driver.Attempt) {
			fmt.Printf("  attempt %d failed: %s (HTTP %d)\n", a.Number, a.Class, a.Status)
		}),
		driver.WithOnRetry(func(_ context.Context, in driver.RetryInfo) *driver.Overrides {
			fmt.Printf("  waited %v, next: %s\n", in.Delay, in.Next.Key())
			return nil
		}),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	// 3. One request. The function runs once per attempt with that
	//    attempt's model; c.Request applies per-attempt overrides.
	req := &driver.Request{Messages: []driver.Message{
		{Role: driver.RoleUser, Content: []driver.Content{{Text: "What is the capital of France?"}}},
	}}
	resp, err := driver.Do(context.Background(), r,
		func(ctx context.Context, c *driver.Call) (*driver.Response, error) {
			fmt.Printf("attempt %d → %s\n", c.Number, c.Model.Key())
			return c.Model.Generate(ctx, c.Request(req))
		})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("answer from %s: %q\n", resp.Meta.ModelID, resp.Text())
}

// fakeModel fails its first calls with failures, then answers.
type fakeModel struct {
	key      string
	answer   string
	failures []error

	mu    sync.Mutex
	calls int
}

func (m *fakeModel) Key() string { return m.key }

func (m *fakeModel) Generate(ctx context.Context, _ *driver.Request) (*driver.Response, error) {
	m.mu.Lock()
	n := m.calls
	m.calls++
	m.mu.Unlock()
	if n < len(m.failures) {
		return nil, m.failures[n]
	}
	return &driver.Response{
		Content: []driver.Part{{Kind: abi.KindTextDelta, Delta: m.answer}},
		Finish:  driver.FinishReason{Unified: abi.ReasonStop, Raw: "end_turn"},
		Meta:    abi.ResponseMeta{ModelID: m.key},
	}, ctx.Err()
}

func (m *fakeModel) Stream(context.Context, *driver.Request) (driver.Stream, error) {
	return nil, fmt.Errorf("%s: streaming is not faked in this example", m.key)
}
