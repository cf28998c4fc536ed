package driver

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/stretchr/testify/require"
)

func TestDo_Rules(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name       string
		opts       []Option
		errs       []error
		wantModels []string
		wantResult string
		// wantRaw: the error is exactly errs[0]; wantAttempts > 0: a
		// *RetryError with that many attempts; wantIs: errors.Is target.
		wantRaw      bool
		wantAttempts int
		wantIs       error
	}{
		{
			name: "no rules: first success", errs: nil,
			wantModels: []string{"test/base"}, wantResult: "ok from test/base",
		},
		{
			name: "no rules: the raw error", errs: []error{boom},
			wantModels: []string{"test/base"}, wantRaw: true,
		},
		{
			name: "empty rule list means never retry", opts: []Option{WithRules()}, errs: []error{boom},
			wantModels: []string{"test/base"}, wantRaw: true,
		},
		{
			name: "429 switches", opts: []Option{WithRules(OnStatus(429).Switch(fb))},
			errs: []error{status(429)}, wantModels: []string{"test/base", "test/fb"}, wantResult: "ok from test/fb",
		},
		{
			name: "unmatched status returns the raw error", opts: []Option{WithRules(OnStatus(429).Switch(fb))},
			errs: []error{status(500)}, wantModels: []string{"test/base"}, wantRaw: true,
		},
		{
			name: "fallback chain", opts: []Option{WithRules(Fallback(fb), Fallback(fb2))},
			errs: []error{boom, boom}, wantModels: []string{"test/base", "test/fb", "test/fb2"}, wantResult: "ok from test/fb2",
		},
		{
			name: "chain exhausted: RetryError with every attempt", opts: []Option{WithRules(Fallback(fb), Fallback(fb2))},
			errs: []error{errN(1), errN(2), errN(3)}, wantModels: []string{"test/base", "test/fb", "test/fb2"}, wantAttempts: 3,
		},
		{
			name: "retry defaults to 2 attempts (defect 12.4)", opts: []Option{WithRules(OnStatus(500).Retry())},
			errs: []error{status(500), status(500), status(500)}, wantModels: []string{"test/base", "test/base"}, wantAttempts: 2,
		},
		{
			name: "retry with 3 attempts", opts: []Option{WithRules(OnStatus(500).Retry().Attempts(3))},
			errs: []error{status(500), status(500)}, wantModels: []string{"test/base", "test/base", "test/base"}, wantResult: "ok from test/base",
		},
		{
			name: "an exhausted match falls through to the next rule",
			opts: []Option{WithRules(OnStatus(429).Retry(), Fallback(fb))},
			errs: []error{status(429), status(429)}, wantModels: []string{"test/base", "test/base", "test/fb"}, wantResult: "ok from test/fb",
		},
		{
			name: "a fallback equal to the base is never used", opts: []Option{WithRules(Fallback(base))},
			errs: []error{boom}, wantModels: []string{"test/base"}, wantRaw: true,
		},
		{
			name: "duplicate fallbacks share one budget", opts: []Option{WithRules(Fallback(fb), Fallback(fb))},
			errs: []error{errN(1), errN(2)}, wantModels: []string{"test/base", "test/fb"}, wantAttempts: 2,
		},
		{
			name: "give-up stops before later rules", opts: []Option{WithRules(OnClass(abi.ClassAuth).GiveUp(), Fallback(fb))},
			errs: []error{status(401)}, wantModels: []string{"test/base"}, wantAttempts: 1, wantIs: ErrGaveUp,
		},
		{
			name: "total attempt cap", opts: []Option{WithRules(AnyError().Retry().Attempts(5)), WithMaxAttempts(2)},
			errs: []error{errN(1), errN(2), errN(3)}, wantModels: []string{"test/base", "test/base"}, wantAttempts: 2, wantIs: ErrMaxAttempts,
		},
		{
			name: "switch back to the base when a rule allows it",
			opts: []Option{WithRules(Fallback(fb), AnyError().Switch(base).Attempts(2))},
			errs: []error{errN(1), errN(2)}, wantModels: []string{"test/base", "test/fb", "test/base"}, wantResult: "ok from test/base",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, base, tc.opts...)
			fn, log := script(tc.errs...)
			got, err := Do(context.Background(), r, fn)
			require.Equal(t, tc.wantModels, models(*log))
			for i, s := range *log {
				require.Equal(t, i+1, s.Number, "attempt numbers are 1-based and consecutive")
			}
			switch {
			case tc.wantRaw:
				require.Same(t, tc.errs[0], err)
			case tc.wantAttempts > 0:
				var re *RetryError
				require.ErrorAs(t, err, &re)
				require.Len(t, re.Attempts, tc.wantAttempts)
				for i, a := range re.Attempts {
					require.Equal(t, tc.wantModels[i], a.Model.Key())
					require.Same(t, tc.errs[i], a.Err)
				}
			default:
				require.NoError(t, err)
				require.Equal(t, tc.wantResult, got)
			}
			if tc.wantIs != nil {
				require.ErrorIs(t, err, tc.wantIs)
			}
		})
	}
}

func TestDo_PerAttemptTimeout(t *testing.T) {
	// The first attempt hangs until its own deadline; the fallback answers.
	var causes []error
	r := mustNew(t, base, WithAttemptTimeout(time.Millisecond), WithRules(Timeout().Switch(fb).Timeout(time.Hour)))
	var timeouts []time.Duration
	got, err := Do(context.Background(), r, func(ctx context.Context, c *Call) (string, error) {
		timeouts = append(timeouts, c.Timeout)
		if c.Number == 1 {
			<-ctx.Done()
			causes = append(causes, context.Cause(ctx))
			return "", ctx.Err() // only context.DeadlineExceeded: the driver tags it
		}
		return "ok", nil
	})
	require.NoError(t, err)
	require.Equal(t, "ok", got)
	require.Equal(t, []time.Duration{time.Millisecond, time.Hour}, timeouts)
	var de *DeadlineError
	require.ErrorAs(t, causes[0], &de, "fn can tell the attempt deadline from the caller's")
	require.Equal(t, abi.DeadlineAttempt, de.Deadline)
	require.ErrorIs(t, de, context.DeadlineExceeded)
}

func TestDo_AttemptDeadlineErrorIsTagged(t *testing.T) {
	r := mustNew(t, base, WithAttemptTimeout(time.Millisecond))
	_, err := Do(context.Background(), r, func(ctx context.Context, c *Call) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	var de *DeadlineError
	require.ErrorAs(t, err, &de)
	require.Equal(t, abi.DeadlineAttempt, de.Deadline)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "attempt deadline of 1ms exceeded")
}

func TestDo_CallerCancelIsAHardStop(t *testing.T) {
	tests := []struct {
		name string
		// cancelAt: "fn" cancels during attempt 1, "onError" in the callback,
		// "sleep" during the backoff wait, "fn2" during attempt 2.
		cancelAt     string
		wantCalls    int
		wantSleeps   int
		wantRetryErr bool
	}{
		{name: "cancel during the first attempt", cancelAt: "fn", wantCalls: 1},
		{name: "cancel seen by OnError: no rule, no sleep", cancelAt: "onError", wantCalls: 1, wantRetryErr: true},
		{name: "cancel during the backoff", cancelAt: "sleep", wantCalls: 1, wantSleeps: 1, wantRetryErr: true},
		{name: "cancel during a later attempt", cancelAt: "fn2", wantCalls: 2, wantSleeps: 1, wantRetryErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			clk := newClock()
			if tc.cancelAt == "sleep" {
				clk.sleepErr = context.Canceled
			}
			var retries, failures int
			r := mustNew(t, base, clk.option(),
				WithRules(AnyError().Retry().Attempts(5).Delay(time.Second)),
				WithOnError(func(context.Context, *Attempt) {
					if tc.cancelAt == "onError" {
						cancel()
					}
				}),
				WithOnRetry(func(context.Context, RetryInfo) *Overrides { retries++; return nil }),
				WithOnFailure(func(context.Context, Outcome) { failures++ }),
			)
			calls := 0
			_, err := Do(ctx, r, func(ctx context.Context, c *Call) (string, error) {
				calls++
				if (tc.cancelAt == "fn" && calls == 1) || (tc.cancelAt == "fn2" && calls == 2) {
					cancel()
					return "", ctx.Err()
				}
				return "", errN(calls)
			})
			require.Equal(t, tc.wantCalls, calls)
			require.Len(t, clk.sleeps, tc.wantSleeps)
			require.Equal(t, 1, failures, "exactly one outcome callback")
			require.Equal(t, tc.wantCalls-1, retries)
			var re *RetryError
			require.Equal(t, tc.wantRetryErr, errors.As(err, &re))
			require.ErrorIs(t, err, context.Canceled)
		})
	}
}

func TestDo_CallerDeadlineIsNotAnAttemptDeadline(t *testing.T) {
	// The caller's own deadline fires: rules that match timeouts must not
	// fail over, since the caller is gone.
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	r := mustNew(t, base, WithAttemptTimeout(time.Hour), WithRules(Timeout().Switch(fb)))
	calls := 0
	_, err := Do(ctx, r, func(ctx context.Context, c *Call) (string, error) {
		calls++
		<-ctx.Done()
		require.NotErrorAs(t, context.Cause(ctx), new(*DeadlineError))
		return "", ctx.Err()
	})
	require.Equal(t, 1, calls)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestDo_BackoffOutlivingCallerDeadlineStopsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	clk := newClock()
	r := mustNew(t, base, clk.option(), WithRules(AnyError().Retry().Delay(2*time.Hour)))
	fn, log := script(errN(1))
	_, err := Do(ctx, r, fn)
	require.Len(t, *log, 1)
	require.Empty(t, clk.sleeps, "no sleep that the caller's deadline would cut")
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// Defect 12.3: the reference waits on the failed attempt's signal, so a
// retry after a timed-out attempt reports "Delay was aborted". Here the
// backoff waits on the caller's ctx.
func TestDefect12_3_DelayAfterAttemptTimeoutWaitsOnCallerContext(t *testing.T) {
	clk := newClock()
	r := mustNew(t, base, clk.option(), WithAttemptTimeout(time.Millisecond),
		WithRules(Timeout().Retry().Delay(time.Second)))
	calls := 0
	got, err := Do(context.Background(), r, func(ctx context.Context, c *Call) (string, error) {
		calls++
		if calls == 1 {
			<-ctx.Done()
			return "", ctx.Err()
		}
		return "second", nil
	})
	require.NoError(t, err)
	require.Equal(t, "second", got)
	require.Equal(t, []time.Duration{time.Second}, clk.sleeps)
	require.Equal(t, []bool{false}, clk.sleepCtxDone)
}

// Defect 12.13: a dead caller ctx stops even a rule with its own timeout;
// and a rule without a timeout gets the runner's per-attempt default, not
// the remains of an earlier attempt.
func TestDefect12_13_RuleTimeoutAndDefault(t *testing.T) {
	r := mustNew(t, base, WithAttemptTimeout(time.Minute),
		WithRules(OnStatus(500).Switch(fb).Timeout(time.Second), OnStatus(502).Switch(fb2)))
	fn, log := script(status(500), status(502))
	_, err := Do(context.Background(), r, fn)
	require.NoError(t, err)
	require.Equal(t, []time.Duration{time.Minute, time.Second, time.Minute}, []time.Duration{(*log)[0].Timeout, (*log)[1].Timeout, (*log)[2].Timeout})
}

func TestDo_Budget(t *testing.T) {
	t.Run("a backoff past the budget is not started", func(t *testing.T) {
		clk := newClock()
		r := mustNew(t, base, clk.option(), WithBudget(time.Second),
			WithRules(AnyError().Retry().Delay(2*time.Second), Fallback(fb)))
		fn, log := script(errN(1))
		_, err := Do(context.Background(), r, fn)
		require.Len(t, *log, 1)
		require.Empty(t, clk.sleeps)
		var de *DeadlineError
		require.ErrorAs(t, err, &de)
		require.Equal(t, abi.DeadlineTotal, de.Deadline)
	})
	t.Run("the budget fires during an attempt and is never recovered", func(t *testing.T) {
		r := mustNew(t, base, WithBudget(time.Millisecond), WithAttemptTimeout(time.Hour),
			WithRules(Timeout().Switch(fb)))
		calls := 0
		_, err := Do(context.Background(), r, func(ctx context.Context, c *Call) (string, error) {
			calls++
			<-ctx.Done()
			return "", ctx.Err()
		})
		require.Equal(t, 1, calls)
		var de *DeadlineError
		require.ErrorAs(t, err, &de)
		require.Equal(t, abi.DeadlineTotal, de.Deadline)
		require.False(t, de.Recoverable())
	})
	t.Run("attempts within the budget run", func(t *testing.T) {
		clk := newClock()
		r := mustNew(t, base, clk.option(), WithBudget(time.Minute), WithRules(AnyError().Retry().Delay(time.Second)))
		fn, log := script(errN(1))
		_, err := Do(context.Background(), r, fn)
		require.NoError(t, err)
		require.Len(t, *log, 2)
	})
}

func TestDo_Disabled(t *testing.T) {
	disabled := true
	var events []string
	r := mustNew(t, base, WithDisabled(func() bool { return disabled }), WithRules(Fallback(fb)),
		WithOnError(func(context.Context, *Attempt) { events = append(events, "error") }),
		WithOnFailure(func(context.Context, Outcome) { events = append(events, "failure") }),
		WithOnSuccess(func(context.Context, Outcome) { events = append(events, "success") }))
	boom := errors.New("boom")
	fn, log := script(boom)
	_, err := Do(context.Background(), r, fn)
	require.Same(t, boom, err)
	require.Equal(t, []string{"test/base"}, models(*log))
	require.Empty(t, events)

	disabled = false
	fn, log = script(boom)
	_, err = Do(context.Background(), r, fn)
	require.NoError(t, err)
	require.Equal(t, []string{"test/base", "test/fb"}, models(*log))
	require.Equal(t, []string{"error", "success"}, events)
}

func TestDo_NilArguments(t *testing.T) {
	_, err := Do[string](context.Background(), nil, func(context.Context, *Call) (string, error) { return "", nil })
	require.ErrorContains(t, err, "needs a Runner")
	_, err = Do[string](context.Background(), mustNew(t, base), nil)
	require.ErrorContains(t, err, "needs a Runner from New and a function")
}

// A design difference from ai-retry: the callbacks see the request
// overrides each attempt was sent with.
func TestDo_CallbacksSeeTheOverridesSent(t *testing.T) {
	temp, sys := 0.2, "be brief"
	hdr := http.Header{"X-Fallback": {"1"}}
	var retries []RetryInfo
	var outs []Outcome
	r := mustNew(t, base,
		WithRules(OnStatus(503).Switch(fb).Override(Overrides{Temperature: &temp}), OnStatus(502).Switch(fb2).Override(Overrides{System: &sys})),
		WithOnRetry(func(_ context.Context, info RetryInfo) *Overrides {
			retries = append(retries, info)
			if info.Next == fb2 {
				return &Overrides{Headers: hdr}
			}
			return nil
		}),
		WithOnSuccess(func(_ context.Context, o Outcome) { outs = append(outs, o) }))
	fn, log := script(status(503), status(502))
	_, err := Do(context.Background(), r, fn)
	require.NoError(t, err)
	require.Len(t, *log, 3)
	require.Len(t, outs, 1)
	att := outs[0].Attempts
	require.Len(t, att, 3)
	for i := range att {
		require.Equal(t, (*log)[i].Overrides, att[i].Overrides, "attempt %d: the overrides it was sent with", i+1)
	}
	require.True(t, att[0].Overrides.IsZero())
	require.Equal(t, &temp, att[1].Overrides.Temperature)
	require.Equal(t, &sys, att[2].Overrides.System)
	require.Equal(t, hdr, att[2].Overrides.Headers, "the OnRetry callback's overrides are merged in")
	require.Len(t, retries, 2)
	require.Equal(t, &temp, retries[0].Overrides.Temperature, "OnRetry sees the rule's overrides for the next attempt")
	require.True(t, retries[0].FailedOverrides.IsZero())
	require.Equal(t, &sys, retries[1].Overrides.System)
	require.Equal(t, &temp, retries[1].FailedOverrides.Temperature, "and those the failed attempt was sent with")
	require.Nil(t, retries[1].Overrides.Headers, "before the callback's own")
}

// mapModel is a Model implemented by a struct value that holds a map: its
// dynamic type is not comparable, so comparing two such interface values
// with == panics.
type mapModel struct {
	key  string
	meta map[string]string
}

func (m mapModel) Key() string { return m.key }
func (m mapModel) Generate(context.Context, *Request) (*Response, error) {
	return nil, errors.New("not used")
}
func (m mapModel) Stream(context.Context, *Request) (Stream, error) {
	return nil, errors.New("not used")
}

// A model of an uncomparable type is a valid Model: nothing in the driver
// may panic on it (it did: New, the sticky update and the observer compared
// models with ==).
func TestRunner_UncomparableModelsDoNotPanic(t *testing.T) {
	a := mapModel{"test/a", map[string]string{"tier": "1"}}
	b := mapModel{"test/b", map[string]string{"tier": "2"}}
	r, err := New(a, WithRules(Fallback(b)), WithModels(b), WithSticky(StickyRequests(1)), WithObserver(&recObserver{}),
		WithOnSuccess(func(context.Context, Outcome) {}))
	require.NoError(t, err)
	fn, log := script(status(503))
	got, err := Do(context.Background(), r, fn)
	require.NoError(t, err)
	require.Equal(t, "ok from test/b", got)
	require.Equal(t, []string{"test/a", "test/b"}, models(*log))
	fn, log = script()
	_, err = Do(context.Background(), r, fn)
	require.NoError(t, err)
	require.Equal(t, []string{"test/b"}, models(*log), "the sticky fallback held")
	_, err = New(a, WithModels(mapModel{"test/a", nil}))
	require.NoError(t, err, "same type and key: the same model")
}

// The backoff's stop-after-fire: the wait's timer
// fires just as the caller cancels, and the wait reports success. The
// caller's cancellation is still a hard stop: no further attempt starts.
func TestDo_BackoffFiringAsTheCallerCancels(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sleep := func(context.Context, time.Duration) error { cancel(); return nil } // the timer won the select
	r := mustNew(t, base, withClock(time.Now, sleep), WithRules(AnyError().Retry().Delay(time.Second)))
	fn, log := script(status(503))
	_, err := Do(ctx, r, fn)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, *log, 1, "no attempt after the cancel")
}
