package e2e_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
)

// hostFixture reads one of the host's WAT fixtures (make wasm).
func hostFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../host/testdata/" + name + ".wasm")
	require.NoError(t, err)
	return b
}

// drain reads s to its end and returns what it delivered and how it ended.
func drain(s driver.Stream) ([]abi.Part, error) {
	defer s.Close()
	var out []abi.Part
	for {
		p, err := s.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
}

// throughPlugin streams m's parts through p by way of a retryable model and
// returns what the caller got and how the stream ended (an error opening
// it included).
func throughPlugin(ctx context.Context, t *testing.T, m *streamer, p driver.Transformer) ([]abi.Part, error) {
	t.Helper()
	r, err := driver.New(m)
	require.NoError(t, err)
	rm, err := driver.NewRetryableModel(r, driver.WithTransforms(p))
	require.NoError(t, err)
	s, err := rm.Stream(ctx, &driver.Request{})
	if err != nil {
		return nil, err
	}
	return drain(s)
}

// TestFailClosedPluginFailureKeepsItsKind: under
// fail-closed, the error the driver returns for a plugin's timeout or trap
// still says which: errors.Is with the host's sentinel and errors.As to
// the *host.PluginError work through the *abi.TransformError.
func TestFailClosedPluginFailureKeepsItsKind(t *testing.T) {
	ctx := context.Background()
	rt := plugintest.Runtime(t, host.WithCallTimeout(100*time.Millisecond))
	for _, tc := range []struct {
		fixture string
		kind    error
	}{
		{"loop", host.ErrTimeout},
		{"trap", host.ErrTrap},
		{"garbage", host.ErrABIViolation},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			p, err := rt.Load(ctx, tc.fixture, hostFixture(t, tc.fixture), host.WithPolicy(abi.TransformPolicy{Fail: abi.FailClosed}))
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close(ctx) })
			m := &streamer{key: "p/a", parts: plugintest.TextStream("hello there", 4)}
			_, err = throughPlugin(ctx, t, m, p)
			require.Error(t, err)
			require.ErrorIs(t, err, tc.kind)
			var pe *host.PluginError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.fixture, pe.Plugin)
			var te *abi.TransformError
			require.ErrorAs(t, err, &te)
			require.Equal(t, abi.ClassPlugin, te.Class)
			require.False(t, errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded),
				"a plugin's timeout is not the caller's cancellation or deadline")
		})
	}
}

// TestRandomVerdicts_ExactlyOnePreamble: 150 streams
// through a guest that answers every part and every end with a random
// verdict (including REPLACE lists that try to inject a stream-start),
// fail-open and fail-closed: each stream fails cleanly or delivers exactly
// one stream-start, first.
func TestRandomVerdicts_ExactlyOnePreamble(t *testing.T) {
	ctx := context.Background()
	rt := plugintest.Runtime(t, host.WithCallTimeout(10*time.Second), host.WithBreaker(0, 0))
	failed, delivered := 0, 0
	for _, fail := range []abi.FailPolicy{abi.FailOpen, abi.FailClosed} {
		p, err := rt.Load(ctx, "randverdict", hostFixture(t, "randverdict"), host.WithInstances(1),
			host.WithConfig(binary.LittleEndian.AppendUint64(nil, 0x9e3779b97f4a7c15+uint64(fail))),
			host.WithPolicy(abi.TransformPolicy{Fail: fail}))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close(ctx) })
		for i := range 75 {
			m := &streamer{key: "p/a", parts: plugintest.TextStream("a random answer", 3)}
			out, err := throughPlugin(ctx, t, m, p)
			starts := 0
			for _, part := range out {
				if part.Kind == abi.KindStreamStart {
					starts++
				}
			}
			if err != nil {
				failed++
				require.LessOrEqual(t, starts, 1, "%s stream %d: a failed stream never repeats the preamble", fail, i)
			} else {
				delivered++
				require.Equal(t, 1, starts, "%s stream %d: exactly one stream-start: %v", fail, i, kinds(out))
			}
			if len(out) > 0 {
				require.Equal(t, abi.KindStreamStart, out[0].Kind, "%s stream %d: the preamble comes first: %v", fail, i, kinds(out))
			}
			require.Equal(t, m.opened.Load(), m.closed.Load(), "the upstream is closed")
		}
	}
	t.Logf("%d streams delivered, %d failed cleanly", delivered, failed)
	require.Positive(t, delivered)
	require.Positive(t, failed)
}

func kinds(ps []abi.Part) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Kind.String()
	}
	return out
}

// TestRefusalBuilds_SameCapPolicy: the Go and C builds of the refusal
// detector declare the same on_cap for the same config (ABI v1.2: unset
// follows "fail", "flush" and "fail" are explicit).
func TestRefusalBuilds_SameCapPolicy(t *testing.T) {
	ctx := context.Background()
	rt := plugintest.Runtime(t, host.WithCallTimeout(10*time.Second))
	goBuild, err := os.ReadFile("../refusal/refusal.wasm")
	require.NoError(t, err)
	for _, tc := range []struct {
		config string
		onCap  abi.CapAction
		fails  bool
	}{
		{`{}`, abi.CapDefault, false},
		{`{"fail":"closed"}`, abi.CapDefault, true},
		{`{"fail":"closed","on_cap":"flush"}`, abi.CapFlush, false},
		{`{"on_cap":"fail"}`, abi.CapFail, true},
	} {
		for build, wasm := range map[string][]byte{"go": goBuild, "c": plugins.Refusal} {
			p, err := rt.Load(ctx, "refusal-"+build, wasm, host.WithConfig([]byte(tc.config)), host.WithInstances(1))
			require.NoError(t, err, build)
			pol := p.Policy()
			require.Equal(t, tc.onCap, pol.OnCap, "%s %s", build, tc.config)
			require.Equal(t, tc.fails, pol.FailsAtCap(), "%s %s", build, tc.config)
			require.NoError(t, p.Close(ctx))
		}
	}
}

// TestHoldCapsClampedThroughTheDriver: a plugin that
// declares the largest hold caps the record can say and holds every part
// is held to the operator's maxima by the driver: fail-open, the parts are
// flushed at 256 and all arrive once; fail-closed, the attempt fails with a
// HoldCapError at 256 parts instead of buffering the whole upstream.
func TestHoldCapsClampedThroughTheDriver(t *testing.T) {
	ctx := context.Background()
	rt := plugintest.Runtime(t, host.WithCallTimeout(10*time.Second))
	text := make([]byte, 2000)
	for i := range text {
		text[i] = 'a' + byte(i%26)
	}
	for _, closed := range []bool{false, true} {
		cfg := []byte{0}
		if closed {
			cfg[0] = 1
		}
		p, err := rt.Load(ctx, "holdall", hostFixture(t, "holdall"), host.WithConfig(cfg))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close(ctx) })
		m := &streamer{key: "p/a", parts: plugintest.TextStream(string(text), 2)} // 1000 deltas
		out, err := throughPlugin(ctx, t, m, p)
		if closed {
			var hc *abi.HoldCapError
			require.ErrorAs(t, err, &hc)
			require.Equal(t, 256, hc.Parts, "held up to the operator's maximum, not the declared 2^32-1")
			require.Empty(t, out)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, m.parts, out, "flushed at the cap, every part once, in order")
	}
}
