// Command hostile-plugin shows the host containing a third-party plugin
// that misbehaves. A plugin that imports file access is refused at load,
// before any of its code runs. A plugin that loops forever in every call
// loads (nothing static can tell), and is loaded fail-open beside a good
// transform: each of its calls is stopped at the per-call deadline, the
// condition counts as "no opinion", the transform is detached from the
// stream, and the request still fails over and succeeds, transformed by the
// good plugin.
//
//	go run ./examples/hostile-plugin
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/examples/internal/fake"
	"github.com/retryhost/retryhost/examples/internal/repo"
	"github.com/retryhost/retryhost/host"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	// Every call into a plugin is bounded: 100ms here (default 50ms), far
	// above what the good plugin needs even on a loaded machine.
	rt, err := host.New(ctx, host.WithCallTimeout(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())
	load := func(name string, opts ...host.LoadOption) (*host.Plugin, error) {
		path, err := repo.Path("host/testdata/" + name + ".wasm")
		if err != nil {
			return nil, err
		}
		return rt.LoadFile(ctx, name, path, opts...)
	}

	// 1. Refused at load: it imports WASI path_open.
	if _, err := load("forbidden_file"); err != nil {
		fmt.Fprintf(w, "load forbidden_file: refused: %v\n", err)
	} else {
		return fmt.Errorf("forbidden_file loaded")
	}

	// 2. Loaded: loop spins forever in every call, fail-open; upper
	//    upper-cases text.
	loop, err := load("loop", host.WithPolicy(abi.TransformPolicy{Fail: abi.FailOpen}))
	if err != nil {
		return err
	}
	upper, err := load("upper")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "load loop: ok (kinds: condition=%v transform=%v, fail policy %s)\n", loop.IsCondition(), loop.IsTransform(), loop.FailPolicy())
	fmt.Fprintln(w, "load upper: ok")

	primary := &fake.Model{ID: "openai/gpt-4o", Failures: []error{
		&driver.ProviderError{Provider: "openai", Status: 503, Message: "The server is overloaded", Retryable: true},
	}}
	fallback := &fake.Model{ID: "anthropic/claude-sonnet-4", Words: []string{"the ", "request ", "still ", "succeeds."}}

	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format, args...)
	}
	// The loop condition is asked first; its timeout counts as no opinion,
	// so the native rule after it decides.
	r, err := driver.New(primary,
		driver.WithRules(
			watchCondition(loop, say),
			driver.OnClass(abi.ClassOverloaded).Switch(fallback),
		),
		driver.WithOnError(func(_ context.Context, a *driver.Attempt) {
			say("attempt %d on %s failed: %s\n", a.Number, a.Model, a.Class)
		}))
	if err != nil {
		return err
	}
	m, err := driver.NewRetryableModel(r, driver.WithTransforms(watchTransform(loop, say), upper))
	if err != nil {
		return err
	}
	s, err := m.Stream(ctx, &driver.Request{})
	if err != nil {
		return err
	}
	text, err := fake.ReadText(s)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "answer: %q\n", text)
	return nil
}

// watchCondition reports the failures of c (which the driver otherwise
// only logs) and keeps its fail policy.
func watchCondition(c *host.Plugin, say func(string, ...any)) driver.Condition {
	return watchedCondition{c, say}
}

type watchedCondition struct {
	*host.Plugin
	say func(string, ...any)
}

func (c watchedCondition) Decide(ctx context.Context, a *driver.Attempt) (driver.Decision, error) {
	d, err := c.Plugin.Decide(ctx, a)
	if err != nil {
		c.say("condition %s: %s → no opinion (fail-open)\n", c.Name(), brief(err))
	}
	return d, err
}

// watchTransform reports the failures of t's streams.
func watchTransform(t abi.Transformer, say func(string, ...any)) abi.Transformer {
	return watchedTransform{t, say}
}

type watchedTransform struct {
	abi.Transformer
	say func(string, ...any)
}

func (t watchedTransform) Open(ctx context.Context, info abi.StreamInfo) (abi.StreamTransform, error) {
	st, err := t.Transformer.Open(ctx, info)
	if err != nil {
		t.say("transform %s: %s\n", t.Name(), brief(err))
		return nil, err
	}
	return watchedStream{st, t}, nil
}

type watchedStream struct {
	abi.StreamTransform
	t watchedTransform
}

func (s watchedStream) Part(ctx context.Context, p *abi.Part) (abi.Verdict, error) {
	v, err := s.StreamTransform.Part(ctx, p)
	if err != nil {
		s.t.say("transform %s: %s → detached, the stream goes on (fail-open)\n", s.t.Name(), brief(err))
	}
	return v, err
}

// brief names the operation and the kind of a plugin failure, such as
// "part: host: plugin call timed out".
func brief(err error) string {
	var pe *host.PluginError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Kind.Error()
	}
	return err.Error()
}
