// Package statetest is the conformance test of a [driver.State]: the
// semantics every implementation keeps, whether in this process's memory or
// in a store shared by replicas. An implementation's tests call [Run] (one
// State) and [RunShared] (two handles on the same shared state, as two
// replicas hold).
//
// Time is real: the cooldowns that must still hold are an hour long, and
// those that must end are a few tens of milliseconds long and are polled
// until they do (for at most [Patience]), so a slow machine makes the test
// slower, never wrong.
package statetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
)

// Short is the length of the cooldowns, leases and sticky periods that the
// tests wait out; Patience is how long they wait for one to end.
const (
	Short    = 30 * time.Millisecond
	Patience = 10 * time.Second
	long     = time.Hour
)

// Run runs the conformance tests on States built by newState, one per
// subtest (newState may register a t.Cleanup).
func Run(t *testing.T, newState func(t *testing.T) driver.State) {
	RunShared(t, func(t *testing.T) (driver.State, driver.State) {
		s := newState(t)
		return s, s
	})
}

// RunShared runs the conformance tests on pairs of States that share their
// state (two replicas on one store): the tests change it through a and
// check it through b, and race the two for a probe. For an in-process State
// a and b are the same value.
func RunShared(t *testing.T, newStates func(t *testing.T) (a, b driver.State)) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, a, b driver.State)
	}{
		{"CleanModelsAreInRotation", testClean},
		{"ConsecutiveFailuresCoolAModel", testConsecutive},
		{"RetryAfterCoolsAtOnce", testRetryAfterAtOnce},
		{"RetryAfterLengthensNeverShortens", testRetryAfterLengthens},
		{"RetryAfterBlocksTheScope", testScope},
		{"CooldownEndsHalfOpenWithOneProbe", testSingleProbe},
		{"ProbeFailureCoolsAgain", testProbeFails},
		{"ProbeFailureDoublesUpToMax", testProbeFailureDoubles},
		{"ProbeSuccessPutsTheModelBack", testProbeSucceeds},
		{"ProbeLeaseExpires", testLeaseExpires},
		{"SuccessResetsTheCount", testSuccessResets},
		{"StickyForRequests", testStickyCount},
		{"StickyForAPeriod", testStickyPeriod},
		{"BudgetCountsRequestsAndRetries", testBudget},
		{"BudgetIsAtomic", testBudgetAtomic},
		{"DoneContextReturns", testDoneContext},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newStates(t)
			tc.test(t, a, b)
		})
	}
}

// key returns a key unique to the test, so that tests sharing a store do
// not see each other.
func key(t *testing.T, name string) string { return fmt.Sprintf("%s/%s", t.Name(), name) }

func begin(t *testing.T, s driver.State, models ...string) []driver.ModelState {
	t.Helper()
	snap := s.Begin(t.Context(), driver.BeginRequest{Key: key(t, "runner"), Models: models})
	require.LessOrEqual(t, len(snap.Models), len(models))
	out := make([]driver.ModelState, len(models))
	copy(out, snap.Models)
	return out
}

func one(t *testing.T, s driver.State, model string) driver.ModelState {
	t.Helper()
	return begin(t, s, model)[0]
}

// eventually polls cond until it holds, failing after Patience.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(Patience); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, Patience)
		}
		time.Sleep(Short / 3)
	}
}

func failure(model string, failures int, cool time.Duration) driver.Failure {
	return driver.Failure{Model: model, Failures: failures, For: cool}
}

func testClean(t *testing.T, a, _ driver.State) {
	m, n := key(t, "m"), key(t, "n")
	require.Equal(t, []driver.ModelState{{}, {}}, begin(t, a, m, n))
	require.True(t, a.TakeProbe(t.Context(), m, long), "a model in rotation has nothing to probe")
	require.False(t, a.Succeeded(t.Context(), m), "a success on a clean model ends no cooldown")
	require.Equal(t, driver.ModelState{}, one(t, a, m))
}

func testConsecutive(t *testing.T, a, b driver.State) {
	m, other := key(t, "m"), key(t, "other")
	ctx := t.Context()
	for i := 1; i < 3; i++ {
		s, cooled := a.Failed(ctx, failure(m, 3, long))
		require.False(t, cooled)
		require.Equal(t, driver.ModelState{Failures: i}, s)
		require.Equal(t, driver.ModelState{Failures: i}, one(t, b, m), "the other replica sees the count")
	}
	s, cooled := a.Failed(ctx, failure(m, 3, long))
	require.True(t, cooled, "the third failure in a row starts the cooldown")
	require.Equal(t, 2, s.Failures, "after the cooldown one failure starts the next")
	require.Greater(t, s.Cooling, long-time.Minute)
	require.LessOrEqual(t, s.Cooling, long)

	got := begin(t, b, m, other)
	require.Greater(t, got[0].Cooling, long-time.Minute, "the other replica sees the cooldown")
	require.False(t, got[0].HalfOpen)
	require.Equal(t, driver.ModelState{}, got[1], "other models are not affected")
	require.False(t, b.TakeProbe(ctx, m, long), "no probe while it cools down")

	s, cooled = b.Failed(ctx, failure(m, 3, long))
	require.False(t, cooled, "a failure while cooling down does not restart the cooldown")
	require.Greater(t, s.Cooling, time.Duration(0))
}

func testRetryAfterAtOnce(t *testing.T, a, b driver.State) {
	m := key(t, "m")
	f := failure(m, 5, time.Minute)
	f.RetryAfter = long
	s, cooled := a.Failed(t.Context(), f)
	require.True(t, cooled, "a Retry-After cools the model at once, before Failures")
	require.Greater(t, s.Cooling, long-time.Minute, "for the Retry-After, longer than For")
	require.GreaterOrEqual(t, s.Failures, 4, "after it one failure starts the next cooldown")
	require.Greater(t, one(t, b, m).Cooling, long-time.Minute, "for every replica")
}

func testRetryAfterLengthens(t *testing.T, a, b driver.State) {
	m := key(t, "m")
	ctx := t.Context()
	_, cooled := a.Failed(ctx, failure(m, 1, time.Minute))
	require.True(t, cooled)
	f := failure(m, 1, time.Minute)
	f.RetryAfter = long
	s, cooled := b.Failed(ctx, f)
	require.True(t, cooled, "a longer Retry-After lengthens a cooldown")
	require.Greater(t, s.Cooling, long-time.Minute)

	f.RetryAfter = 2 * time.Minute
	s, cooled = a.Failed(ctx, f)
	require.False(t, cooled, "a shorter Retry-After never shortens one")
	require.Greater(t, s.Cooling, long-time.Minute)
}

func testScope(t *testing.T, a, b driver.State) {
	m, scope, other := key(t, "m"), key(t, "account"), key(t, "other-account")
	f := failure(m, 3, time.Minute)
	f.Scope, f.RetryAfter = scope, long
	_, cooled := a.Failed(t.Context(), f)
	require.True(t, cooled)
	snap := b.Begin(t.Context(), driver.BeginRequest{Key: key(t, "runner"), Scopes: []string{other, scope}})
	require.Len(t, snap.Scopes, 2)
	require.Equal(t, time.Duration(0), snap.Scopes[0])
	require.Greater(t, snap.Scopes[1], long-time.Minute, "the whole scope waits for the Retry-After")

	f.Scope, f.RetryAfter = other, Short
	_, _ = a.Failed(t.Context(), f)
	eventually(t, "a scope's block ends", func() bool {
		snap := b.Begin(t.Context(), driver.BeginRequest{Key: key(t, "runner"), Scopes: []string{other}})
		return len(snap.Scopes) == 0 || snap.Scopes[0] == 0
	})
}

// halfOpen cools m with a short cooldown through a and waits until b sees
// it half-open.
func halfOpen(t *testing.T, a, b driver.State, m string) {
	t.Helper()
	_, cooled := a.Failed(t.Context(), failure(m, 1, Short))
	require.True(t, cooled)
	eventually(t, "the cooldown ends", func() bool { return one(t, b, m).HalfOpen })
}

func testSingleProbe(t *testing.T, a, b driver.State) {
	m := key(t, "m")
	halfOpen(t, a, b, m)
	s := one(t, a, m)
	require.True(t, s.HalfOpen)
	require.False(t, s.Probing)
	require.Equal(t, time.Duration(0), s.Cooling)

	var won atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 50 {
		st := a
		if i%2 == 1 {
			st = b
		}
		wg.Go(func() {
			<-start
			if st.TakeProbe(t.Context(), m, long) {
				won.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, int32(1), won.Load(), "exactly one caller takes the probe")
	s = one(t, b, m)
	require.True(t, s.HalfOpen, "the model stays out of rotation while it is probed")
	require.True(t, s.Probing)
}

func testProbeFails(t *testing.T, a, b driver.State) {
	m := key(t, "m")
	halfOpen(t, a, b, m)
	require.True(t, b.TakeProbe(t.Context(), m, long))
	s, cooled := b.Failed(t.Context(), failure(m, 3, long))
	require.True(t, cooled, "the probe's failure cools the model again at once")
	require.Greater(t, s.Cooling, long-time.Minute)
	require.False(t, s.HalfOpen)
	require.False(t, a.TakeProbe(t.Context(), m, long))
}

func testProbeSucceeds(t *testing.T, a, b driver.State) {
	m := key(t, "m")
	halfOpen(t, a, b, m)
	require.True(t, b.TakeProbe(t.Context(), m, long))
	require.True(t, b.Succeeded(t.Context(), m), "the probe's success ends the cooldown")
	require.Equal(t, driver.ModelState{}, one(t, a, m), "back in rotation, clean, for every replica")
	require.True(t, a.TakeProbe(t.Context(), m, long), "nothing left to probe")
	s, cooled := a.Failed(t.Context(), failure(m, 2, long))
	require.False(t, cooled, "the count starts again from zero")
	require.Equal(t, 1, s.Failures)
}

func testLeaseExpires(t *testing.T, a, b driver.State) {
	m := key(t, "m")
	halfOpen(t, a, b, m)
	require.True(t, a.TakeProbe(t.Context(), m, Short))
	eventually(t, "a lost prober's lease expires", func() bool { return b.TakeProbe(t.Context(), m, long) })
	require.False(t, a.TakeProbe(t.Context(), m, long), "the new lease is held")
}

func testSuccessResets(t *testing.T, a, b driver.State) {
	m := key(t, "m")
	_, _ = a.Failed(t.Context(), failure(m, 2, long))
	require.False(t, b.Succeeded(t.Context(), m), "no cooldown to end")
	_, cooled := a.Failed(t.Context(), failure(m, 2, long))
	require.False(t, cooled, "the success broke the run of failures")
}

func sticky(t *testing.T, s driver.State, k string) string {
	t.Helper()
	return s.Begin(t.Context(), driver.BeginRequest{Key: k, Sticky: true}).Sticky
}

func testStickyCount(t *testing.T, a, b driver.State) {
	k, other := key(t, "runner"), key(t, "other-runner")
	require.Empty(t, sticky(t, a, k))
	a.SetSticky(t.Context(), k, "fb", 2, 0)
	require.Empty(t, sticky(t, b, other), "sticky fallbacks are per key")
	require.Empty(t, b.Begin(t.Context(), driver.BeginRequest{Key: k}).Sticky, "a request that does not ask does not use one up")
	require.Equal(t, "fb", sticky(t, b, k))
	require.Equal(t, "fb", sticky(t, a, k))
	require.Empty(t, sticky(t, b, k), "two requests used it up")

	a.SetSticky(t.Context(), k, "fb", 1, 0)
	b.SetSticky(t.Context(), k, "fb2", 1, 0)
	require.Equal(t, "fb2", sticky(t, a, k), "the latest replaces it")
	require.Empty(t, sticky(t, a, k))
}

func testStickyPeriod(t *testing.T, a, b driver.State) {
	k := key(t, "runner")
	a.SetSticky(t.Context(), k, "fb", 0, long)
	for range 3 {
		require.Equal(t, "fb", sticky(t, b, k), "a period is not used up by requests")
	}
	b.SetSticky(t.Context(), k, "fb2", 0, Short)
	eventually(t, "a sticky period ends", func() bool { return sticky(t, a, k) == "" })
}

func testBudget(t *testing.T, a, b driver.State) {
	k, other := key(t, "runner"), key(t, "other-runner")
	ctx := t.Context()
	budget := driver.RetryBudget{Percent: 20, MinRetries: 0}
	for i := range 10 {
		st := a
		if i%2 == 1 {
			st = b
		}
		st.Begin(ctx, driver.BeginRequest{Key: k, Budget: true})
	}
	require.True(t, a.TryRetry(ctx, k, budget))
	require.True(t, b.TryRetry(ctx, k, budget))
	require.False(t, a.TryRetry(ctx, k, budget), "20 %% of 10 requests is 2 retries, counted across replicas")
	require.False(t, b.TryRetry(ctx, other, budget), "another key has no requests")
	require.True(t, b.TryRetry(ctx, other, driver.RetryBudget{Percent: 20, MinRetries: 1}), "but its minimum")
	// Giving back is allowed to be a no-op (a windowed count), so only its
	// safety is checked.
	a.RetryEnded(context.WithoutCancel(ctx), k)
	b.RetryEnded(context.WithoutCancel(ctx), k)
	for range 10 {
		a.End(context.WithoutCancel(ctx), k)
	}
}

func testBudgetAtomic(t *testing.T, a, b driver.State) {
	k := key(t, "runner")
	ctx := t.Context()
	for range 20 {
		a.Begin(ctx, driver.BeginRequest{Key: k, Budget: true})
	}
	budget := driver.RetryBudget{Percent: 25, MinRetries: 1} // 5
	var got atomic.Int32
	var wg sync.WaitGroup
	for i := range 40 {
		st := a
		if i%2 == 1 {
			st = b
		}
		wg.Go(func() {
			if st.TryRetry(ctx, k, budget) {
				got.Add(1)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int32(5), got.Load(), "no retry slot is given twice")
}

// testDoneContext: every method returns (and does not panic) on a ctx that
// is done; a store may skip its round trip and answer from its local copy.
func testDoneContext(t *testing.T, a, _ driver.State) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	m, k := key(t, "m"), key(t, "runner")
	a.Begin(ctx, driver.BeginRequest{Key: k, Models: []string{m}, Scopes: []string{m}, Sticky: true, Budget: true})
	a.End(ctx, k)
	a.TryRetry(ctx, k, driver.RetryBudget{Percent: 20, MinRetries: 1})
	a.RetryEnded(ctx, k)
	a.Failed(ctx, failure(m, 1, long))
	a.TakeProbe(ctx, m, long)
	a.Succeeded(ctx, m)
	a.SetSticky(ctx, k, m, 1, 0)
}

// testProbeFailureDoubles: with Max above For, each failed probe cools
// the model down for twice the cooldown before it, up to Max; a success
// starts again from For; without Max every cooldown lasts For.
func testProbeFailureDoubles(t *testing.T, a, b driver.State) {
	m := key(t, "m")
	ctx := t.Context()
	adaptive := driver.Failure{Model: m, Failures: 1, For: Short, Max: 3 * Short}
	_, cooled := a.Failed(ctx, adaptive)
	require.True(t, cooled)
	for _, want := range []time.Duration{2 * Short, 3 * Short, 3 * Short} { // doubled, then capped
		eventually(t, "the cooldown ends", func() bool { return one(t, b, m).HalfOpen })
		require.True(t, b.TakeProbe(ctx, m, long))
		s, cooled := b.Failed(ctx, adaptive)
		require.True(t, cooled)
		require.Greater(t, s.Cooling, want-Short/2, "the probe's failure cools the model for %v", want)
		require.LessOrEqual(t, s.Cooling, want)
	}
	eventually(t, "the cooldown ends", func() bool { return one(t, b, m).HalfOpen })
	require.True(t, a.TakeProbe(ctx, m, long))
	require.True(t, a.Succeeded(ctx, m))
	s, _ := b.Failed(ctx, adaptive)
	require.LessOrEqual(t, s.Cooling, Short, "a success starts the next from For")

	n := key(t, "n")
	fixed := driver.Failure{Model: n, Failures: 1, For: Short}
	_, _ = a.Failed(ctx, fixed)
	eventually(t, "the cooldown ends", func() bool { return one(t, b, n).HalfOpen })
	require.True(t, b.TakeProbe(ctx, n, long))
	s, _ = b.Failed(ctx, fixed)
	require.LessOrEqual(t, s.Cooling, Short, "without Max every cooldown lasts For")
}
