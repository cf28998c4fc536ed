// Command refusal-recovery recovers from a model that refuses in plain
// text. A refusal is a 200 with a polite answer, so no status code or
// finish reason reveals it; the embedded Wasm refusal plugin holds the
// leading text of each attempt's stream, and when it starts with a refusal
// it fails the attempt before the caller sees a word. The rules then switch
// to another model, and the caller gets that model's answer, once.
//
//	go run ./examples/refusal-recovery
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/examples/internal/fake"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
)

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
	// The refusal plugin built into retryhost (plugins/refusal), with its
	// default phrases, failing open if it ever breaks.
	refusal, err := rt.Load(ctx, "refusal", plugins.Refusal, host.WithConfig([]byte(`{"fail": "open"}`)))
	if err != nil {
		return err
	}

	cautious := &fake.Model{ID: "openai/gpt-4o", Words: []string{"I'm sorry, ", "but I can't ", "help with ", "that."}}
	helpful := &fake.Model{ID: "anthropic/claude-sonnet-4", Words: []string{"To reset ", "a forgotten ", "password, ", "use the sign-in page's ", "\"Forgot password\" link."}}

	r, err := driver.New(cautious,
		driver.WithRules(driver.OnClass(abi.ClassRefusal).Switch(helpful)),
		driver.WithOnError(func(_ context.Context, a *driver.Attempt) {
			fmt.Fprintf(w, "attempt %d on %s: %s\n", a.Number, a.Model, a.Class)
			var re *abi.RefusalError
			if errors.As(a.Err, &re) {
				fmt.Fprintf(w, "  %s held %q: it matched %q\n", re.Transform, re.Text, re.Phrase)
			}
		}))
	if err != nil {
		return err
	}
	m, err := driver.NewRetryableModel(r,
		driver.WithTransforms(refusal),
		driver.WithOnCommit(func(_ context.Context, c driver.CommitInfo) {
			fmt.Fprintf(w, "attempt %d on %s: committed, after %d failed\n", c.Number, c.Model.Key(), len(c.Failed))
		}))
	if err != nil {
		return err
	}
	s, err := m.Stream(ctx, &driver.Request{Messages: []driver.Message{
		{Role: driver.RoleUser, Content: []driver.Content{{Text: "How do I reset my password?"}}},
	}})
	if err != nil {
		return err
	}
	text, err := fake.ReadText(s)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "the caller got: %q\n", text)
	return nil
}
