package driver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/stretchr/testify/require"
)

func resultAttempt(r abi.Reason) *Attempt {
	return &Attempt{Class: abi.ClassNone, RetryAfter: -1, Finish: FinishReason{Unified: r}}
}

func TestMatch(t *testing.T) {
	sentinel := errors.New("sentinel")
	refusal := &abi.RefusalError{Transform: "t", Phrase: "p"}
	tests := []struct {
		name string
		m    Match
		a    *Attempt
		want bool
	}{
		{name: "status hit", m: OnStatus(429, 503), a: attemptOf(status(503)), want: true},
		{name: "status miss", m: OnStatus(429), a: attemptOf(status(500)), want: false},
		{name: "no codes match nothing", m: OnStatus(), a: attemptOf(status(500)), want: false},
		{name: "status range hit", m: OnStatusRange(500, 599), a: attemptOf(status(529)), want: true},
		{name: "status range miss", m: OnStatusRange(500, 599), a: attemptOf(status(429)), want: false},
		{name: "status range ignores errors without status", m: OnStatusRange(0, 599), a: attemptOf(errors.New("x")), want: false},
		{name: "class", m: OnClass(abi.ClassRateLimit, abi.ClassOverloaded), a: attemptOf(status(529)), want: true},
		{name: "error is", m: OnErrorIs(sentinel), a: attemptOf(fmt.Errorf("w: %w", sentinel)), want: true},
		{name: "error is miss", m: OnErrorIs(sentinel), a: attemptOf(errors.New("sentinel")), want: false},
		{name: "error as", m: OnErrorAs[*abi.RefusalError](), a: attemptOf(fmt.Errorf("w: %w", refusal)), want: true},
		{name: "error as miss", m: OnErrorAs[*abi.RefusalError](), a: attemptOf(status(500)), want: false},
		{name: "error predicate", m: OnError(func(err error) bool { return err.Error() == "x" }), a: attemptOf(errors.New("x")), want: true},
		{name: "nil error predicate never matches", m: OnError(nil), a: attemptOf(errors.New("x")), want: false},
		{name: "message ignores case", m: OnMessage("OVERLOADED"), a: attemptOf(errors.New("server overloaded")), want: true},
		{name: "message miss", m: OnMessage("quota"), a: attemptOf(errors.New("server overloaded")), want: false},
		{name: "message regexp", m: OnMessageRegexp(regexp.MustCompile(`^rate.*exceeded$`)), a: attemptOf(errors.New("rate limit exceeded")), want: true},
		{name: "timeout", m: Timeout(), a: attemptOf(&DeadlineError{Deadline: abi.DeadlineAttempt}), want: true},
		{name: "timeout is not canceled", m: Timeout(), a: attemptOf(context.Canceled), want: false},
		{name: "canceled", m: Canceled(), a: attemptOf(context.Canceled), want: true},
		{name: "retryable", m: Retryable(true), a: attemptOf(status(503)), want: true},
		{name: "not retryable", m: Retryable(false), a: attemptOf(status(400)), want: true},
		{name: "retryable needs a provider error", m: Retryable(false), a: attemptOf(errors.New("x")), want: false},
		{name: "any error", m: AnyError(), a: attemptOf(errors.New("x")), want: true},
		{name: "any error skips results", m: AnyError(), a: resultAttempt(abi.ReasonContentFilter), want: false},
		{name: "finish hit", m: OnFinish(abi.ReasonContentFilter), a: resultAttempt(abi.ReasonContentFilter), want: true},
		{name: "finish miss", m: OnFinish(abi.ReasonContentFilter), a: resultAttempt(abi.ReasonStop), want: false},
		{name: "finish skips errors", m: OnFinish(abi.ReasonUnknown), a: attemptOf(errors.New("x")), want: false},
		{name: "result predicate", m: OnResult(func(a *Attempt) bool { return a.Usage.OutputTokens == 0 }), a: resultAttempt(abi.ReasonStop), want: true},
		{name: "error predicates skip results", m: OnMessage(""), a: resultAttempt(abi.ReasonStop), want: false},
		{name: "and", m: And(OnStatus(429), Retryable(true)), a: attemptOf(status(429)), want: true},
		{name: "and miss", m: And(OnStatus(429), Retryable(false)), a: attemptOf(status(429)), want: false},
		{name: "empty and matches", m: And(), a: attemptOf(errors.New("x")), want: true},
		{name: "or", m: Or(OnStatus(500), OnStatus(429)), a: attemptOf(status(429)), want: true},
		{name: "empty or matches nothing", m: Or(), a: attemptOf(errors.New("x")), want: false},
		{name: "not", m: Not(OnStatus(429)), a: attemptOf(status(500)), want: true},
		{name: "not not", m: Not(Not(OnStatus(429))), a: attemptOf(status(429)), want: true},
		{name: "zero match matches nothing", m: Match{}, a: attemptOf(errors.New("x")), want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.m.Matches(tc.a))
		})
	}
}

func TestRule_Decide(t *testing.T) {
	r := OnStatus(429).Switch(fb).Attempts(2).Delay(time.Second).Backoff(2).Timeout(time.Minute)
	d, err := r.Decide(context.Background(), attemptOf(status(429)))
	require.NoError(t, err)
	require.Equal(t, Decision{Action: abi.ActionSwitch, Model: "test/fb", MaxAttempts: 2, Delay: time.Second,
		BackoffFactor: 2, Timeout: time.Minute}, d)
	d, err = r.Decide(context.Background(), attemptOf(status(500)))
	require.NoError(t, err)
	require.Equal(t, Decision{}, d, "no match is no opinion")
	require.Equal(t, "status [429] → switch test/fb", r.String())

	// Builders return copies: refining a shared rule leaves it untouched.
	shared := AnyError().Retry()
	_ = shared.Attempts(5)
	d, _ = shared.Decide(context.Background(), attemptOf(errors.New("x")))
	require.Equal(t, 2, d.MaxAttempts)
	require.True(t, d.UseRetryAfter)
	d, _ = shared.IgnoreRetryAfter().Decide(context.Background(), attemptOf(errors.New("x")))
	require.False(t, d.UseRetryAfter)
}

func TestNew_BadInput(t *testing.T) {
	dup := &fakeModel{"test/fb"}
	tests := []struct {
		name string
		base Model
		opts []Option
		want string
	}{
		{name: "nil base", base: nil, want: "nil base model"},
		{name: "nil rule", base: base, opts: []Option{WithRules(Fallback(fb), nil)}, want: "rule 1 is nil"},
		{name: "nil *Rule", base: base, opts: []Option{WithRules((*Rule)(nil))}, want: "rule 0 is nil"},
		{name: "switch to nil", base: base, opts: []Option{WithRules(OnStatus(429).Switch(nil))}, want: "switches to a nil model"},
		{name: "fallback to nil", base: base, opts: []Option{WithRules(Fallback(nil))}, want: "switches to a nil model"},
		{name: "retry with 1 attempt", base: base, opts: []Option{WithRules(Timeout().Retry().Attempts(1))}, want: "n >= 2"},
		{name: "switch with 0 attempts", base: base, opts: []Option{WithRules(Fallback(fb).Attempts(0))}, want: "n >= 1"},
		{name: "negative rule delay", base: base, opts: []Option{WithRules(Fallback(fb).Delay(-time.Second))}, want: "negative delay"},
		{name: "rule factor below 1", base: base, opts: []Option{WithRules(Fallback(fb).Backoff(0.5))}, want: "below 1"},
		{name: "rule zero timeout", base: base, opts: []Option{WithRules(Fallback(fb).Timeout(0))}, want: "not positive"},
		{name: "zero match", base: base, opts: []Option{WithRules(Match{}.Switch(fb))}, want: "zero Match"},
		{name: "negative backoff delay", base: base, opts: []Option{WithBackoff(Backoff{Delay: -1})}, want: "negative backoff"},
		{name: "backoff factor below 1", base: base, opts: []Option{WithBackoff(Backoff{Factor: 0.5})}, want: "below 1"},
		{name: "unknown jitter", base: base, opts: []Option{WithBackoff(Backoff{Jitter: 9})}, want: "unknown jitter"},
		{name: "max attempts 0", base: base, opts: []Option{WithMaxAttempts(0)}, want: "below 1"},
		{name: "negative budget", base: base, opts: []Option{WithBudget(-1)}, want: "negative budget"},
		{name: "negative attempt timeout", base: base, opts: []Option{WithAttemptTimeout(-1)}, want: "negative attempt timeout"},
		{name: "negative retry-after cap", base: base, opts: []Option{WithRetryAfterCap(-1)}, want: "negative retry-after"},
		{name: "invalid sticky count", base: base, opts: []Option{WithSticky(StickyRequests(-1))}, want: "invalid sticky"},
		{name: "invalid sticky duration", base: base, opts: []Option{WithSticky(StickyFor(0))}, want: "invalid sticky"},
		{name: "two models share a key", base: base, opts: []Option{WithRules(Fallback(fb), Fallback(dup))}, want: `share the key "test/fb"`},
		{name: "nil extra model", base: base, opts: []Option{WithModels(nil)}, want: "nil model"},
		{name: "empty key", base: &fakeModel{""}, want: "empty key"},
		{name: "unknown key in a native rule", base: base, opts: []Option{WithRules(AnyError().SwitchKey("nope/x"))}, want: `unknown model key "nope/x"`},
		{name: "empty key in a native rule", base: base, opts: []Option{WithRules(AnyError().SwitchKey(""))}, want: "empty model key"},
		{name: "nil logger", base: base, opts: []Option{WithLogger(nil)}, want: "nil logger"},
		{name: "nil option", base: base, opts: []Option{nil}, want: "nil option"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.base, tc.opts...)
			require.Nil(t, r)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestParseSticky(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: "after-request", want: "after-request"},
		{in: "after-3-requests", want: "after-3-requests"},
		{in: "after-30-seconds", want: "after-30s"},
		{in: "after-0-requests", wantErr: true},
		{in: "after-x-requests", wantErr: true},
		{in: "after-3-minutes", wantErr: true},
		{in: "sticky", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			s, err := ParseSticky(tc.in)
			if tc.wantErr {
				require.ErrorContains(t, err, "unknown sticky policy")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, s.String())
		})
	}
}

// Conditions that are not native rules (a Wasm plugin, a ConditionFunc)
// name models by key.
func TestDo_ForeignConditions(t *testing.T) {
	switchTo := func(key string) Condition {
		return ConditionFunc(func(context.Context, *Attempt) (Decision, error) {
			return Decision{Action: abi.ActionSwitch, Model: key}, nil
		})
	}
	failing := ConditionFunc(func(context.Context, *Attempt) (Decision, error) { return Decision{}, errors.New("plugin trapped") })
	panicking := ConditionFunc(func(context.Context, *Attempt) (Decision, error) { panic("bad plugin") })
	tests := []struct {
		name       string
		rules      []Condition
		wantModels []string
		wantLog    string
		wantErr    string
	}{
		{name: "a key declared with WithModels", rules: []Condition{switchTo("test/fb2")},
			wantModels: []string{"test/base", "test/fb2"}},
		{name: "a native rule by key", rules: []Condition{AnyError().SwitchKey("test/fb2")},
			wantModels: []string{"test/base", "test/fb2"}},
		{name: "a key known from a native rule", rules: []Condition{switchTo("test/fb"), OnStatus(418).Switch(fb)},
			wantModels: []string{"test/base", "test/fb"}},
		{name: "an unknown key is skipped with a log line", rules: []Condition{switchTo("nope/model"), Fallback(fb)},
			wantModels: []string{"test/base", "test/fb"}, wantLog: "nope/model"},
		{name: "a failing condition is no opinion", rules: []Condition{failing, Fallback(fb)},
			wantModels: []string{"test/base", "test/fb"}, wantLog: "plugin trapped"},
		{name: "a panicking condition is no opinion", rules: []Condition{panicking, Fallback(fb)},
			wantModels: []string{"test/base", "test/fb"}, wantLog: "bad plugin"},
		{name: "a fail-closed condition fails the request", rules: []Condition{failClosed{failing}, Fallback(fb)},
			wantModels: []string{"test/base"}, wantErr: "plugin trapped"},
		{name: "an unknown action is skipped", rules: []Condition{ConditionFunc(func(context.Context, *Attempt) (Decision, error) {
			return Decision{Action: 42}, nil
		}), Fallback(fb)}, wantModels: []string{"test/base", "test/fb"}, wantLog: "unknown action"},
		{name: "zero decision is no opinion", rules: []Condition{ConditionFunc(func(context.Context, *Attempt) (Decision, error) {
			return Decision{}, nil
		})}, wantModels: []string{"test/base"}, wantErr: "boom"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			r := mustNew(t, base, WithRules(tc.rules...), WithModels(fb2),
				WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			fn, log := script(errors.New("boom"))
			_, err := Do(context.Background(), r, fn)
			require.Equal(t, tc.wantModels, models(*log))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			if tc.wantLog != "" {
				require.Contains(t, logs.String(), tc.wantLog)
			} else {
				require.Empty(t, logs.String())
			}
		})
	}
}

type failClosed struct{ Condition }

func (failClosed) FailPolicy() abi.FailPolicy { return abi.FailClosed }

func TestDo_ConditionSeesTheAttempt(t *testing.T) {
	clk := newClock()
	var got []Attempt
	spy := ConditionFunc(func(_ context.Context, a *Attempt) (Decision, error) {
		got = append(got, *a)
		return Decision{}, nil
	})
	r := mustNew(t, base, clk.option(), WithRules(spy, Fallback(fb)))
	calls := 0
	_, err := Do(context.Background(), r, func(ctx context.Context, c *Call) (string, error) {
		calls++
		clk.advance(time.Duration(calls) * time.Second)
		return "", statusRetryAfter(429, "Retry-After", "2")
	})
	require.Error(t, err)
	require.Len(t, got, 2)
	a := got[1]
	require.Equal(t, 2, a.Number)
	require.Equal(t, "test/fb", a.Model)
	require.Equal(t, 3*time.Second, a.Elapsed)
	require.Equal(t, 2*time.Second, a.Duration)
	require.Equal(t, abi.ClassRateLimit, a.Class)
	require.Equal(t, 429, a.Status)
	require.Equal(t, 2*time.Second, a.RetryAfter)
	require.Equal(t, []abi.AttemptSummary{{Model: "test/base", Class: abi.ClassRateLimit, Status: 429, Duration: time.Second}}, a.Earlier)
}

func TestDo_PanickingPredicateIsNoOpinion(t *testing.T) {
	var logs bytes.Buffer
	r := mustNew(t, base, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		WithRules(OnError(func(error) bool { panic("oops") }).Switch(fb2), Fallback(fb)))
	fn, log := script(errors.New("boom"))
	_, err := Do(context.Background(), r, fn)
	require.NoError(t, err)
	require.Equal(t, []string{"test/base", "test/fb"}, models(*log))
	require.Contains(t, logs.String(), "oops")
}

// A condition that switches to a model the Runner does
// not know is never silent: a log line, the attempt's record (callbacks and
// the final error), the observer, and, when nothing else matches, the
// request's error.
func TestDo_UnknownModelIsNeverSilent(t *testing.T) {
	switchTo := func(key string) Condition {
		return ConditionFunc(func(context.Context, *Attempt) (Decision, error) {
			return Decision{Action: abi.ActionSwitch, Model: key}, nil
		})
	}
	t.Run("nothing else matches: the request's error names it", func(t *testing.T) {
		var logs bytes.Buffer
		var failed []Outcome
		obs := &recObserver{}
		r := mustNew(t, base, WithRules(switchTo("nope/model")), WithObserver(obs),
			WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
			WithOnFailure(func(_ context.Context, o Outcome) { failed = append(failed, o) }))
		fn, log := script(status(503))
		_, err := Do(context.Background(), r, fn)
		require.Equal(t, []string{"test/base"}, models(*log))
		require.ErrorIs(t, err, ErrUnknownModel)
		var ue *UnknownModelError
		require.ErrorAs(t, err, &ue)
		require.Equal(t, UnknownModelError{Condition: 0, Model: "nope/model"}, *ue)
		var re *RetryError
		require.ErrorAs(t, err, &re, "not the lone attempt's raw error: the misconfiguration is the stop's cause")
		require.ErrorIs(t, re.Cause, ErrUnknownModel)
		var pe *ProviderError
		require.ErrorAs(t, err, &pe, "the attempt's own error is still there")
		require.Contains(t, err.Error(), `"nope/model"`)
		require.Len(t, failed, 1)
		require.ErrorIs(t, failed[0].Attempts[0].ConditionErr, ErrUnknownModel)
		require.Len(t, obs.ends, 1)
		require.ErrorIs(t, obs.ends[0].ConditionErr, ErrUnknownModel)
		require.Contains(t, logs.String(), "nope/model")
	})
	t.Run("another rule matches: the record keeps it", func(t *testing.T) {
		var ok []Outcome
		obs := &recObserver{}
		r := mustNew(t, base, WithRules(switchTo("nope/model"), Fallback(fb)), WithObserver(obs),
			WithOnSuccess(func(_ context.Context, o Outcome) { ok = append(ok, o) }))
		fn, log := script(status(503))
		_, err := Do(context.Background(), r, fn)
		require.NoError(t, err)
		require.Equal(t, []string{"test/base", "test/fb"}, models(*log))
		require.Len(t, ok, 1)
		var ue *UnknownModelError
		require.ErrorAs(t, ok[0].Attempts[0].ConditionErr, &ue)
		require.Equal(t, "nope/model", ue.Model)
		require.NoError(t, ok[0].Attempts[1].ConditionErr)
		require.ErrorIs(t, obs.ends[0].ConditionErr, ErrUnknownModel)
	})
	t.Run("a fail-closed condition fails the request with it", func(t *testing.T) {
		r := mustNew(t, base, WithRules(failClosed{switchTo("nope/model")}, Fallback(fb)))
		fn, log := script(status(503))
		_, err := Do(context.Background(), r, fn)
		require.Equal(t, []string{"test/base"}, models(*log))
		require.ErrorIs(t, err, ErrUnknownModel)
		require.ErrorContains(t, err, "fail-closed")
	})
	t.Run("a result condition does not fail a good answer, but keeps it on the record", func(t *testing.T) {
		var ok []Outcome
		g1 := &genModel{key: "test/g1", script: []genAnswer{{finish: abi.ReasonContentFilter}}}
		r := mustNew(t, g1, WithRules(switchTo("nope/model")),
			WithOnSuccess(func(_ context.Context, o Outcome) { ok = append(ok, o) }))
		resp, err := r.Generate(context.Background(), &Request{})
		require.NoError(t, err)
		require.Equal(t, "from test/g1", resp.Text())
		require.Len(t, ok, 1)
		require.ErrorIs(t, ok[0].Attempts[0].ConditionErr, ErrUnknownModel)
	})
	t.Run("a failing condition is on the record too", func(t *testing.T) {
		var ok []Outcome
		boom := errors.New("plugin trapped")
		r := mustNew(t, base, WithRules(ConditionFunc(func(context.Context, *Attempt) (Decision, error) { return Decision{}, boom }), Fallback(fb)),
			WithOnSuccess(func(_ context.Context, o Outcome) { ok = append(ok, o) }))
		fn, _ := script(status(503))
		_, err := Do(context.Background(), r, fn)
		require.NoError(t, err)
		require.ErrorIs(t, ok[0].Attempts[0].ConditionErr, boom)
	})
}

// A request the model rejected (400, 401, 403, 404, 413, 422) is never
// resent unchanged to that model, whatever rule asks for it: the rule is
// skipped as if it did not match and the next one decides (here a switch
// to fb, which is still allowed). A rule carrying overrides changes the
// request and may retry it; retryable statuses retry as before.
func TestRejectedRequestIsNeverResentUnchanged(t *testing.T) {
	maxTokens := Overrides{MaxOutputTokens: 16}
	retryCond := ConditionFunc(func(context.Context, *Attempt) (Decision, error) {
		return Decision{Action: abi.ActionRetry, MaxAttempts: 3}, nil
	})
	kinds := []struct {
		name string
		rule Condition
		// changes: the rule carries overrides, so its resend is not unchanged.
		changes bool
	}{
		{"any error → retry", AnyError().Retry(), false},
		{"its status → retry", nil, false}, // OnStatus(code).Retry(), built per status
		{"retryable or not → retry", Or(Retryable(false), Retryable(true)).Retry().Attempts(3), false},
		{"any error → switch to the same model", AnyError().Switch(base).Attempts(2), false},
		{"a foreign condition → retry", retryCond, false},
		{"any error → retry with overrides", AnyError().Retry().Override(maxTokens), true},
	}
	for _, code := range []int{400, 401, 403, 404, 413, 422, 408, 429, 500} {
		rejected := code != 408 && code != 429 && code != 500
		for _, k := range kinds {
			t.Run(fmt.Sprintf("%d/%s", code, k.name), func(t *testing.T) {
				rule := k.rule
				if rule == nil {
					rule = OnStatus(code).Retry()
				}
				r := mustNew(t, base, WithRules(rule, Fallback(fb)))
				fn, log := script(status(code))
				got, err := Do(context.Background(), r, fn)
				if rejected && !k.changes {
					require.Equal(t, []string{"test/base", "test/fb"}, models(*log), "resent unchanged to the model that rejected it")
					require.NoError(t, err)
					require.Equal(t, "ok from test/fb", got)
					return
				}
				require.Equal(t, []string{"test/base", "test/base"}, models(*log), "the rule's resend")
				require.NoError(t, err)
				require.Equal(t, "ok from test/base", got)
				if k.changes {
					require.Equal(t, maxTokens, (*log)[1].Overrides)
				}
			})
		}
		t.Run(fmt.Sprintf("%d/no other rule", code), func(t *testing.T) {
			var logs bytes.Buffer
			r := mustNew(t, base, WithRules(AnyError().Retry()),
				WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
			fn, log := script(status(code), status(code))
			_, err := Do(context.Background(), r, fn)
			if rejected {
				require.Contains(t, logs.String(), "is skipped", "the skip is logged at debug")
				require.Equal(t, []string{"test/base"}, models(*log))
				var pe *ProviderError
				require.ErrorAs(t, err, &pe, "the model's own rejection is the request's error")
				require.Equal(t, code, pe.Status)
			} else {
				require.Equal(t, []string{"test/base", "test/base"}, models(*log))
			}
		})
	}
}
