//go:build !wasip1

package sdk_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/sdk"
	"github.com/retryhost/retryhost/plugins/sdk/internal/guest"
	"github.com/retryhost/retryhost/plugins/sdk/transform"
)

// promiser declares stream starts HOLD and text ends DETACH; its streams
// keep or break that promise as told.
type promiser struct {
	breakVerdict, breakState bool
	last                     *promised
}

func (p *promiser) Static() map[abi.PartKind]abi.PartAction {
	return map[abi.PartKind]abi.PartAction{abi.KindStreamStart: abi.PartHold, abi.KindTextEnd: abi.PartDetach}
}

func (p *promiser) Open(abi.StreamInfo) (transform.Stream, error) {
	p.last = &promised{p: p}
	return p.last, nil
}

type promised struct {
	p      *promiser
	seen   int
	closed bool
}

func (s *promised) Part(part *abi.Part) (abi.Verdict, error) {
	switch part.Kind {
	case abi.KindStreamStart:
		if s.p.breakState {
			s.seen++
		}
		if s.p.breakVerdict {
			return abi.Verdict{Action: abi.PartPass}, nil
		}
		return abi.Verdict{Action: abi.PartHold}, nil
	case abi.KindTextEnd:
		return abi.Verdict{Action: abi.PartDetach}, nil
	}
	s.seen++
	return abi.Verdict{Action: abi.PartHold}, nil
}
func (s *promised) End() (abi.Verdict, error) { return abi.Verdict{}, nil }
func (s *promised) Close()                    { s.closed = true }

func loadPromiser(t *testing.T, p *promiser) *sdk.Plugin {
	t.Helper()
	transform.Register(func([]byte) (transform.Transform, error) { return p, nil })
	t.Cleanup(func() { guest.NewTransform = nil })
	pl, err := sdk.Load("promiser", nil)
	require.NoError(t, err)
	return pl
}

// TestStaticPromiseChecked: natively, sdk.Load calls Stream.Part even for
// the kinds with a static verdict and fails the call when the stream
// broke its promise, so a plugin's own tests catch what a v1.1 host
// (which would never call it for those parts) would hide.
func TestStaticPromiseChecked(t *testing.T) {
	ctx := context.Background()
	start := abi.Part{Kind: abi.KindStreamStart}
	for _, tc := range []struct {
		name string
		p    promiser
		err  string
	}{
		{name: "kept", p: promiser{}},
		{name: "other verdict", p: promiser{breakVerdict: true}, err: "declared hold, Stream.Part answered pass"},
		{name: "state changed", p: promiser{breakState: true}, err: "changed the stream's state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := loadPromiser(t, &tc.p)
			require.True(t, pl.Hints().AutoClose)
			require.Equal(t, abi.PartHold, pl.Hints().Static[abi.KindStreamStart])
			s, err := pl.Open(ctx, abi.StreamInfo{ID: 1})
			require.NoError(t, err)
			defer s.Close()
			v, err := s.Part(ctx, &start)
			if tc.err != "" {
				require.ErrorIs(t, err, sdk.ErrStaticBroken)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, abi.PartHold, v.Action)
		})
	}
}

// TestAutoClose: the SDK closes a stream itself at its DETACH (the
// author's Close runs then), and the host's later close is harmless.
func TestAutoClose(t *testing.T) {
	ctx := context.Background()
	p := &promiser{}
	pl := loadPromiser(t, p)
	for range 3 { // handles are reused after each close
		s, err := pl.Open(ctx, abi.StreamInfo{ID: 1})
		require.NoError(t, err)
		v, err := s.Part(ctx, &abi.Part{Kind: abi.KindTextDelta, Delta: "x"})
		require.NoError(t, err)
		require.Equal(t, abi.PartHold, v.Action)
		require.Equal(t, 1, pl.OpenStreams())
		v, err = s.Part(ctx, &abi.Part{Kind: abi.KindTextEnd})
		require.NoError(t, err)
		require.Equal(t, abi.PartDetach, v.Action)
		require.Zero(t, pl.OpenStreams(), "forgotten at its DETACH")
		require.True(t, p.last.closed, "and closed by the SDK")
		s.Close()
		require.Zero(t, pl.OpenStreams())
	}
}
