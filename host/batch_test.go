package host

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// TestBatch_CombinesWaitingStreams holds the instance busy while 50 streams
// queue a part each, then releases it: one retryhost_parts call judges them
// all, and every stream gets the verdict it would get alone.
func TestBatch_CombinesWaitingStreams(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		ctx := context.Background()
		rt := newRuntime(t, opts...)
		p, err := rt.Load(ctx, "refusal", fixture(t, "refusal"), WithInstances(1))
		require.NoError(t, err)
		require.True(t, p.hasBatch)
		const n = 50
		sts := make([]abi.StreamTransform, n)
		for i := range sts {
			sts[i], err = p.Open(ctx, abi.StreamInfo{ID: uint64(i)})
			require.NoError(t, err)
			// The first call opens the stream in the guest (lazy open);
			// only opened streams are combined.
			v, err := sts[i].Part(ctx, &abi.Part{Kind: abi.KindTextStart, ID: "t0"})
			require.NoError(t, err)
			require.Equal(t, abi.PartPass, v.Action)
		}
		s := p.slots[0]
		s.mu.Lock() // the instance is busy
		var wg sync.WaitGroup
		got := make([]abi.Verdict, n)
		errs := make([]error, n)
		for i := range sts {
			delta := "I can't"
			if i%3 == 1 {
				delta = "I ca"
			} else if i%3 == 2 {
				delta = "Sure"
			}
			wg.Go(func() {
				got[i], errs[i] = sts[i].Part(ctx, &abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: delta})
			})
		}
		waitFor(t, func() bool {
			s.qmu.Lock()
			defer s.qmu.Unlock()
			return len(s.queue) == n
		}, "all parts to queue")
		s.mu.Unlock()
		wg.Wait()
		for i := range sts {
			require.NoError(t, errs[i])
			want := []abi.PartAction{abi.PartError, abi.PartHold, abi.PartDetach}[i%3]
			require.Equal(t, want, got[i].Action, "stream %d", i)
			if want == abi.PartError {
				require.Equal(t, &abi.RefusalError{Transform: "refusal", Phrase: "i can't", Text: "I can't"}, got[i].Err)
			}
			sts[i].Close()
		}
	})
}

// TestBatch_ConcurrentStreamsMatchNative: 200 concurrent streams through the
// Wasm detector (batched under contention) end exactly as through the native
// Go detector.
func TestBatch_ConcurrentStreamsMatchNative(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t)
	p, err := rt.Load(ctx, "refusal", fixture(t, "refusal"), WithInstances(2))
	require.NoError(t, err)
	inputs := make([][]abi.Part, 200)
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
}
