package driver_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/retryhost/retryhost/driver"
)

// Logging every request's attempts with log/slog, for a service without
// OpenTelemetry. Durations are left out here so that the output is stable.
func ExampleSlogObserver() {
	quiet := func(_ []string, a slog.Attr) slog.Attr {
		switch a.Key {
		case slog.TimeKey, "duration", "elapsed", "input_tokens", "output_tokens":
			return slog.Attr{}
		}
		return a
	}
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: quiet}))

	primary := &fakeModel{key: "openai/gpt-4o", err: &driver.ProviderError{
		Provider: "openai", Status: 503, Message: "overloaded"}}
	fallback := &fakeModel{key: "anthropic/claude-sonnet-4", answer: "Paris."}
	r, err := driver.New(primary,
		driver.WithRules(driver.Fallback(fallback)),
		driver.WithObserver(driver.SlogObserver(logger)))
	if err != nil {
		panic(err)
	}
	resp, err := r.Generate(context.Background(), &driver.Request{})
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Text())
	// Output:
	// level=INFO msg="retryhost: attempt end" model=openai/gpt-4o attempt=1 outcome=error class=overloaded status=503 next_model=anthropic/claude-sonnet-4 delay=0s
	// level=INFO msg="retryhost: request end" model=anthropic/claude-sonnet-4 attempts=2 fail_overs=1
	// Paris.
}
