package host

import (
	"time"

	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// The ABI v1.1 paths (hints, lazy open, retryhost_open_part, auto-close),
// shown with testdata/hinted.wat, which counts the calls it gets.

// counts reads hinted.wat's call counters from every live instance of p.
type counts struct {
	Calls, Opens, OpenParts, Parts, Batches, Ends, Closes, Bad int
}

func countsOf(t *testing.T, p *Plugin) counts {
	t.Helper()
	var c counts
	for _, s := range p.slots {
		s.mu.Lock()
		if in := s.inst; in != nil {
			g := func(name string) int { return int(int32(uint32(in.mod.ExportedGlobal(name).Get()))) }
			c.Calls += g("calls")
			c.Opens += g("opens")
			c.OpenParts += g("open_parts")
			c.Parts += g("parts")
			c.Batches += g("batches")
			c.Ends += g("ends")
			c.Closes += g("closes")
			c.Bad += g("bad")
		}
		s.mu.Unlock()
	}
	return c
}

func loadHinted(t *testing.T, rt *Runtime, config string, opts ...LoadOption) *Plugin {
	t.Helper()
	p, err := rt.Load(context.Background(), "hinted", fixture(t, "hinted"),
		append([]LoadOption{WithConfig([]byte(config)), WithInstances(1)}, opts...)...)
	require.NoError(t, err)
	return p
}

var (
	partStart     = abi.Part{Kind: abi.KindStreamStart}
	partMeta      = abi.Part{Kind: abi.KindResponseMeta, ID: "r", Meta: &abi.ResponseMeta{ID: "r", ModelID: "m"}}
	partTextStart = abi.Part{Kind: abi.KindTextStart, ID: "t0"}
	partReasStart = abi.Part{Kind: abi.KindReasoningStart, ID: "r0"}
	partReasDelta = abi.Part{Kind: abi.KindReasoningDelta, ID: "r0", Delta: "hmm"}
	partRaw       = abi.Part{Kind: abi.KindRaw}
)

func delta(s string) *abi.Part { return &abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: s} }

func mustPart(t *testing.T, st abi.StreamTransform, p *abi.Part, want abi.PartAction) abi.Verdict {
	t.Helper()
	v, err := st.Part(context.Background(), p)
	require.NoError(t, err)
	require.Equal(t, want, v.Action, "verdict for a %v part", p.Kind)
	return v
}

func TestHints_DeclaredWithThePolicy(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		rt := newRuntime(t, opts...)
		p := loadHinted(t, rt, "")
		require.Equal(t, abi.Hints{AutoClose: true, Static: map[abi.PartKind]abi.PartAction{
			abi.KindStreamStart: abi.PartPass, abi.KindResponseMeta: abi.PartPass, abi.KindTextStart: abi.PartPass,
			abi.KindReasoningStart: abi.PartHold, abi.KindReasoningDelta: abi.PartDrop, abi.KindRaw: abi.PartDetach,
		}}, p.Hints())
		require.Equal(t, int32(0), int32(uint32(p.slots[0].inst.mod.ExportedGlobal("policy_status").Get())))

		v10, err := rt.Load(context.Background(), "refusal", fixture(t, "refusal"))
		require.NoError(t, err)
		require.Equal(t, abi.Hints{}, v10.Hints(), "a v1.0 plugin declares no hints")
	})
}

// TestHints_StaticPartsMakeNoCall: parts of static kinds are answered by
// the host, as the guest would; the first other part opens the stream and
// is judged in one retryhost_open_part call; after the guest's DETACH (or
// ERROR) under auto_close no retryhost_close is made.
func TestHints_StaticPartsMakeNoCall(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		ctx := context.Background()
		rt := newRuntime(t, opts...)
		p := loadHinted(t, rt, "")

		st, err := p.Open(ctx, abi.StreamInfo{ID: 1, Model: "m", Attempt: 1})
		require.NoError(t, err)
		mustPart(t, st, &partStart, abi.PartPass)
		mustPart(t, st, &partMeta, abi.PartPass)
		mustPart(t, st, &partReasStart, abi.PartHold)
		mustPart(t, st, &partReasDelta, abi.PartDrop)
		mustPart(t, st, &partTextStart, abi.PartPass)
		require.Equal(t, counts{}, countsOf(t, p), "static parts make no call, and the stream is not opened")
		mustPart(t, st, delta("Sure"), abi.PartDetach)
		require.Equal(t, counts{Calls: 1, Opens: 1, OpenParts: 1}, countsOf(t, p), "one call opens and judges")
		st.Close()
		require.Equal(t, counts{Calls: 1, Opens: 1, OpenParts: 1}, countsOf(t, p), "auto_close: no close after DETACH")

		// A refusal: open_part HOLDs, then part ERRORs; no close.
		st, err = p.Open(ctx, abi.StreamInfo{ID: 2})
		require.NoError(t, err)
		require.Equal(t, uint32(0), st.(*stream).handle)
		mustPart(t, st, &partStart, abi.PartPass)
		mustPart(t, st, delta("I ca"), abi.PartHold)
		require.Equal(t, uint32(1), st.(*stream).handle, "the auto-closed handle was reused")
		v := mustPart(t, st, delta("n't"), abi.PartError)
		require.Equal(t, &abi.RefusalError{Transform: "hinted", Phrase: "i can't", Text: "I can't"}, v.Err)
		st.Close()
		require.Equal(t, counts{Calls: 3, Opens: 2, OpenParts: 2, Parts: 1}, countsOf(t, p))
	})
}

func TestHints_NoAutoCloseClosesAfterError(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		ctx := context.Background()
		rt := newRuntime(t, opts...)
		p := loadHinted(t, rt, "n")
		require.False(t, p.Hints().AutoClose)
		st, err := p.Open(ctx, abi.StreamInfo{ID: 1})
		require.NoError(t, err)
		mustPart(t, st, delta("I can't"), abi.PartError)
		st.Close()
		require.Equal(t, counts{Calls: 2, Opens: 1, OpenParts: 1, Closes: 1}, countsOf(t, p))
	})
}

// TestHints_StreamsWithOnlyStaticParts: a stream closed with only static
// parts, or detached by a static verdict before its first call, makes no
// call at all; one detached statically after it was opened is closed once;
// one that reaches its end unopened is opened first.
func TestHints_StreamsWithOnlyStaticParts(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		ctx := context.Background()
		rt := newRuntime(t, opts...)
		p := loadHinted(t, rt, "")

		st, err := p.Open(ctx, abi.StreamInfo{ID: 1})
		require.NoError(t, err)
		mustPart(t, st, &partStart, abi.PartPass)
		mustPart(t, st, &partTextStart, abi.PartPass)
		st.Close() // abandoned
		st, err = p.Open(ctx, abi.StreamInfo{ID: 2})
		require.NoError(t, err)
		mustPart(t, st, &partStart, abi.PartPass)
		mustPart(t, st, &partRaw, abi.PartDetach)
		st.Close()
		require.Equal(t, counts{}, countsOf(t, p), "never opened, never closed")

		st, err = p.Open(ctx, abi.StreamInfo{ID: 3})
		require.NoError(t, err)
		mustPart(t, st, delta("I"), abi.PartHold)
		mustPart(t, st, &partRaw, abi.PartDetach)
		require.Equal(t, counts{Calls: 2, Opens: 1, OpenParts: 1, Closes: 1}, countsOf(t, p), "a static DETACH of an opened stream closes it")
		st.Close()
		require.Equal(t, 1, countsOf(t, p).Closes, "closed once")

		st, err = p.Open(ctx, abi.StreamInfo{ID: 4})
		require.NoError(t, err)
		mustPart(t, st, &partStart, abi.PartPass)
		v, err := st.End(ctx)
		require.NoError(t, err)
		require.Equal(t, abi.PartPass, v.Action)
		st.Close()
		require.Equal(t, counts{Calls: 5, Opens: 2, OpenParts: 1, Ends: 1, Closes: 2}, countsOf(t, p), "an end opens first")
	})
}

// TestHints_OpenAndPartWhenTheyDoNotFit: a first part too big for the
// buffer with the StreamInfo is sent after a plain retryhost_open.
func TestHints_OpenAndPartWhenTheyDoNotFit(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		ctx := context.Background()
		rt := newRuntime(t, opts...)
		p := loadHinted(t, rt, "n")
		st, err := p.Open(ctx, abi.StreamInfo{ID: 1})
		require.NoError(t, err)
		mustPart(t, st, delta("I can"+strings.Repeat(" ", 5000)), abi.PartDetach)
		st.Close()
		require.Equal(t, counts{Calls: 3, Opens: 1, Parts: 1, Closes: 1}, countsOf(t, p))
	})
}

// TestHints_OpenFailureAppliesTheFailPolicy: a guest whose open fails (in
// retryhost_open_part or retryhost_open) fails the stream at its first
// call; fail-open passes the stream untouched, fail-closed fails it; no
// close is made and the instance is kept.
func TestHints_OpenFailureAppliesTheFailPolicy(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		ctx := context.Background()
		for _, fail := range []abi.FailPolicy{abi.FailOpen, abi.FailClosed} {
			t.Run(fail.String(), func(t *testing.T) {
				rt := newRuntime(t, opts...)
				p := loadHinted(t, rt, "f", WithPolicy(abi.TransformPolicy{Fail: fail}))
				in := textStream("I can't")
				r := run(ctx, p, 1, in)
				require.ErrorIs(t, r.fail, ErrPluginFailed)
				var pe *PluginError
				require.ErrorAs(t, r.fail, &pe)
				require.Equal(t, "open", pe.Op)
				if fail == abi.FailOpen {
					require.Equal(t, render(in), render(r.out), "fail-open: the stream passes untouched")
				} else {
					require.Equal(t, render(in[:2]), render(r.out), "fail-closed: nothing after the failure")
				}
				// Through End: only static parts, then the end opens and fails.
				r = run(ctx, p, 2, []abi.Part{partStart, partTextStart})
				require.ErrorIs(t, r.fail, ErrPluginFailed)
				if fail == abi.FailOpen {
					require.Equal(t, render([]abi.Part{partStart, partTextStart}), render(r.out))
				}
				require.Equal(t, counts{Calls: 2, Opens: 2, OpenParts: 1}, countsOf(t, p), "no close after a failed open; the instance is kept")
			})
		}
	})
}

// TestHints_OpenPartViolation: a malformed answer with a valid action from
// retryhost_open_part (here an ERROR payload longer than the buffer) is an
// ABI violation, not a failed open: the instance is discarded.
func TestHints_OpenPartViolation(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		ctx := context.Background()
		rt := newRuntime(t, opts...)
		p := loadHinted(t, rt, "x")
		gen := p.slots[0].gen
		st, err := p.Open(ctx, abi.StreamInfo{ID: 1})
		require.NoError(t, err)
		_, err = st.Part(ctx, delta("I"))
		require.ErrorIs(t, err, ErrABIViolation)
		st.Close()
		require.NotEqual(t, gen, p.slots[0].gen, "the instance was discarded")
	})
}

// TestHints_MalformedTail: a policy record whose hints are malformed is
// answered StatusInvalid and ignored whole; the plugin works with every
// call made.
func TestHints_MalformedTail(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		ctx := context.Background()
		rt := newRuntime(t, opts...)
		p := loadHinted(t, rt, "m")
		require.Equal(t, int32(abi.StatusInvalid), int32(uint32(p.slots[0].inst.mod.ExportedGlobal("policy_status").Get())))
		require.Equal(t, abi.Hints{}, p.Hints())
		require.Equal(t, abi.TransformPolicy{MaxHeldParts: 256, MaxHeldBytes: 64 << 10, MaxHoldTime: 10 * time.Second}, p.Policy(),
			"the defaults: the operator's hold maxima")
		in := []abi.Part{partStart, partReasStart, partTextStart, *delta("I ca"), *delta("n't")}
		r := run(ctx, p, 1, in)
		require.NoError(t, r.fail)
		require.Equal(t, &abi.RefusalError{Transform: "hinted", Phrase: "i can't", Text: "I can't"}, r.err)
		require.Equal(t, counts{Calls: 6, Opens: 1, OpenParts: 1, Parts: 4, Closes: 1}, countsOf(t, p))
	})
}

// TestHints_ConcurrentStreamsMatchNative: concurrent streams through the
// hinted plugin (static parts, lazy opens, batches of opened streams,
// auto-close) end exactly as through the native detector, and the guest
// never sees a call for a handle it does not hold.
func TestHints_ConcurrentStreamsMatchNative(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		ctx := context.Background()
		rt := newRuntime(t, opts...)
		p, err := rt.Load(ctx, "hinted", fixture(t, "hinted"), WithInstances(2))
		require.NoError(t, err)
		n := 2000
		if raceEnabled {
			n = 400
		}
		inputs := make([][]abi.Part, n)
		for i := range inputs {
			switch i % 4 {
			case 0:
				inputs[i] = textStream("I", " can", "'t help with that")
			case 1:
				inputs[i] = textStream("I", " can", " help")
			case 2:
				inputs[i] = textStream(fmt.Sprintf("Sure %d", i))
			default:
				inputs[i] = textStream("I can")
			}
		}
		outcome := func(tr abi.Transformer) []string {
			out := make([]string, len(inputs))
			var wg sync.WaitGroup
			for i := range inputs {
				wg.Go(func() {
					r := run(ctx, tr, uint64(i), inputs[i])
					out[i] = fmt.Sprintf("%q fail=%v err=%v", render(r.out), r.fail, r.err != nil)
				})
			}
			wg.Wait()
			return out
		}
		require.Equal(t, outcome(nativeRefusal{}), outcome(p))
		c := countsOf(t, p)
		require.Zero(t, c.Bad, "a call for a handle the guest does not hold")
		require.Equal(t, n, c.Opens, "each stream opened once")
		require.Equal(t, n/4, c.Ends, "only the streams that never decided reach the end")
		require.Equal(t, n/4, c.Closes, "auto_close: only the streams that ended are closed")
	})
}

// TestRegistry_HotSwapCarriesHints: a version swapped in serves new streams
// with its own hints.
func TestRegistry_HotSwapCarriesHints(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t)
	reg := NewRegistry(rt)
	defer func() { require.NoError(t, reg.Close(ctx)) }()
	named, err := reg.Load(ctx, "xf", fixture(t, "refusal"))
	require.NoError(t, err)
	old, err := named.Open(ctx, abi.StreamInfo{ID: 1})
	require.NoError(t, err)
	_, err = reg.Load(ctx, "xf", fixture(t, "hinted"), WithInstances(1))
	require.NoError(t, err)
	p := named.cur.Load()
	require.True(t, p.Hints().AutoClose)
	st, err := named.Open(ctx, abi.StreamInfo{ID: 2})
	require.NoError(t, err)
	mustPart(t, st, &partReasDelta, abi.PartDrop)
	st.Close()
	require.Equal(t, counts{}, countsOf(t, p), "the new version's static verdicts apply")
	// The stream opened before the swap stays on v1.0: no hints there.
	mustPart(t, old, &partTextStart, abi.PartPass)
	old.Close()
}
