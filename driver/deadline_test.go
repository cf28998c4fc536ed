package driver

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// lateStopClock is a manualClock whose timers fire just as they are
// stopped: Stop on a live timer runs its callback first, on the stopping
// goroutine, and reports false, as time.Timer.Stop does when its callback
// has already started. A timer that relies on Stop alone acts after the
// stop decided it must not.
type lateStopClock struct{ *manualClock }

type lateStopTimer struct{ *manualTimer }

func (c lateStopClock) AfterFunc(d time.Duration, f func()) stopper {
	return lateStopTimer{c.manualClock.AfterFunc(d, f).(*manualTimer)}
}

func (t lateStopTimer) Stop() bool {
	t.c.mu.Lock()
	live := t.live
	t.live = false
	t.c.mu.Unlock()
	if live {
		t.f()
	}
	return false
}

// A first-content deadline that fires right at commit
// must never end the committed stream.
func TestRunAttempt_firstContentFiringAtCommitNeverKillsTheStream(t *testing.T) {
	clk := lateStopClock{newManualClock()}
	m := &scriptModel{key: "p/a", clock: clk.manualClock, scripts: [][]sstep{answer("Hi", " there")}}
	r := runAttempt(t.Context(), &attemptSpec{model: m, req: &Request{}, number: 1,
		firstContent: time.Second, clock: clk})
	require.NoError(t, r.err)
	parts, err := drain(r.stream)
	require.NoError(t, err, "the deadline fired as commit stopped it: ignored, never the committed stream's end")
	require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:Hi",
		"text-delta: there", "text-end", "finish"}, kinds(parts))
}

// The other side of the race at commit: a first-content deadline whose callback won the
// race (fired, its cancel not yet run) fails the attempt before commit.
func TestFirstWatch_firedBeforeCommitFailsTheAttempt(t *testing.T) {
	clk := newManualClock()
	var cancelled []error
	w := armFirstContent(clk, time.Second, func(err error) { cancelled = append(cancelled, err) })
	w.state.Store(firstFired) // the timer's callback has won, its cancel is on its way
	require.False(t, w.disarm())
	require.Empty(t, cancelled)

	w = armFirstContent(clk, time.Second, func(err error) { cancelled = append(cancelled, err) })
	require.True(t, w.disarm())
	clk.Advance(time.Hour)
	require.Empty(t, cancelled, "disarmed: never fires")
	require.True(t, w.disarm(), "disarm is idempotent")

	w = armFirstContent(clk, time.Second, func(err error) { cancelled = append(cancelled, err) })
	clk.Advance(time.Second)
	require.False(t, w.disarm())
	var de *DeadlineError
	require.Len(t, cancelled, 1)
	require.ErrorAs(t, cancelled[0], &de)
	require.Equal(t, abi.DeadlineFirstContent, de.Deadline)
	require.Nil(t, (*firstWatch)(nil), "no deadline: nothing armed")
	require.True(t, armFirstContent(clk, 0, nil).disarm())
}

// The race at commit, on the real clock and the real runtime timer: first content
// arrives right about when the first-content deadline fires. Whichever wins,
// the caller gets a whole answer (from a, or from b after a failed over),
// never a committed stream that ends with a first-content deadline (when
// both attempts miss it, nothing commits and Stream fails: allowed). Run
// under -race; on the code before the fix about 1 run in 100–200 failed.
func TestRetryableModel_firstContentRaceAtCommit(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 50
	}
	for i := range n {
		a := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(preamble(),
			sstep{do: func() { time.Sleep(time.Millisecond) }, part: Part{Kind: abi.KindTextDelta, ID: "t", Delta: "a1"}},
			pText("a2"), pKind(abi.KindTextEnd), pFinish(abi.ReasonStop))}}
		b := &scriptModel{key: "p/b", scripts: [][]sstep{answer("b1", "b2")}}
		var mu sync.Mutex
		var failed []error
		r, err := New(a, WithRules(Timeout().Switch(b)),
			WithOnFailure(func(_ context.Context, o Outcome) { mu.Lock(); failed = append(failed, o.Err); mu.Unlock() }))
		require.NoError(t, err)
		rm, err := NewRetryableModel(r, WithFirstContentTimeout(time.Millisecond))
		require.NoError(t, err)
		s, err := rm.Stream(t.Context(), &Request{})
		if err != nil { // both attempts missed the deadline on a busy machine: nothing committed
			var de *DeadlineError
			require.ErrorAs(t, err, &de)
			require.Equal(t, abi.DeadlineFirstContent, de.Deadline)
			continue
		}
		parts, err := drain(s)
		require.NoError(t, err, "run %d: a committed stream ended with %v", i, err)
		got := kinds(parts)
		require.Contains(t, [][]string{
			{"stream-start", "response-metadata", "text-start", "text-delta:a1", "text-delta:a2", "text-end", "finish"},
			{"stream-start", "response-metadata", "text-start", "text-delta:b1", "text-delta:b2", "text-end", "finish"},
		}, got, "run %d", i)
		mu.Lock()
		require.Empty(t, failed, "run %d: OnFailure fired", i)
		mu.Unlock()
	}
}

// The gap deadline measures the provider's silence,
// never the caller's pace.
func TestRunAttempt_gapCountsOnlyTheUpstreamsTime(t *testing.T) {
	whole := []string{"stream-start", "response-metadata", "text-start", "text-delta:a", "text-delta:b",
		"text-delta:c", "text-end", "finish"}
	t.Run("a caller that starts reading late gets the whole answer", func(t *testing.T) {
		clk := newManualClock()
		m := &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{answer("a", "b", "c")}}
		r := runOne(t.Context(), m, attemptOpts{gap: 300 * time.Millisecond})
		require.NoError(t, r.err)
		clk.Advance(500 * time.Millisecond) // Stream returned; the caller reads 500 ms later
		parts, err := drain(r.stream)
		require.NoError(t, err)
		require.Equal(t, whole, kinds(parts))
	})
	t.Run("a caller that reads slowly gets the whole answer", func(t *testing.T) {
		clk := newManualClock()
		m := &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{answer("a", "b", "c")}}
		r := runOne(t.Context(), m, attemptOpts{gap: 300 * time.Millisecond})
		require.NoError(t, r.err)
		var got []Part
		for {
			p, err := r.stream.Recv()
			if err != nil {
				require.ErrorIs(t, err, io.EOF)
				break
			}
			got = append(got, p)
			clk.Advance(500 * time.Millisecond) // the caller takes 500 ms per part
		}
		require.Equal(t, whole, kinds(got))
	})
	t.Run("with a transform still attached (the locked path)", func(t *testing.T) {
		clk := newManualClock()
		m := &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{answer("a", "b", "c")}}
		pass := &funcTransform{name: "pass", part: func(int, *Part) (abi.Verdict, error) { return verdict(abi.PartPass), nil }}
		r := runOne(t.Context(), m, attemptOpts{gap: 300 * time.Millisecond, ts: []abi.Transformer{pass}})
		require.NoError(t, r.err)
		clk.Advance(time.Second)
		var got []Part
		for {
			p, err := r.stream.Recv()
			if err != nil {
				require.ErrorIs(t, err, io.EOF)
				break
			}
			got = append(got, p)
			clk.Advance(500 * time.Millisecond)
		}
		require.Equal(t, whole, kinds(got))
	})
	t.Run("waiting on a provider that sends only heartbeats still fires", func(t *testing.T) {
		clk := newManualClock()
		beat := func() sstep {
			return sstep{do: func() { clk.Advance(400 * time.Millisecond) }, part: Part{Kind: abi.KindTextDelta, ID: "t"}}
		}
		m := &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{sscript(preamble(), pText("a"),
			beat(), beat(), beat(), beat(), beat(), pText("never"))}}
		r := runOne(t.Context(), m, attemptOpts{gap: time.Second})
		require.NoError(t, r.err)
		var got []Part
		var err error
		for {
			var p Part
			if p, err = r.stream.Recv(); err != nil {
				break
			}
			got = append(got, p)
			clk.Advance(time.Hour) // the caller's time never counts, nor resets the gap
		}
		var de *DeadlineError
		require.ErrorAs(t, err, &de)
		require.Equal(t, abi.DeadlineGap, de.Deadline)
		require.NotContains(t, kinds(got), "text-delta:never")
	})
}

// The gap watch's own stop-after-fire: a tick that runs as the stream ends
// (its timer fired just as it was stopped) changes nothing.
func TestRunAttempt_gapTickAtTheEndIsHarmless(t *testing.T) {
	clk := lateStopClock{newManualClock()}
	m := &scriptModel{key: "p/a", clock: clk.manualClock, scripts: [][]sstep{answer("a", "b")}}
	var fired error
	r := runAttempt(t.Context(), &attemptSpec{model: m, req: &Request{}, number: 1, gap: time.Millisecond, clock: clk})
	require.NoError(t, r.err)
	r.stream.onEnd = func(err error) { fired = err }
	_, err := drain(r.stream)
	require.NoError(t, err)
	require.NoError(t, fired)
	require.Same(t, errAttemptOver, context.Cause(r.stream.ctx), "the late tick did not fire the gap")
}

// The attempt deadline's side of the race at commit, on the real clock: it is a
// context, so it may end a committed stream (a documented truncation), but
// whichever way the race at commit goes the caller sees one preamble, no
// part twice, and exactly one outcome callback. Run under -race.
func TestRetryableModel_attemptDeadlineRaceAtCommit(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 30
	}
	for i := range n {
		a := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(preamble(),
			sstep{do: func() { time.Sleep(time.Millisecond) }, part: Part{Kind: abi.KindTextDelta, ID: "t", Delta: "a1"}},
			pText("a2"), pKind(abi.KindTextEnd), pFinish(abi.ReasonStop))}}
		b := &scriptModel{key: "p/b", scripts: [][]sstep{answer("b1", "b2")}}
		var mu sync.Mutex
		outcomes := 0
		count := func(context.Context, Outcome) { mu.Lock(); outcomes++; mu.Unlock() }
		r, err := New(a, WithRules(Timeout().Switch(b)), WithAttemptTimeout(time.Millisecond),
			WithOnSuccess(count), WithOnFailure(count))
		require.NoError(t, err)
		rm, err := NewRetryableModel(r)
		require.NoError(t, err)
		s, err := rm.Stream(t.Context(), &Request{})
		if err == nil {
			parts, rerr := drain(s)
			starts, seen := 0, map[string]bool{}
			for _, p := range parts {
				if p.Kind == abi.KindStreamStart {
					starts++
				}
				if p.Delta != "" {
					require.False(t, seen[p.Delta], "run %d: %q twice", i, p.Delta)
					seen[p.Delta] = true
				}
			}
			require.Equal(t, 1, starts, "run %d", i)
			if rerr != nil {
				var de *DeadlineError
				require.ErrorAs(t, rerr, &de, "run %d", i)
				require.Equal(t, abi.DeadlineAttempt, de.Deadline)
			}
		}
		mu.Lock()
		require.Equal(t, 1, outcomes, "run %d: exactly one outcome", i)
		mu.Unlock()
	}
}
