package driver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// coolChanges records Cooldown.OnChange calls as "model until" offsets
// from start, or "model back" when a cooldown ended.
type coolChanges struct {
	mu    sync.Mutex
	start time.Time
	log   []string
}

func (c *coolChanges) record(model string, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if until.IsZero() {
		c.log = append(c.log, model+" back")
		return
	}
	c.log = append(c.log, model+" until +"+until.Sub(c.start).String())
}

func TestCooldown_ConsecutiveFailuresTakeAModelOutOfRotation(t *testing.T) {
	clk := newClock()
	changes := &coolChanges{start: clk.now()}
	r := mustNew(t, base, clk.option(),
		WithRules(OnStatusRange(500, 599).Switch(fb)),
		WithCooldown(Cooldown{Failures: 2, For: time.Minute, OnChange: changes.record}))
	ctx := context.Background()
	run := func(errs ...error) []string {
		t.Helper()
		fn, log := script(errs...)
		out, err := Do(ctx, r, fn)
		require.NoError(t, err)
		require.Equal(t, "ok from "+(*log)[len(*log)-1].Model, out)
		return models(*log)
	}

	require.Equal(t, []string{"test/base", "test/fb"}, run(status(503)), "one failure: still in rotation")
	require.Equal(t, []string{"test/base", "test/fb"}, run(status(503)), "the second in a row starts the cooldown")
	require.Equal(t, []string{"test/fb"}, run(), "cooling down: requests start on the next model")
	clk.advance(time.Minute)
	require.Equal(t, []string{"test/base", "test/fb"}, run(status(503)), "after it, one attempt probes the model; its failure…")
	require.Equal(t, []string{"test/fb"}, run(), "…cools it down again at once")
	clk.advance(time.Minute)
	require.Equal(t, []string{"test/base"}, run(), "a probe that succeeds puts it back in rotation")
	require.Equal(t, []string{"test/base", "test/fb"}, run(status(503)), "and the count starts again from zero")
	require.Equal(t, []string{"test/base"}, run())
	require.Equal(t, []string{"test/base until +1m0s", "test/base until +2m0s", "test/base back"}, changes.log)
}

func TestCooldown_RulesSkipACoolingModel(t *testing.T) {
	clk := newClock()
	r := mustNew(t, base, clk.option(),
		WithRules(OnStatusRange(500, 599).Switch(fb), OnStatusRange(500, 599).Switch(fb2)),
		WithCooldown(Cooldown{Failures: 1, For: time.Minute}))
	ctx := context.Background()

	fn, log := script(status(503), status(503)) // base fails, then fb fails: both cool down
	out, err := Do(ctx, r, fn)
	require.NoError(t, err)
	require.Equal(t, "ok from test/fb2", out)
	require.Equal(t, []string{"test/base", "test/fb", "test/fb2"}, models(*log))

	fn, log = script()
	_, err = Do(ctx, r, fn)
	require.NoError(t, err)
	require.Equal(t, []string{"test/fb2"}, models(*log), "the first model in rotation is fb2")

	clk.advance(time.Minute)
	fn, log = script(status(503))
	_, err = Do(ctx, r, fn)
	require.NoError(t, err)
	require.Equal(t, []string{"test/base", "test/fb"}, models(*log), "after the cooldown, both are tried again")
}

func TestCooldown_OnlyHealthFailuresCountByDefault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		cools bool
	}{
		{"server error", status(500), true},
		{"overloaded", status(529), true},
		{"rate limit", status(429), true},
		{"attempt deadline", &DeadlineError{Deadline: abi.DeadlineAttempt, Limit: time.Second}, true},
		{"network", &ProviderError{Provider: "test", Message: "connection reset", Class: abi.ClassNetwork}, true},
		{"bad request", status(400), false},
		{"auth", status(401), false},
		{"refusal", &abi.RefusalError{Phrase: "i can't", Text: "I can't"}, false},
		{"the request's budget", &DeadlineError{Deadline: abi.DeadlineTotal, Limit: time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			r := mustNew(t, base, clk.option(), WithRules(Fallback(fb)),
				WithCooldown(Cooldown{Failures: 1, For: time.Minute}))
			fn, _ := script(tc.err)
			_, _ = Do(context.Background(), r, fn)
			fn, log := script()
			_, err := Do(context.Background(), r, fn)
			require.NoError(t, err)
			want := "test/base"
			if tc.cools {
				want = "test/fb"
			}
			require.Equal(t, []string{want}, models(*log))
		})
	}
}

func TestCooldown_CustomWhenAndRetryAfter(t *testing.T) {
	clk := newClock()
	r := mustNew(t, base, clk.option(), WithRules(Fallback(fb)), WithRetryAfterCap(10*time.Minute),
		WithCooldown(Cooldown{Failures: 1, For: time.Minute, When: OnStatus(429)}))
	ctx := context.Background()
	start := func() string {
		fn, log := script()
		_, err := Do(ctx, r, fn)
		require.NoError(t, err)
		return (*log)[0].Model
	}
	fn, _ := script(status(503))
	_, _ = Do(ctx, r, fn)
	require.Equal(t, "test/base", start(), "When counts only 429s")

	fn, _ = script(statusRetryAfter(429, "Retry-After", "300"))
	_, _ = Do(ctx, r, fn)
	clk.advance(2 * time.Minute)
	require.Equal(t, "test/fb", start(), "a longer Retry-After lengthens the cooldown")
	clk.advance(3 * time.Minute)
	require.Equal(t, "test/base", start())
}

func TestCooldown_NeverRefusesARequestByItself(t *testing.T) {
	clk := newClock()
	r := mustNew(t, base, clk.option(), WithRules(OnStatus(503).Retry()),
		WithCooldown(Cooldown{Failures: 1, For: time.Minute}))
	ctx := context.Background()
	fn, log := script(status(503))
	_, err := Do(ctx, r, fn)
	var pe *ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 503, pe.Status)
	require.Equal(t, []string{"test/base"}, models(*log), "the failure cooled the only model: its retry is skipped (fail fast)")

	fn, log = script()
	out, err := Do(ctx, r, fn)
	require.NoError(t, err, "every model cools down: the request still runs on its start model")
	require.Equal(t, "ok from test/base", out)
	require.Equal(t, []string{"test/base"}, models(*log))
}

func TestCooldown_Invalid(t *testing.T) {
	for _, c := range []Cooldown{{}, {Failures: 1}, {For: time.Second}, {Failures: -1, For: time.Second}, {Failures: 1, For: -time.Second}} {
		_, err := New(base, WithCooldown(c))
		require.ErrorContains(t, err, "cooldown needs Failures ≥ 1 and a positive For")
	}
}

// TestCooldown_Concurrent: requests share the cooldown state; the race
// detector checks the locking, the counts check nothing is lost.
func TestCooldown_Concurrent(t *testing.T) {
	r := mustNew(t, base, WithRules(OnStatusRange(500, 599).Switch(fb)),
		WithCooldown(Cooldown{Failures: 3, For: time.Hour}))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				_, err := Do(context.Background(), r, func(_ context.Context, c *Call) (string, error) {
					if c.Model == base {
						return "", status(503)
					}
					return "ok", nil
				})
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	fn, log := script()
	_, err := Do(context.Background(), r, fn)
	require.NoError(t, err)
	require.Equal(t, []string{"test/fb"}, models(*log))
}

// TestCooldown_Streams: the stream driver shares the engine, so a model
// whose streams keep failing before content is taken out of rotation too.
func TestCooldown_Streams(t *testing.T) {
	failing := &scriptModel{key: "p/failing", scripts: [][]sstep{sscript(preamble(), pErr(status(503)))}}
	good := &scriptModel{key: "p/good", scripts: [][]sstep{answer("hello")}}
	r := mustNew(t, failing, WithRules(Fallback(good)), WithCooldown(Cooldown{Failures: 2, For: time.Hour}))
	rm, err := NewRetryableModel(r)
	require.NoError(t, err)
	for range 3 {
		s, err := rm.Stream(t.Context(), &Request{})
		require.NoError(t, err)
		parts, err := drain(s)
		require.NoError(t, err)
		require.Contains(t, kinds(parts), "text-delta:hello")
	}
	require.Equal(t, 2, failing.opened(), "the third stream starts on the good model")
	require.Equal(t, 3, good.opened())
}

// A Retry-After cools its model for every request at once, but the request
// that heard it still comes back when the server said: a retry rule that
// waits out that Retry-After is not skipped, unless the model cools down
// for longer than it (its Failures-th failure started a cooldown).
func TestCooldown_RetryAfterRetryComesBackWhenTheServerSaid(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int
		want     []string
	}{
		{"the Retry-After is the whole cooldown", 5, []string{"test/base", "test/base"}},
		{"a longer cooldown than the Retry-After", 1, []string{"test/base", "test/fb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			r := mustNew(t, base, clk.option(), WithRules(OnStatus(429).Retry(), Fallback(fb)),
				WithCooldown(Cooldown{Failures: tc.failures, For: time.Minute}))
			fn, log := script(statusRetryAfter(429, "Retry-After-Ms", "20"))
			out, err := Do(context.Background(), r, fn)
			require.NoError(t, err)
			require.Equal(t, "ok from "+tc.want[1], out)
			require.Equal(t, tc.want, models(*log))
		})
	}
}
