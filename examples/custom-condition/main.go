// Command custom-condition runs a condition plugin written in Go and built
// to Wasm (its source is in guest/): when a model rejects a prompt longer
// than its context window, it switches to a long-context model. The host
// loads it with its config; the driver asks it like any native rule.
//
//	go run ./examples/custom-condition
package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/examples/internal/fake"
	"github.com/retryhost/retryhost/host"
)

// The guest, built by `make -C examples/custom-condition`.
//
//go:embed guest/contextwindow.wasm
var contextWindow []byte

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run runs the example; opts configure the host (the test shares a
// compilation cache between runs: a 2 MB Go module takes seconds to
// compile, tens of seconds under the race detector).
func run(ctx context.Context, w io.Writer, opts ...host.Option) error {
	rt, err := host.New(ctx, opts...)
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())

	// A config the plugin rejects fails the load, with its reason.
	if _, err := rt.Load(ctx, "context-window", contextWindow); err != nil {
		fmt.Fprintf(w, "load without config: %v\n", err)
	}
	cond, err := rt.Load(ctx, "context-window", contextWindow, host.WithConfig([]byte("anthropic/claude-sonnet-4")))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "loaded %s: condition=%v, sha256 %s…\n", cond.Name(), cond.IsCondition(), cond.SHA256()[:12])

	longContext := &fake.Model{ID: "anthropic/claude-sonnet-4", Words: []string{"Summary: ", "the whole ", "contract, ", "in brief."}}
	for _, primary := range []*fake.Model{
		{ID: "openai/gpt-4o-mini", Failures: []error{&driver.ProviderError{Provider: "openai", Status: 400,
			Message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 210511 tokens."}}},
		{ID: "openai/gpt-4o", Failures: []error{&driver.ProviderError{Provider: "openai", Status: 401,
			Message: "Incorrect API key provided"}}},
	} {
		fmt.Fprintf(w, "\nrequest on %s\n", primary.ID)
		r, err := driver.New(primary,
			driver.WithModels(longContext), // the model keys the plugin may name
			driver.WithRules(cond),
			driver.WithOnError(func(_ context.Context, a *driver.Attempt) {
				fmt.Fprintf(w, "  attempt %d on %s failed: HTTP %d (%s)\n", a.Number, a.Model, a.Status, a.Class)
			}))
		if err != nil {
			return err
		}
		resp, err := driver.Do(ctx, r, func(ctx context.Context, c *driver.Call) (*driver.Response, error) {
			return c.Model.Generate(ctx, c.Request(&driver.Request{}))
		})
		if err != nil {
			fmt.Fprintf(w, "  the plugin had no opinion; the request fails: %v\n", err)
			continue
		}
		fmt.Fprintf(w, "  answer from %s: %q\n", resp.Meta.ModelID, resp.Text())
	}
	return nil
}
