package driver

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// replicas returns n Runners on one State with the clock clk, as n
// replicas of a service on one store.
func replicas(t *testing.T, n int, clk *fakeClock, opts ...Option) []*Runner {
	t.Helper()
	s := newLocalState(clk.now)
	out := make([]*Runner, n)
	for i := range out {
		out[i] = mustNew(t, base, append([]Option{clk.option(), WithState(s)}, opts...)...)
	}
	return out
}

// TestState_OneProbeAfterACooldown: when a cooldown ends, exactly one of
// 50 concurrent requests (across two Runners sharing the State) sends its
// attempt to the model; the others keep starting on the fallback until
// the probe's success puts the model back. Before State, every request
// after the cooldown's end went to the model.
func TestState_OneProbeAfterACooldown(t *testing.T) {
	clk := newClock()
	rs := replicas(t, 2, clk, WithRules(Fallback(fb)), WithCooldown(Cooldown{Failures: 1, For: time.Minute}))
	fn, _ := script(status(503))
	_, err := Do(context.Background(), rs[0], fn)
	require.NoError(t, err)
	clk.advance(time.Minute)

	var onBase, onFb atomic.Int32
	release := make(chan struct{})
	probing := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			_, err := Do(context.Background(), rs[i%2], func(_ context.Context, c *Call) (string, error) {
				if c.Model == base {
					if onBase.Add(1) == 1 {
						close(probing)
						<-release // the probe is in flight while the others start
					}
					return "ok", nil
				}
				onFb.Add(1)
				return "ok", nil
			})
			require.NoError(t, err)
		})
	}
	finished := make(chan struct{})
	releaser := make(chan struct{})
	go func() {
		defer close(releaser)
		select {
		case <-probing:
		case <-finished: // no probe at all: nothing to release
			return
		}
		for onFb.Load() < 49 && onBase.Load() == 1 {
			time.Sleep(time.Millisecond)
		}
		close(release)
	}()
	wg.Wait()
	close(finished)
	<-releaser
	require.Equal(t, int32(1), onBase.Load(), "exactly one request probes the model")
	require.Equal(t, int32(49), onFb.Load(), "the others start on the fallback while it is probed")

	for _, r := range rs {
		fn, log := script()
		_, err := Do(context.Background(), r, fn)
		require.NoError(t, err)
		require.Equal(t, []string{"test/base"}, models(*log), "the probe's success put it back for every Runner")
	}
}

// TestState_RetryAfterCoolsEveryReplicaAtOnce: a 429 with a Retry-After
// seen by one Runner cools the model for another sharing the State, at
// once (before Failures consecutive failures) and for the Retry-After.
func TestState_RetryAfterCoolsEveryReplicaAtOnce(t *testing.T) {
	clk := newClock()
	changes := &coolChanges{start: clk.now()}
	rs := replicas(t, 2, clk, WithRules(Fallback(fb)), WithRetryAfterCap(10*time.Minute),
		WithCooldown(Cooldown{Failures: 3, For: time.Minute, OnChange: changes.record}))
	start := func(r *Runner) string {
		t.Helper()
		fn, log := script()
		_, err := Do(context.Background(), r, fn)
		require.NoError(t, err)
		return (*log)[0].Model
	}
	fn, log := script(statusRetryAfter(429, "Retry-After", "120"))
	_, err := Do(context.Background(), rs[0], fn)
	require.NoError(t, err)
	require.Equal(t, []string{"test/base", "test/fb"}, models(*log))
	require.Equal(t, "test/fb", start(rs[1]), "the other replica never calls the model it was told to leave alone")
	clk.advance(119 * time.Second)
	require.Equal(t, "test/fb", start(rs[1]), "for the Retry-After, longer than For")
	clk.advance(time.Second)
	require.Equal(t, "test/base", start(rs[1]), "then one request probes it")
	require.Equal(t, "test/base", start(rs[0]), "and its success puts it back for all")
	require.Equal(t, []string{"test/base until +2m0s", "test/base back"}, changes.log)
}

// scoped is a model that declares a rate-limit scope.
type scoped struct {
	fakeModel
	scope string
}

func (m *scoped) RateLimitScope() string { return m.scope }

// TestState_RetryAfterCoolsTheWholeScope: models on one account share its
// rate limit; a Retry-After on one keeps the others out for that long.
func TestState_RetryAfterCoolsTheWholeScope(t *testing.T) {
	clk := newClock()
	a := &scoped{fakeModel{"acct/a"}, "account-1"}
	b := &scoped{fakeModel{"acct/b"}, "account-1"}
	c := &scoped{fakeModel{"other/c"}, "account-2"}
	r := mustNew(t, a, clk.option(), WithRules(Fallback(b), Fallback(c)),
		WithCooldown(Cooldown{Failures: 3, For: time.Minute}))
	fn, log := script(statusRetryAfter(429, "Retry-After", "30"))
	_, err := Do(context.Background(), r, fn)
	require.NoError(t, err)
	require.Equal(t, []string{"acct/a", "other/c"}, models(*log), "b shares a's account: skipped at once")

	fn, log = script()
	_, err = Do(context.Background(), r, fn)
	require.NoError(t, err)
	require.Equal(t, []string{"other/c"}, models(*log))

	clk.advance(30 * time.Second)
	fn, log = script(status(503))
	_, err = Do(context.Background(), r, fn)
	require.NoError(t, err)
	require.Equal(t, []string{"acct/a", "acct/b"}, models(*log), "after it a is probed and b is back")
}

// TestState_StickyShared: a fallback that succeeds on one Runner is the
// start of the next requests on another sharing the State (the same
// policy derives the same state key).
func TestState_StickyShared(t *testing.T) {
	clk := newClock()
	rs := replicas(t, 2, clk, WithRules(Fallback(fb)), WithSticky(StickyRequests(2)))
	require.Equal(t, rs[0].StateKey(), rs[1].StateKey())
	require.Equal(t, []string{"test/base", "test/fb"}, run(t, rs[0], base))
	require.Equal(t, []string{"test/fb"}, run(t, rs[1]))
	require.Equal(t, []string{"test/fb"}, run(t, rs[0]))
	require.Equal(t, []string{"test/base"}, run(t, rs[1]), "two requests, on either Runner, used it up")
}

func TestState_Keys(t *testing.T) {
	s := NewLocalState()
	key := func(opts ...Option) string {
		return mustNew(t, base, append([]Option{WithState(s)}, opts...)...).StateKey()
	}
	k := key(WithRules(Fallback(fb)), WithSticky(StickyRequests(2)))
	require.Regexp(t, `^runner-[0-9a-f]{16}$`, k)
	require.Equal(t, k, key(WithRules(Fallback(fb)), WithSticky(StickyRequests(2))), "the same policy, the same key")
	require.NotEqual(t, k, key(WithRules(Fallback(fb2)), WithSticky(StickyRequests(2))), "other models")
	require.NotEqual(t, k, key(WithRules(Fallback(fb)), WithSticky(StickyRequests(3))), "another sticky policy")
	require.Equal(t, "checkout", key(WithStateKey("checkout")))

	_, err := New(base, WithState(nil))
	require.ErrorContains(t, err, "nil State")
	_, err = New(base, WithStateKey(""))
	require.ErrorContains(t, err, "empty state key")

	// An explicit key shares sticky fallbacks between different policies;
	// one names a model the other does not know, which it ignores.
	r1 := mustNew(t, base, WithState(s), WithStateKey("shared"), WithRules(Fallback(fb2)), WithSticky(StickyRequests(5)))
	r2 := mustNew(t, base, WithState(s), WithStateKey("shared"), WithRules(Fallback(fb)), WithSticky(StickyRequests(5)))
	require.Equal(t, []string{"test/base", "test/fb2"}, run(t, r1, base))
	require.Equal(t, []string{"test/base"}, run(t, r2), "an unknown sticky model is no sticky fallback")
}

// TestState_BudgetShared: two Runners on one State count their requests
// and retries together.
func TestState_BudgetShared(t *testing.T) {
	clk := newClock()
	rs := replicas(t, 2, clk, WithRules(OnStatus(503).Retry()), WithRetryBudget(RetryBudget{Percent: 10, MinRetries: 1}))
	inRetry, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := Do(context.Background(), rs[0], func(_ context.Context, c *Call) (string, error) {
			if c.Number == 1 {
				return "", status(503)
			}
			close(inRetry)
			<-release // the only retry slot stays taken
			return "ok", nil
		})
		done <- err
	}()
	<-inRetry
	fn, log := script(status(503))
	_, err := Do(context.Background(), rs[1], fn)
	require.ErrorIs(t, err, ErrBudgetExhausted, "the other Runner's retry holds the slot")
	require.Len(t, *log, 1)
	close(release)
	require.NoError(t, <-done)

	fn, log = script(status(503))
	_, err = Do(context.Background(), rs[1], fn)
	require.NoError(t, err, "the slot is given back")
	require.Len(t, *log, 2)
	b := rs[0].state.(*localState).budget(rs[0].StateKey())
	require.Zero(t, b.requests.Load())
	require.Zero(t, b.retries.Load())
}

// blockedState is a State whose store hangs: every call waits for its ctx.
// It records whether End got a ctx that was still live.
type blockedState struct {
	*localState
	calls   atomic.Int32
	endLive atomic.Bool
}

func (s *blockedState) Begin(ctx context.Context, b BeginRequest) Snapshot {
	s.calls.Add(1)
	<-ctx.Done()
	return s.localState.Begin(ctx, b) // what a store falls back to
}

func (s *blockedState) End(ctx context.Context, key string) {
	s.endLive.Store(ctx.Err() == nil)
	s.localState.End(ctx, key)
}

// TestState_SlowStateHonoursTheRequestCtx: a State that blocks gets the
// request's ctx, so the caller's cancellation ends the request; what the
// request took is given back on a ctx that is not cancelled.
func TestState_SlowStateHonoursTheRequestCtx(t *testing.T) {
	s := &blockedState{localState: newLocalState(time.Now)}
	r := mustNew(t, base, WithState(s), WithRules(Fallback(fb)), WithRetryBudget(RetryBudget{}),
		WithCooldown(Cooldown{Failures: 1, For: time.Minute}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	canceller := make(chan struct{})
	go func() {
		defer close(canceller)
		for s.calls.Load() == 0 {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
		cancel()
	}()
	_, err := Do(ctx, r, func(ctx context.Context, _ *Call) (string, error) { return "", ctx.Err() })
	close(done)
	<-canceller
	require.Equal(t, int32(1), s.calls.Load(), "Begin was called, and blocked until the cancellation")
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, s.endLive.Load(), "End gets a ctx the cancellation does not reach")
	require.Zero(t, s.budget(r.StateKey()).requests.Load())
}

// TestState_SuccessOnACleanModelCallsNothing: the hot path is one call.
func TestState_SuccessOnACleanModelCallsNothing(t *testing.T) {
	s := &countingState{localState: newLocalState(time.Now)}
	r := mustNew(t, base, WithState(s), WithRules(Fallback(fb)), WithSticky(StickyRequests(1)),
		WithRetryBudget(RetryBudget{}), WithCooldown(Cooldown{Failures: 2, For: time.Minute}))
	for range 3 {
		require.Equal(t, []string{"test/base"}, run(t, r))
	}
	require.Equal(t, map[string]int{"Begin": 3, "End": 3}, s.counts(), "Begin, and End (which a store may make free)")

	s.reset()
	require.Equal(t, []string{"test/base", "test/fb"}, run503(t, r, base))
	require.Equal(t, map[string]int{"Begin": 1, "End": 1, "Failed": 1, "TryRetry": 1, "RetryEnded": 1, "SetSticky": 1}, s.counts())
	s.reset()
	require.Equal(t, []string{"test/fb"}, run(t, r), "sticky")
	require.Equal(t, []string{"test/base"}, run(t, r))
	require.Equal(t, map[string]int{"Begin": 2, "End": 2, "Succeeded": 1}, s.counts(),
		"a success on a model whose snapshot showed a failure resets it")

	s.reset()
	r = mustNew(t, base, WithState(s), WithRules(Fallback(fb)), WithSticky(StickyRequests(1)))
	fn, _ := script(status(503))
	_, err := Do(StartOn(context.Background(), base), r, fn)
	require.NoError(t, err)
	require.Empty(t, s.counts(), "a request that names its start model has no sticky fallback to read or set")

	plain := &countingState{localState: newLocalState(time.Now)}
	r = mustNew(t, base, WithState(plain), WithRules(Fallback(fb)))
	require.Equal(t, []string{"test/base", "test/fb"}, run(t, r, base))
	require.Empty(t, plain.counts(), "a Runner without cooldown, sticky or budget calls nothing")
}

// countingState counts the calls to each method.
type countingState struct {
	*localState
	mu sync.Mutex
	n  map[string]int
}

func (s *countingState) count(m string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[string]int{}
	}
	s.n[m]++
}

func (s *countingState) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.n {
		out[k] = v
	}
	return out
}

func (s *countingState) reset() { s.mu.Lock(); s.n = nil; s.mu.Unlock() }

func (s *countingState) Begin(ctx context.Context, b BeginRequest) Snapshot {
	s.count("Begin")
	return s.localState.Begin(ctx, b)
}
func (s *countingState) End(ctx context.Context, k string) { s.count("End"); s.localState.End(ctx, k) }
func (s *countingState) TryRetry(ctx context.Context, k string, b RetryBudget) bool {
	s.count("TryRetry")
	return s.localState.TryRetry(ctx, k, b)
}
func (s *countingState) RetryEnded(ctx context.Context, k string) {
	s.count("RetryEnded")
	s.localState.RetryEnded(ctx, k)
}
func (s *countingState) Failed(ctx context.Context, f Failure) (ModelState, bool) {
	s.count("Failed")
	return s.localState.Failed(ctx, f)
}
func (s *countingState) Succeeded(ctx context.Context, m string) bool {
	s.count("Succeeded")
	return s.localState.Succeeded(ctx, m)
}
func (s *countingState) TakeProbe(ctx context.Context, m string, d time.Duration) bool {
	s.count("TakeProbe")
	return s.localState.TakeProbe(ctx, m, d)
}
func (s *countingState) SetSticky(ctx context.Context, k, m string, n int, d time.Duration) {
	s.count("SetSticky")
	s.localState.SetSticky(ctx, k, m, n, d)
}

// TestState_GroupDeploymentProbe: after a deployment's cooldown the next
// request on its group probes it (whatever the strategy would pick), and
// a request that loses the probe leaves it alone.
func TestState_GroupDeploymentProbe(t *testing.T) {
	clk := newClock()
	east := &fakeDeployment{key: "east", clock: clk}
	west := &fakeDeployment{key: "west", clock: clk}
	east.down.Store(true)
	g := Group("gpt-4o", WeightedRandom, east, west).WithSeed(3)
	s := newLocalState(clk.now)
	r := mustNew(t, g, clk.option(), WithState(s), WithCooldown(Cooldown{Failures: 1, For: time.Hour}))
	gen := func() string {
		t.Helper()
		resp, err := r.Generate(context.Background(), &Request{})
		require.NoError(t, err)
		return resp.Text()
	}
	for range 20 {
		require.Equal(t, "west", gen())
	}
	require.Equal(t, int64(1), east.calls.Load())
	clk.advance(time.Hour)
	require.True(t, s.TakeProbe(context.Background(), "east", time.Minute), "another replica takes the probe")
	for range 20 {
		require.Equal(t, "west", gen())
	}
	require.Equal(t, int64(1), east.calls.Load(), "east is probed by another: left alone")
	clk.advance(time.Minute) // that prober is lost: its lease expires
	east.down.Store(false)
	require.Equal(t, "east", gen(), "the next request probes east")
	for range 20 {
		gen()
	}
	require.Greater(t, east.calls.Load(), int64(5), "back in rotation")
}

// TestState_GroupStartsOnItsProbe: a group whose only deployment is
// half-open is skipped for the fallback while another request probes it,
// and is started on (on that deployment) by the request that takes the
// probe.
func TestState_GroupStartsOnItsProbe(t *testing.T) {
	clk := newClock()
	east := &fakeDeployment{key: "east", clock: clk}
	east.down.Store(true)
	g := Group("gpt-4o", WeightedRandom, east)
	s := newLocalState(clk.now)
	r := mustNew(t, g, clk.option(), WithState(s), WithRules(Fallback(fb)),
		WithCooldown(Cooldown{Failures: 1, For: time.Hour}))
	start := func() string {
		t.Helper()
		fn, log := script()
		_, err := Do(context.Background(), r, fn)
		require.NoError(t, err)
		return (*log)[0].Model
	}
	fn, log := script(status(503))
	_, err := Do(context.Background(), r, fn)
	require.NoError(t, err)
	require.Equal(t, []string{"east", "test/fb"}, models(*log))
	require.Equal(t, "test/fb", start(), "cooling down")
	clk.advance(time.Hour)
	require.True(t, s.TakeProbe(context.Background(), "east", time.Minute))
	require.Equal(t, "test/fb", start(), "probed by another")
	clk.advance(time.Minute)
	require.Equal(t, "east", start(), "the lease expired: this request probes it")
	require.Equal(t, "east", start(), "and its success put it back")
}

// TestState_ProbeFailureCoolsAgainForAll: the probe's failure on one
// Runner cools the model again for every Runner sharing the State.
func TestState_ProbeFailureCoolsAgainForAll(t *testing.T) {
	clk := newClock()
	rs := replicas(t, 2, clk, WithRules(OnStatus(503).Switch(fb)), WithCooldown(Cooldown{Failures: 2, For: time.Minute}))
	for range 2 {
		require.Equal(t, []string{"test/base", "test/fb"}, run503(t, rs[0], base))
	}
	require.Equal(t, []string{"test/fb"}, run503(t, rs[1]))
	clk.advance(time.Minute)
	require.Equal(t, []string{"test/base", "test/fb"}, run503(t, rs[1], base), "the probe fails…")
	require.Equal(t, []string{"test/fb"}, run503(t, rs[0]), "…and the model cools again for all")
}

// run503 is run with 503s.
func run503(t *testing.T, r *Runner, failOn ...Model) []string {
	t.Helper()
	var got []string
	_, err := Do(context.Background(), r, func(_ context.Context, c *Call) (string, error) {
		got = append(got, c.Model.Key())
		for _, m := range failOn {
			if c.Model == m {
				return "", status(503)
			}
		}
		return "ok", nil
	})
	var re *RetryError
	if err != nil && !errors.As(err, &re) {
		require.NoError(t, err)
	}
	return got
}

// TestState_RetryAfterInvitesTheRetryThatWaitsIt: the request that got a
// 429 with a Retry-After still retries the model after waiting it (the
// server said when to come back), while the requests that start during
// the wait, on any Runner sharing the State, avoid the model; a cooldown
// longer than the Retry-After (Failures reached, For longer) still stops
// the retry.
func TestState_RetryAfterInvitesTheRetryThatWaitsIt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int
		want     []string
	}{
		{"the Retry-After's own cooldown", 3, []string{"test/base", "test/base"}},
		{"a longer cooldown", 1, []string{"test/base", "test/fb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			s := newLocalState(clk.now)
			opts := func(sleep func(context.Context, time.Duration) error) []Option {
				return []Option{withClock(clk.now, sleep), WithState(s),
					WithRules(OnStatus(429).Retry(), Fallback(fb)),
					WithCooldown(Cooldown{Failures: tc.failures, For: time.Minute})}
			}
			b := mustNew(t, base, opts(clk.sleep)...)
			var during []string
			a := mustNew(t, base, opts(func(_ context.Context, d time.Duration) error {
				fn, log := script()
				_, err := Do(context.Background(), b, fn)
				require.NoError(t, err)
				during = models(*log)
				clk.advance(d)
				return nil
			})...)
			fn, log := script(statusRetryAfter(429, "Retry-After", "1"))
			_, err := Do(context.Background(), a, fn)
			require.NoError(t, err)
			require.Equal(t, tc.want, models(*log))
			if tc.want[1] == "test/base" {
				require.Equal(t, []string{"test/fb"}, during, "a request that starts during the wait avoids the model")
			}
		})
	}
}
