package driver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

func verdict(a abi.PartAction) abi.Verdict { return abi.Verdict{Action: a} }

// byDelta scripts a transform by the delta of each text part; other parts pass.
func byDelta(name string, vs map[string]abi.Verdict) *funcTransform {
	return &funcTransform{name: name, part: func(_ int, p *Part) (abi.Verdict, error) {
		if v, ok := vs[p.Delta]; ok {
			return v, nil
		}
		return abi.Verdict{}, nil
	}}
}

func texts(ds ...string) []sstep {
	out := make([]sstep, len(ds))
	for i, d := range ds {
		out[i] = pText(d)
	}
	return out
}

func TestChain_partActions(t *testing.T) {
	verdictErr := errors.New("not allowed")
	for _, tc := range []struct {
		name  string
		vs    map[string]abi.Verdict
		want  []string
		err   error
		class abi.ErrorClass // for a *TransformError
	}{
		{"pass", map[string]abi.Verdict{}, []string{"a", "b", "c"}, nil, 0},
		{"hold then pass releases in order, then the part", map[string]abi.Verdict{"a": verdict(abi.PartHold), "b": verdict(abi.PartHold)},
			[]string{"a", "b", "c"}, nil, 0},
		{"drop keeps the queue", map[string]abi.Verdict{"a": verdict(abi.PartHold), "b": verdict(abi.PartDrop)},
			[]string{"a", "c"}, nil, 0},
		{"replace discards the queue and the part", map[string]abi.Verdict{"a": verdict(abi.PartHold),
			"b": {Action: abi.PartReplace, Replace: []Part{{Kind: abi.KindTextDelta, Delta: "X"}, {Kind: abi.KindTextDelta, Delta: "Y"}}}},
			[]string{"X", "Y", "c"}, nil, 0},
		{"replace with nothing", map[string]abi.Verdict{"b": verdict(abi.PartReplace)}, []string{"a", "c"}, nil, 0},
		{"detach releases and stops asking", map[string]abi.Verdict{"a": verdict(abi.PartHold), "b": verdict(abi.PartDetach),
			"c": verdict(abi.PartDrop)}, []string{"a", "b", "c"}, nil, 0},
		{"error with its own error", map[string]abi.Verdict{"a": {Action: abi.PartError, Err: verdictErr}}, nil, verdictErr, 0},
		{"error without one", map[string]abi.Verdict{"a": verdict(abi.PartError)}, nil, nil, abi.ClassTransform},
		{"an invalid action is a transform failure (fail-open)", map[string]abi.Verdict{"a": verdict(abi.PartHold), "b": verdict(99),
			"c": verdict(abi.PartDrop)}, []string{"a", "b", "c"}, nil, 0},
		{"an invalid replacement is a transform failure", map[string]abi.Verdict{"b": {Action: abi.PartReplace, Replace: []Part{{}}}},
			[]string{"a", "b", "c"}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := byDelta("t1", tc.vs)
			m := &scriptModel{key: "p/a", scripts: [][]sstep{texts("a", "b", "c")}}
			r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{ft}})
			switch {
			case tc.err != nil:
				require.ErrorIs(t, r.err, tc.err)
			case tc.class != 0:
				var te *abi.TransformError
				require.ErrorAs(t, r.err, &te)
				require.Equal(t, tc.class, te.Class)
				require.Equal(t, "t1", te.Transform)
			default:
				require.NoError(t, r.err)
				parts, err := drain(r.stream)
				require.NoError(t, err)
				var got []string
				for _, p := range parts {
					got = append(got, p.Delta)
				}
				require.Equal(t, tc.want, got)
			}
			opened, closed := ft.counts()
			require.Equal(t, 1, opened)
			require.Equal(t, 1, closed, "Close exactly once")
		})
	}
}

func TestChain_composesInOrder(t *testing.T) {
	// t1 upper-cases "a"; t2 holds "A" (which it sees only because t1 ran
	// first) until "c"; t2's queue is released before "c".
	t1 := byDelta("t1", map[string]abi.Verdict{"a": {Action: abi.PartReplace, Replace: []Part{{Kind: abi.KindTextDelta, Delta: "A"}}}})
	t2 := byDelta("t2", map[string]abi.Verdict{"A": verdict(abi.PartHold), "b": verdict(abi.PartHold)})
	m := &scriptModel{key: "p/a", scripts: [][]sstep{texts("a", "b", "c")}}
	r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{t1, t2}})
	require.NoError(t, r.err)
	parts, err := drain(r.stream)
	require.NoError(t, err)
	require.Equal(t, []string{"text-delta:A", "text-delta:b", "text-delta:c"}, kinds(parts))
}

func TestChain_endResolvesHeld(t *testing.T) {
	holdAll := func(end abi.Verdict) *funcTransform {
		return &funcTransform{name: "h", part: func(int, *Part) (abi.Verdict, error) { return verdict(abi.PartHold), nil },
			end: func() (abi.Verdict, error) { return end, nil }}
	}
	for _, tc := range []struct {
		name string
		end  abi.Verdict
		want []string
		err  bool
	}{
		{"hold at end is a pass", verdict(abi.PartHold), []string{"a", "b"}, false},
		{"pass", verdict(abi.PartPass), []string{"a", "b"}, false},
		{"drop discards", verdict(abi.PartDrop), nil, false},
		{"replace", abi.Verdict{Action: abi.PartReplace, Replace: []Part{{Kind: abi.KindTextDelta, Delta: "Z"}}}, []string{"Z"}, false},
		{"error fails the attempt", verdict(abi.PartError), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := holdAll(tc.end)
			m := &scriptModel{key: "p/a", scripts: [][]sstep{texts("a", "b")}}
			r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{ft}})
			if tc.err {
				require.Error(t, r.err)
				return
			}
			require.NoError(t, r.err)
			parts, err := drain(r.stream)
			require.NoError(t, err)
			var got []string
			for _, p := range parts {
				got = append(got, p.Delta)
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, len(tc.want) == 0, r.empty)
			_, closed := ft.counts()
			require.Equal(t, 1, closed)
		})
	}
}

func TestChain_holdCaps(t *testing.T) {
	clk := newManualClock()
	holdAll := func(p abi.TransformPolicy) *funcTransform {
		return &funcTransform{name: "h", policy: p, part: func(int, *Part) (abi.Verdict, error) { return verdict(abi.PartHold), nil }}
	}
	tick := sstep{do: func() { clk.Advance(2 * time.Second) }, part: Part{Kind: abi.KindTextDelta, Delta: "c"}}
	for _, tc := range []struct {
		name   string
		policy abi.TransformPolicy
		sc     []sstep
		cap    string
	}{
		{"parts", abi.TransformPolicy{MaxHeldParts: 2}, texts("a", "b", "c", "d"), "parts"},
		{"bytes", abi.TransformPolicy{MaxHeldBytes: 4}, texts("a", "b", "c", "d"), "bytes"},
		{"time", abi.TransformPolicy{MaxHoldTime: time.Second}, sscript(texts("a", "b"), tick, pText("d")), "time"},
	} {
		t.Run(tc.name+" flush", func(t *testing.T) {
			ft := holdAll(tc.policy)
			m := &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{tc.sc}}
			r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{ft}})
			require.NoError(t, r.err)
			parts, err := drain(r.stream)
			require.NoError(t, err)
			require.Equal(t, []string{"text-delta:a", "text-delta:b", "text-delta:c", "text-delta:d"}, kinds(parts))
			_, closed := ft.counts()
			require.Equal(t, 1, closed, "a cap flush detaches the transform")
		})
		t.Run(tc.name+" fail", func(t *testing.T) {
			p := tc.policy
			p.OnCap = abi.CapFail
			m := &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{tc.sc}}
			r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{holdAll(p)}})
			var ce *abi.HoldCapError
			require.ErrorAs(t, r.err, &ce)
			require.Equal(t, tc.cap, ce.Cap)
			var a abi.Attempt
			classify(r.err, &a, clk.Now(), 0)
			require.Equal(t, abi.ClassTransform, a.Class, "a hold cap is a transform failure to the rules")
			require.Equal(t, 2, ce.Parts)
			require.True(t, m.stream(0).isClosed())
		})
	}
}

func TestChain_transformFailureIsContained(t *testing.T) {
	panicky := func(fail abi.FailPolicy, where string) *funcTransform {
		return &funcTransform{name: "bad", policy: abi.TransformPolicy{Fail: fail},
			open: func() error {
				if where == "open" {
					panic("open exploded")
				}
				return nil
			},
			part: func(n int, p *Part) (abi.Verdict, error) {
				switch {
				case where == "part" && n == 1:
					panic("part exploded")
				case where == "error" && n == 1:
					return abi.Verdict{}, errors.New("plugin trapped")
				}
				return verdict(abi.PartHold), nil
			}}
	}
	for _, where := range []string{"open", "part", "error"} {
		t.Run(where+" fail-open passes the stream on untouched", func(t *testing.T) {
			m := &scriptModel{key: "p/a", scripts: [][]sstep{texts("a", "b", "c")}}
			r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{panicky(abi.FailOpen, where)}})
			require.NoError(t, r.err)
			parts, err := drain(r.stream)
			require.NoError(t, err)
			require.Equal(t, []string{"text-delta:a", "text-delta:b", "text-delta:c"}, kinds(parts))
		})
		t.Run(where+" fail-closed fails the attempt with a clear error", func(t *testing.T) {
			m := &scriptModel{key: "p/a", scripts: [][]sstep{texts("a", "b", "c")}}
			r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{panicky(abi.FailClosed, where)}})
			var te *abi.TransformError
			require.ErrorAs(t, r.err, &te)
			require.Equal(t, abi.ClassPlugin, te.Class)
			require.Equal(t, "bad", te.Transform)
			if where != "error" {
				require.Contains(t, te.Error(), "exploded")
			}
		})
	}
}

func TestCommitRule(t *testing.T) {
	for _, tc := range []struct {
		p              Part
		output, legacy bool
	}{
		{Part{Kind: abi.KindTextDelta, Delta: "x"}, true, true},
		{Part{Kind: abi.KindTextDelta}, false, true},
		{Part{Kind: abi.KindReasoningDelta, Delta: "x"}, true, true},
		{Part{Kind: abi.KindToolInputStart}, true, true},
		{Part{Kind: abi.KindToolInputDelta, Delta: "{"}, true, true},
		{Part{Kind: abi.KindToolCall}, true, true},
		{Part{Kind: abi.KindToolResult}, true, true},
		{Part{Kind: abi.KindFile}, true, false},
		{Part{Kind: abi.KindSource}, false, true},
		{Part{Kind: abi.KindRaw}, false, true},
		{Part{Kind: abi.KindStreamStart}, false, false},
		{Part{Kind: abi.KindResponseMeta}, false, false},
		{Part{Kind: abi.KindTextStart}, false, false},
		{Part{Kind: abi.KindFinish}, false, false},
	} {
		t.Run(tc.p.Kind.String(), func(t *testing.T) {
			require.Equal(t, tc.output, CommitOnOutput.IsContent(&tc.p))
			require.Equal(t, tc.legacy, CommitLegacy.IsContent(&tc.p))
		})
	}
}

func TestChain_afterCommit(t *testing.T) {
	// A transform that never detaches keeps judging parts after commit.
	t.Run("holds and releases, and End resolves the rest", func(t *testing.T) {
		ft := byDelta("t1", map[string]abi.Verdict{"c": verdict(abi.PartHold), "e": verdict(abi.PartHold)})
		m := &scriptModel{key: "p/a", scripts: [][]sstep{texts("a", "b", "c", "d", "e")}}
		r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{ft}})
		require.NoError(t, r.err)
		parts, err := drain(r.stream)
		require.NoError(t, err)
		require.Equal(t, []string{"text-delta:a", "text-delta:b", "text-delta:c", "text-delta:d", "text-delta:e"}, kinds(parts))
		_, closed := ft.counts()
		require.Equal(t, 1, closed)
	})
	t.Run("an error verdict truncates after what was released", func(t *testing.T) {
		boom := errors.New("unsafe output")
		ft := byDelta("t1", map[string]abi.Verdict{"c": verdict(abi.PartHold), "d": {Action: abi.PartError, Err: boom}})
		m := &scriptModel{key: "p/a", scripts: [][]sstep{texts("a", "b", "c", "d", "e")}}
		r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{ft}})
		require.NoError(t, r.err)
		parts, err := drain(r.stream)
		require.ErrorIs(t, err, boom)
		require.Equal(t, []string{"text-delta:a", "text-delta:b"}, kinds(parts), "the held part is discarded with the error")
		require.True(t, m.stream(0).isClosed())
	})
	t.Run("an error at End truncates", func(t *testing.T) {
		ft := byDelta("t1", map[string]abi.Verdict{})
		ft.end = func() (abi.Verdict, error) { return verdict(abi.PartError), nil }
		m := &scriptModel{key: "p/a", scripts: [][]sstep{texts("a", "b")}}
		r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{ft}})
		require.NoError(t, r.err)
		parts, err := drain(r.stream)
		var te *abi.TransformError
		require.ErrorAs(t, err, &te)
		require.Len(t, parts, 2)
	})
	t.Run("a panic at End is contained by the fail policy", func(t *testing.T) {
		for _, fp := range []abi.FailPolicy{abi.FailOpen, abi.FailClosed} {
			ft := &funcTransform{name: "t1", policy: abi.TransformPolicy{Fail: fp},
				part: func(n int, _ *Part) (abi.Verdict, error) {
					if n == 0 {
						return abi.Verdict{}, nil
					}
					return verdict(abi.PartHold), nil
				},
				end: func() (abi.Verdict, error) { panic("end exploded") }}
			m := &scriptModel{key: "p/a", scripts: [][]sstep{texts("a", "b", "c")}}
			r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{ft}})
			require.NoError(t, r.err)
			parts, err := drain(r.stream)
			if fp == abi.FailOpen {
				require.NoError(t, err)
				require.Len(t, parts, 3, "fail-open releases what was held")
			} else {
				var te *abi.TransformError
				require.ErrorAs(t, err, &te)
				require.Equal(t, abi.ClassPlugin, te.Class)
				require.Contains(t, te.Message, "end exploded")
				require.Len(t, parts, 1)
			}
		}
	})
	t.Run("an error in a later stage during a release", func(t *testing.T) {
		boom := errors.New("second stage says no")
		t1 := byDelta("t1", map[string]abi.Verdict{"a": verdict(abi.PartHold)})
		t2 := byDelta("t2", map[string]abi.Verdict{"a": {Action: abi.PartError, Err: boom}})
		m := &scriptModel{key: "p/a", scripts: [][]sstep{texts("a", "b")}}
		r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{t1, t2}})
		require.ErrorIs(t, r.err, boom)
		_, c1 := t1.counts()
		_, c2 := t2.counts()
		require.Equal(t, [2]int{1, 1}, [2]int{c1, c2})
	})
}

// ticking advances clk by step, over and over on a goroutine of its own,
// until the returned stop is called: a clock that goes on while the code
// under test blocks.
func ticking(clk *manualClock, step time.Duration) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Microsecond):
				clk.Advance(step)
			}
		}
	}()
	return func() { close(done); <-exited }
}

// safetyNet is a context that ends a test that would otherwise hang (the
// code before a fix); it is never what a passing test relies on.
func safetyNet(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// MaxHoldTime caps how long the oldest held part may
// wait, also while the provider sends nothing more (no first-content
// deadline here to save the day).
func TestChain_holdTimeWhileTheProviderIsSilent(t *testing.T) {
	holdText := func(p abi.TransformPolicy, from int) *funcTransform {
		return &funcTransform{name: "h", policy: p, part: func(n int, q *Part) (abi.Verdict, error) {
			if q.Kind == abi.KindTextDelta && n >= from {
				return verdict(abi.PartHold), nil
			}
			return verdict(abi.PartPass), nil
		}}
	}
	t.Run("before commit, a flush commits what was held", func(t *testing.T) {
		clk := newManualClock()
		ft := holdText(abi.TransformPolicy{MaxHoldTime: time.Second}, 0)
		m := &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{sscript(preamble(), pText("I'm"), pText(" fine"), pStall(0))}}
		stop := ticking(clk, 100*time.Millisecond)
		r := runOne(safetyNet(t), m, attemptOpts{ts: []abi.Transformer{ft}})
		stop()
		require.NoError(t, r.err)
		require.False(t, r.empty)
		var got []Part
		for range 5 {
			p, err := r.stream.Recv()
			require.NoError(t, err)
			got = append(got, p)
		}
		require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:I'm", "text-delta: fine"}, kinds(got))
		_, closed := ft.counts()
		require.Equal(t, 1, closed, "the flush detached the transform")
		require.NoError(t, r.stream.Close()) // the upstream still stalls: the caller gives up
		require.True(t, m.stream(0).isClosed())
	})
	t.Run("before commit, a fail fails the attempt", func(t *testing.T) {
		clk := newManualClock()
		ft := holdText(abi.TransformPolicy{MaxHoldTime: time.Second, OnCap: abi.CapFail}, 0)
		m := &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{sscript(preamble(), pText("I'm"), pStall(0))}}
		stop := ticking(clk, 100*time.Millisecond)
		r := runOne(safetyNet(t), m, attemptOpts{ts: []abi.Transformer{ft}})
		stop()
		var ce *abi.HoldCapError
		require.ErrorAs(t, r.err, &ce)
		require.Equal(t, "time", ce.Cap)
		require.Equal(t, 1, ce.Parts)
		require.GreaterOrEqual(t, ce.Held, time.Second)
		require.True(t, m.stream(0).isClosed(), "the failed attempt's upstream is closed")
	})
	t.Run("after commit, the caller gets what was held", func(t *testing.T) {
		clk := newManualClock()
		// Parts 0-3 (the preamble and "a") pass and commit; "b" is held.
		ft := holdText(abi.TransformPolicy{MaxHoldTime: time.Second}, 4)
		m := &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{sscript(preamble(), pText("a"), pText("b"), pStall(0))}}
		r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{ft}})
		require.NoError(t, r.err)
		for range 4 {
			_, err := r.stream.Recv()
			require.NoError(t, err)
		}
		stop := ticking(clk, 100*time.Millisecond)
		got := make(chan Part, 1)
		go func() {
			p, _ := r.stream.Recv()
			got <- p
		}()
		select {
		case p := <-got:
			require.Equal(t, "b", p.Delta)
		case <-time.After(10 * time.Second):
			require.NoError(t, r.stream.Close())
			<-got
			t.Fatal("the held part waited past MaxHoldTime on a silent provider")
		}
		stop()
		require.NoError(t, r.stream.Close())
		_, err := r.stream.Recv()
		require.ErrorIs(t, err, ErrStreamClosed)
		require.True(t, m.stream(0).isClosed())
	})
	t.Run("a part that arrives in time is held, then passes in order", func(t *testing.T) {
		clk := newManualClock()
		ft := &funcTransform{name: "h", policy: abi.TransformPolicy{MaxHoldTime: time.Second},
			part: func(n int, q *Part) (abi.Verdict, error) {
				if q.Kind == abi.KindTextDelta && q.Delta == "a" {
					return verdict(abi.PartHold), nil
				}
				return verdict(abi.PartPass), nil
			}}
		m := &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{sscript(preamble(), pText("a"),
			sstep{do: func() { clk.Advance(500 * time.Millisecond) }, part: Part{Kind: abi.KindTextDelta, Delta: "b"}},
			pKind(abi.KindTextEnd), pFinish(abi.ReasonStop))}}
		r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{ft}})
		require.NoError(t, r.err)
		parts, err := drain(r.stream)
		require.NoError(t, err)
		require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:a", "text-delta:b", "text-end", "finish"}, kinds(parts))
		_, closed := ft.counts()
		require.Equal(t, 1, closed)
	})
}

// The hold-time wait's own stop-after-fire: its timer firing just as the
// part arrives (and as it is stopped) neither loses nor reorders a part.
func TestChain_holdTimeFiringAsThePartArrives(t *testing.T) {
	{
		clk := lateStopClock{newManualClock()}
		ft := &funcTransform{name: "h", policy: abi.TransformPolicy{MaxHoldTime: time.Second},
			part: func(n int, q *Part) (abi.Verdict, error) {
				if q.Kind == abi.KindTextDelta && q.Delta == "a" {
					return verdict(abi.PartHold), nil
				}
				return verdict(abi.PartPass), nil
			}}
		m := &scriptModel{key: "p/a", clock: clk.manualClock, scripts: [][]sstep{answer("a", "b", "c")}}
		r := runAttempt(t.Context(), &attemptSpec{model: m, req: &Request{}, number: 1,
			transformers: []abi.Transformer{ft}, clock: clk})
		require.NoError(t, r.err)
		parts, err := drain(r.stream)
		require.NoError(t, err)
		require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:a", "text-delta:b",
			"text-delta:c", "text-end", "finish"}, kinds(parts))
	}
}

// Before commit a hold of non-output parts (the refusal detector's
// preamble) is enforced as parts arrive, with no reader goroutine: a flush
// there would not be observable. A hold whose cap fails the attempt is
// enforced while silent too.
func TestChain_holdTimeBeforeCommitOnlyWhereItShows(t *testing.T) {
	t.Run("the refusal detector's preamble hold needs no reader", func(t *testing.T) {
		m := &scriptModel{key: "p/a", scripts: [][]sstep{answer("Sure", "!")}}
		r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{mustRefusal(t)}})
		require.NoError(t, r.err)
		require.Nil(t, r.stream.rd, "no reader goroutine for a preamble hold")
		parts, err := drain(r.stream)
		require.NoError(t, err)
		require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:Sure", "text-delta:!", "text-end", "finish"}, kinds(parts))
	})
	t.Run("a fail cap on a preamble hold fails a silent attempt", func(t *testing.T) {
		clk := newManualClock()
		holdAll := &funcTransform{name: "h", policy: abi.TransformPolicy{MaxHoldTime: time.Second, OnCap: abi.CapFail},
			part: func(int, *Part) (abi.Verdict, error) { return verdict(abi.PartHold), nil }}
		m := &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{sscript(preamble(), pStall(0))}}
		stop := ticking(clk, 100*time.Millisecond)
		r := runOne(safetyNet(t), m, attemptOpts{ts: []abi.Transformer{holdAll}})
		stop()
		var ce *abi.HoldCapError
		require.ErrorAs(t, r.err, &ce)
		require.Equal(t, "time", ce.Cap)
		require.Equal(t, 3, ce.Parts)
	})
}
