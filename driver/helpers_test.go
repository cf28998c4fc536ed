package driver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeModel is a model that is only ever handed to fn: its methods are not called.
type fakeModel struct{ key string }

func (m *fakeModel) Key() string { return m.key }
func (m *fakeModel) Generate(context.Context, *Request) (*Response, error) {
	return nil, errors.New("fakeModel.Generate is not used")
}
func (m *fakeModel) Stream(context.Context, *Request) (Stream, error) {
	return nil, errors.New("fakeModel.Stream is not used")
}

var (
	base = &fakeModel{"test/base"}
	fb   = &fakeModel{"test/fb"}
	fb2  = &fakeModel{"test/fb2"}
)

// fakeClock is a manual clock whose sleep advances time instead of waiting.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	sleeps []time.Duration
	// sleepErr, when set, is what sleep returns (after recording).
	sleepErr error
	// sleepCtxDone records, per sleep, whether the ctx was already done.
	sleepCtxDone []bool
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.sleepCtxDone = append(c.sleepCtxDone, ctx.Err() != nil)
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if c.sleepErr != nil {
		return c.sleepErr
	}
	c.t = c.t.Add(d)
	return nil
}

func (c *fakeClock) option() Option { return withClock(c.now, c.sleep) }

// seen is what fn saw on one attempt.
type seen struct {
	Model     string
	Number    int
	Timeout   time.Duration
	Overrides Overrides
}

// script returns an fn that fails attempt i with errs[i] (nil succeeds with
// "ok from <model>") and records what each attempt saw. Attempts past the
// script succeed.
func script(errs ...error) (func(context.Context, *Call) (string, error), *[]seen) {
	var mu sync.Mutex
	var log []seen
	return func(_ context.Context, c *Call) (string, error) {
		mu.Lock()
		i := len(log)
		log = append(log, seen{c.Model.Key(), c.Number, c.Timeout, c.Overrides})
		mu.Unlock()
		if i < len(errs) && errs[i] != nil {
			return "", errs[i]
		}
		return "ok from " + c.Model.Key(), nil
	}, &log
}

func models(log []seen) []string {
	out := make([]string, len(log))
	for i, s := range log {
		out[i] = s.Model
	}
	return out
}

func status(code int) error {
	return &ProviderError{Provider: "test", Status: code, Message: http.StatusText(code), Retryable: DefaultRetryable(code)}
}

func statusRetryAfter(code int, header, value string) error {
	e := status(code).(*ProviderError)
	e.Header = http.Header{}
	e.Header.Set(header, value)
	return e
}

func mustNew(t testing.TB, b Model, opts ...Option) *Runner {
	t.Helper()
	r, err := New(b, opts...)
	require.NoError(t, err)
	return r
}

func errN(i int) error { return fmt.Errorf("failure %d", i) }

// budgetOf returns the retry budget counters of r's in-process State.
func budgetOf(r *Runner) *keyBudget { return r.state.(*localState).budget(r.stateKey) }
