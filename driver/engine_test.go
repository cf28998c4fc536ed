package driver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/stretchr/testify/require"
)

func TestBackoff(t *testing.T) {
	always := func(err error) []error { return []error{err, err, err, err, err} }
	tests := []struct {
		name       string
		opts       []Option
		errs       []error
		wantSleeps []time.Duration
	}{
		{
			// Defect 12.2: the reference multiplies the first same-model
			// retry already (its exponent counts the original attempt).
			name:       "defect 12.2: the first retry waits exactly the delay",
			opts:       []Option{WithRules(AnyError().Retry().Attempts(4).Delay(100 * time.Millisecond).Backoff(2))},
			errs:       always(errN(0)),
			wantSleeps: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond},
		},
		{
			name:       "switching to a fresh model waits the delay",
			opts:       []Option{WithRules(Fallback(fb).Delay(time.Second).Backoff(3), Fallback(fb2).Delay(time.Second).Backoff(3))},
			errs:       always(errN(0)),
			wantSleeps: []time.Duration{time.Second, time.Second},
		},
		{
			name: "max delay caps the growth",
			opts: []Option{WithBackoff(Backoff{MaxDelay: 250 * time.Millisecond}),
				WithRules(AnyError().Retry().Attempts(4).Delay(100 * time.Millisecond).Backoff(2))},
			errs:       always(errN(0)),
			wantSleeps: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond},
		},
		{
			name:       "the runner's backoff is the default for rules without one",
			opts:       []Option{WithBackoff(Backoff{Delay: time.Second, Factor: 2}), WithRules(AnyError().Retry().Attempts(3))},
			errs:       always(errN(0)),
			wantSleeps: []time.Duration{time.Second, 2 * time.Second},
		},
		{
			name:       "no delay: no sleep",
			opts:       []Option{WithRules(AnyError().Retry().Attempts(3))},
			errs:       always(errN(0)),
			wantSleeps: nil,
		},
		{
			name:       "retry honours Retry-After with factor 1",
			opts:       []Option{WithRules(OnStatus(429).Retry().Attempts(3).Delay(time.Hour).Backoff(9))},
			errs:       always(statusRetryAfter(429, "Retry-After", "3")),
			wantSleeps: []time.Duration{3 * time.Second, 3 * time.Second},
		},
		{
			name:       "retry-after-ms",
			opts:       []Option{WithRules(OnStatus(429).Retry())},
			errs:       always(statusRetryAfter(429, "Retry-After-Ms", "250")),
			wantSleeps: []time.Duration{250 * time.Millisecond},
		},
		{
			name:       "Retry-After is capped",
			opts:       []Option{WithRetryAfterCap(5 * time.Second), WithRules(OnStatus(429).Retry())},
			errs:       always(statusRetryAfter(429, "Retry-After", "600")),
			wantSleeps: []time.Duration{5 * time.Second},
		},
		{
			name:       "IgnoreRetryAfter uses the rule's delay",
			opts:       []Option{WithRules(OnStatus(429).Retry().IgnoreRetryAfter().Delay(time.Millisecond))},
			errs:       always(statusRetryAfter(429, "Retry-After", "3")),
			wantSleeps: []time.Duration{time.Millisecond},
		},
		{
			name:       "a switch does not wait for the old model's Retry-After",
			opts:       []Option{WithRules(OnStatus(429).Switch(fb))},
			errs:       always(statusRetryAfter(429, "Retry-After", "3")),
			wantSleeps: nil,
		},
		{
			name:       "unless it asks to",
			opts:       []Option{WithRules(OnStatus(429).Switch(fb).UseRetryAfter())},
			errs:       always(statusRetryAfter(429, "Retry-After", "3")),
			wantSleeps: []time.Duration{3 * time.Second},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			r := mustNew(t, base, append(tc.opts, clk.option())...)
			fn, _ := script(tc.errs...)
			_, _ = Do(context.Background(), r, fn)
			require.Equal(t, tc.wantSleeps, clk.sleeps)
		})
	}
}

func TestBackoff_Jitter(t *testing.T) {
	const delay = time.Second
	run := func(j Jitter, seed uint64) []time.Duration {
		clk := newClock()
		r := mustNew(t, base, clk.option(), WithBackoff(Backoff{Jitter: j, Seed: seed}),
			WithRules(AnyError().Retry().Attempts(10).Delay(delay)), WithMaxAttempts(10))
		fn, _ := script(errN(1), errN(2), errN(3), errN(4), errN(5), errN(6), errN(7), errN(8), errN(9), errN(10))
		_, _ = Do(context.Background(), r, fn)
		require.Len(t, clk.sleeps, 9)
		return clk.sleeps
	}
	tests := []struct {
		name   string
		jitter Jitter
		lo, hi time.Duration // lo <= d < hi
	}{
		{name: "full", jitter: JitterFull, lo: 0, hi: delay},
		{name: "equal", jitter: JitterEqual, lo: delay / 2, hi: delay},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := run(tc.jitter, 42)
			require.Equal(t, a, run(tc.jitter, 42), "a seed makes the jitter reproducible")
			require.NotEqual(t, a, run(tc.jitter, 43))
			distinct := map[time.Duration]bool{}
			for _, d := range a {
				require.GreaterOrEqual(t, d, tc.lo)
				require.Less(t, d, tc.hi)
				distinct[d] = true
			}
			require.Greater(t, len(distinct), 1, "jitter varies")
		})
	}
}

func TestCallbacks_OrderAndPayloads(t *testing.T) {
	clk := newClock()
	var events []string
	temp := 0.2
	ruleTemp := 0.5
	r := mustNew(t, base, clk.option(),
		WithRules(OnStatus(429).Switch(fb).Delay(time.Second).Override(Overrides{Temperature: &ruleTemp, MaxOutputTokens: 64}),
			Fallback(fb2)),
		WithOnError(func(_ context.Context, a *Attempt) {
			events = append(events, fmt.Sprintf("error #%d %s %s", a.Number, a.Model, a.Class))
		}),
		WithOnRetry(func(_ context.Context, in RetryInfo) *Overrides {
			events = append(events, fmt.Sprintf("retry #%d %s after #%d %s, waited %v", in.Number, in.Next.Key(),
				in.Failed.Number, in.Failed.Model, in.Delay))
			if in.Number == 2 {
				return &Overrides{Temperature: &temp}
			}
			return nil
		}),
		WithOnSuccess(func(_ context.Context, o Outcome) {
			var parts []string
			for _, a := range o.Attempts {
				parts = append(parts, fmt.Sprintf("#%d %s err=%v", a.Number, a.Model.Key(), a.Err != nil))
			}
			events = append(events, fmt.Sprintf("success on %s: %s", o.Model.Key(), strings.Join(parts, ", ")))
		}),
		WithOnFailure(func(context.Context, Outcome) { events = append(events, "failure") }),
	)
	fn, log := script(status(429), status(500))
	got, err := Do(context.Background(), r, fn)
	require.NoError(t, err)
	require.Equal(t, "ok from test/fb2", got)
	require.Equal(t, []string{
		"error #1 test/base rate-limit",
		"retry #2 test/fb after #1 test/base, waited 1s",
		"error #2 test/fb server",
		"retry #3 test/fb2 after #2 test/fb, waited 0s",
		"success on test/fb2: #1 test/base err=true, #2 test/fb err=true, #3 test/fb2 err=false",
	}, events)

	// Overrides: OnRetry beats the rule per field; the rest of the rule
	// stays; they apply to their own attempt only.
	require.Equal(t, Overrides{}, (*log)[0].Overrides)
	require.Equal(t, Overrides{Temperature: &temp, MaxOutputTokens: 64}, (*log)[1].Overrides)
	require.Equal(t, Overrides{}, (*log)[2].Overrides)
}

func TestCallbacks_ExactlyOneOutcome(t *testing.T) {
	tests := []struct {
		name        string
		opts        []Option
		errs        []error
		wantSuccess int
	}{
		{name: "first try", errs: nil, wantSuccess: 1},
		{name: "after a switch", opts: []Option{WithRules(Fallback(fb))}, errs: []error{errN(1)}, wantSuccess: 1},
		{name: "no match on the first attempt", errs: []error{errN(1)}},
		{name: "exhausted", opts: []Option{WithRules(Fallback(fb))}, errs: []error{errN(1), errN(2)}},
		{name: "give up", opts: []Option{WithRules(AnyError().GiveUp())}, errs: []error{errN(1)}},
		{name: "cap", opts: []Option{WithMaxAttempts(1), WithRules(Fallback(fb))}, errs: []error{errN(1)}},
		{name: "budget", opts: []Option{WithBudget(time.Second), WithRules(Fallback(fb).Delay(time.Hour))}, errs: []error{errN(1)}},
		{name: "fail-closed condition", opts: []Option{WithRules(failClosed{ConditionFunc(func(context.Context, *Attempt) (Decision, error) {
			return Decision{}, errors.New("x")
		})})}, errs: []error{errN(1)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var successes, failures int
			var failErr error
			clk := newClock()
			r := mustNew(t, base, append(tc.opts, clk.option(),
				WithOnSuccess(func(context.Context, Outcome) { successes++ }),
				WithOnFailure(func(_ context.Context, o Outcome) { failures++; failErr = o.Err }))...)
			fn, _ := script(tc.errs...)
			_, err := Do(context.Background(), r, fn)
			require.Equal(t, tc.wantSuccess, successes)
			require.Equal(t, 1-tc.wantSuccess, failures)
			require.Equal(t, err, failErr, "OnFailure gets the error the caller receives")
		})
	}
}

func TestRetryError(t *testing.T) {
	r := mustNew(t, base, WithRules(Fallback(fb)))
	pe := status(503)
	_, err := Do(context.Background(), r, func(ctx context.Context, c *Call) (string, error) {
		if c.Number == 1 {
			return "", pe
		}
		return "", fmt.Errorf("fallback: %w", context.DeadlineExceeded)
	})
	var re *RetryError
	require.ErrorAs(t, err, &re)
	var got *ProviderError
	require.ErrorAs(t, err, &got, "errors.As reaches an earlier attempt's error")
	require.Same(t, pe, got)
	require.ErrorIs(t, err, context.DeadlineExceeded, "errors.Is reaches the last attempt's error")
	require.ErrorIs(t, re.Last(), context.DeadlineExceeded)
	require.Regexp(t, `^retryhost: 2 attempts failed; #1 test/base \(.*\): test: HTTP 503: Service Unavailable; #2 test/fb \(.*\): fallback: context deadline exceeded$`, err.Error())
}

// Defect 12.5: the reference prints "[object Object]" for a rejected result.
// Defect 12.17 (kept): static fallbacks never fire on a result.
func TestJudge_ResultAttempts(t *testing.T) {
	ctx := context.Background()
	t.Run("defect 12.5: a rejected result reads well in the final error", func(t *testing.T) {
		r := mustNew(t, base, newClock().option(), WithRules(OnFinish(abi.ReasonContentFilter).Switch(fb)))
		var q request
		st := q.start(ctx, r)
		_, cancel := q.attemptContext(ctx, &st)
		cancel()
		next, retry, final := q.judge(ctx, FinishReason{Unified: abi.ReasonContentFilter, Raw: "content_filter"}, Usage{})
		require.True(t, retry)
		require.NoError(t, final)
		require.Equal(t, fb, next.model)
		require.Equal(t, 2, next.number)
		require.NoError(t, q.advance(ctx, &next))
		_, cancel = q.attemptContext(ctx, &next)
		cancel()
		_, final = q.fail(ctx, errors.New("fallback broke"))
		require.Error(t, final)
		require.Contains(t, final.Error(), "#1 test/base (0s): result rejected, finish content-filter (content_filter)")
		require.NotContains(t, final.Error(), "[object Object]")
	})
	t.Run("defect 12.17: a fallback never fires on a result", func(t *testing.T) {
		successes := 0
		r := mustNew(t, base, WithRules(Fallback(fb)), WithOnSuccess(func(_ context.Context, o Outcome) {
			successes++
			require.Len(t, o.Attempts, 1, "an accepted result is the success, not an extra record")
		}))
		var q request
		st := q.start(ctx, r)
		_, cancel := q.attemptContext(ctx, &st)
		cancel()
		_, retry, final := q.judge(ctx, FinishReason{Unified: abi.ReasonContentFilter}, Usage{})
		require.False(t, retry)
		require.NoError(t, final)
		q.succeed(ctx)
		require.Equal(t, 1, successes)
	})
	t.Run("give up on a result fails the request", func(t *testing.T) {
		r := mustNew(t, base, WithRules(OnFinish(abi.ReasonLength).GiveUp()))
		var q request
		st := q.start(ctx, r)
		_, cancel := q.attemptContext(ctx, &st)
		cancel()
		_, retry, final := q.judge(ctx, FinishReason{Unified: abi.ReasonLength}, Usage{})
		require.False(t, retry)
		require.ErrorIs(t, final, ErrGaveUp)
	})
}

func TestOverrides_Apply(t *testing.T) {
	temp, sys := 0.1, "be brief"
	req := &Request{System: "orig", MaxOutputTokens: 10, Headers: http.Header{"A": {"1"}}}
	require.Same(t, req, (&Overrides{}).Apply(req), "no overrides: the request itself")
	got := (&Overrides{System: &sys, Temperature: &temp, Headers: http.Header{"B": {"2"}}}).Apply(req)
	require.Equal(t, &Request{System: "be brief", MaxOutputTokens: 10, Temperature: &temp, Headers: http.Header{"B": {"2"}}}, got)
	require.Equal(t, "orig", req.System, "the caller's request is untouched")
	c := &Call{Overrides: Overrides{MaxOutputTokens: 5}}
	require.Equal(t, 5, c.Request(req).MaxOutputTokens)
}

// Defect 12.8: in the reference, a rule that throws on a later failure
// fires onFailure with the previous attempt as "current". Here the outcome
// always ends with the attempt that failed last.
func TestDefect12_8_FailingConditionReportsTheCurrentAttempt(t *testing.T) {
	broken := failClosed{ConditionFunc(func(_ context.Context, a *Attempt) (Decision, error) {
		if a.Number == 2 {
			return Decision{}, errors.New("plugin trapped")
		}
		return Decision{}, nil
	})}
	var got Outcome
	r := mustNew(t, base, WithRules(broken, Fallback(fb)),
		WithOnFailure(func(_ context.Context, o Outcome) { got = o }))
	fn, _ := script(errN(1), errN(2))
	_, err := Do(context.Background(), r, fn)
	require.ErrorContains(t, err, "plugin trapped")
	require.Equal(t, fb, got.Model)
	require.Len(t, got.Attempts, 2)
	require.Equal(t, "failure 2", got.Attempts[1].Err.Error())
	require.Same(t, err, got.Err)
}

func TestSleepCtx(t *testing.T) {
	require.NoError(t, sleepCtx(context.Background(), time.Microsecond))
	require.NoError(t, sleepCtx(context.Background(), 0))

	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("caller left")
	go func() { time.Sleep(time.Millisecond); cancel(stop) }()
	require.ErrorIs(t, sleepCtx(ctx, time.Hour), stop, "a long backoff ends with the caller")
	require.ErrorIs(t, sleepCtx(ctx, 0), context.Canceled)
}

func TestOverrides_Precedence(t *testing.T) {
	s1, s2 := "s1", "s2"
	t1, t2 := 0.1, 0.2
	p1 := 0.9
	seed := int64(7)
	rule := Overrides{System: &s1, MaxOutputTokens: 10, Temperature: &t1, TopP: &p1,
		StopSequences: []string{"a"}, Seed: &seed, Headers: http.Header{"X": {"1"}},
		ProviderOptions: map[string]any{"openai": 1}}
	hook := &Overrides{System: &s2, Temperature: &t2, Headers: http.Header{"Y": {"2"}}}
	got := rule.over(hook)
	require.Equal(t, Overrides{System: &s2, MaxOutputTokens: 10, Temperature: &t2, TopP: &p1,
		StopSequences: []string{"a"}, Seed: &seed, Headers: http.Header{"Y": {"2"}},
		ProviderOptions: map[string]any{"openai": 1}}, got)
	require.Equal(t, rule, rule.over(nil))
	require.Equal(t, rule, Overrides{}.over(&rule), "every field can be overridden")

	req := &Request{System: "orig", Temperature: &t2}
	applied := rule.Apply(req)
	require.Equal(t, &Request{System: "s1", MaxOutputTokens: 10, Temperature: &t1, TopP: &p1,
		StopSequences: []string{"a"}, Seed: &seed, Headers: http.Header{"X": {"1"}},
		ProviderOptions: map[string]any{"openai": 1}}, applied)
	require.True(t, (*Overrides)(nil).IsZero())
	require.Nil(t, rule.Apply(nil))
}
