package host

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// TestPart_OverTheMaximumSizeIsNeverSent: a part whose payload is over
// abi.MaxPartSize fails the stream with ErrLimit (the fail policy then
// applies) without a call into the guest, and the instance serves on: the
// provider's part is not the plugin's failure, so even a breaker that
// trips on one failure does not count it.
func TestPart_OverTheMaximumSizeIsNeverSent(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		ctx := context.Background()
		rt := newRuntime(t, append(opts, WithBreaker(1, time.Hour))...)
		p, err := rt.Load(ctx, "upper", fixture(t, "upper"), WithInstances(1))
		require.NoError(t, err)
		defer p.Close(ctx)
		st, err := p.Open(ctx, abi.StreamInfo{ID: 1})
		require.NoError(t, err)
		defer st.Close()
		gen := p.slots[0].gen
		big := abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: strings.Repeat("a", abi.MaxPartSize)}
		_, err = st.Part(ctx, &big)
		require.ErrorIs(t, err, ErrLimit)
		var le *LimitError
		require.ErrorAs(t, err, &le)
		require.Equal(t, "part size", le.Limit)
		require.Equal(t, abi.MaxPartSize, le.Max)
		require.EqualError(t, err, `host: plugin "upper": part: part size: 16777217 exceeds the limit of 16777216`)
		require.Equal(t, gen, p.slots[0].gen, "the instance is kept")

		// A part of exactly the maximum is judged.
		st2, err := p.Open(ctx, abi.StreamInfo{ID: 2})
		require.NoError(t, err)
		defer st2.Close()
		most := abi.Part{Kind: abi.KindTextDelta, Delta: strings.Repeat("a", abi.MaxPartSize)}
		v, err := st2.Part(ctx, &most)
		require.NoError(t, err)
		require.Equal(t, abi.PartPass, v.Action, "upper passes what its buffer cannot hold")
	})
}

// TestReplace_EmptyListIsAVerdict: a REPLACE with the empty list (count
// 0) discards the part and emits nothing (ABI v1.3 §8.6); the vectors
// pin that no payload at all means the same.
func TestReplace_EmptyListIsAVerdict(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		ctx := context.Background()
		rt := newRuntime(t, opts...)
		// replacebomb's config: count, kind; count 0 writes the header only.
		p, err := rt.Load(ctx, "replacebomb", fixture(t, "replacebomb"), WithInstances(1), WithConfig(u32s(0, uint32(abi.KindTextDelta))))
		require.NoError(t, err)
		defer p.Close(ctx)
		st, err := p.Open(ctx, abi.StreamInfo{ID: 1})
		require.NoError(t, err)
		defer st.Close()
		v, err := st.Part(ctx, &abi.Part{Kind: abi.KindTextDelta, Delta: "secret"})
		require.NoError(t, err)
		require.Equal(t, abi.PartReplace, v.Action)
		require.Empty(t, v.Replace)
	})
}
