package host

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// callLog records plugin calls as "plugin op failure".
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) PluginCall(_ context.Context, c PluginCall) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf("%s %s %s", c.Plugin, c.Op, c.Failure))
	if (c.Err == nil) != (c.Failure == "") {
		l.calls = append(l.calls, "INCONSISTENT")
	}
}

func (l *callLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

func TestObserver_countsCallsAndFailuresByKind(t *testing.T) {
	ctx := context.Background()
	onePart := []abi.Part{{Kind: abi.KindTextDelta, ID: "t0", Delta: "hi"}}
	tests := []struct {
		name    string
		fixture string
		opts    []Option
		drive   func(t *testing.T, p *Plugin)
		want    []string
	}{
		{
			name: "a healthy transform: open, each part, end", fixture: "upper",
			drive: func(t *testing.T, p *Plugin) {
				r := run(ctx, p, 1, onePart)
				require.NoError(t, r.fail)
			},
			want: []string{"p open ", "p part ", "p end "},
		},
		{
			name: "a trap, then the breaker disables the plugin", fixture: "trap",
			opts: []Option{WithBreaker(1, time.Hour)},
			drive: func(t *testing.T, p *Plugin) {
				require.ErrorIs(t, run(ctx, p, 1, onePart).fail, ErrTrap)
				require.ErrorIs(t, run(ctx, p, 2, onePart).fail, ErrDisabled)
			},
			want: []string{"p open ", "p part trap", "p open disabled"},
		},
		{
			name: "a guest that never returns times out", fixture: "loop",
			opts: []Option{WithCallTimeout(20 * time.Millisecond)},
			drive: func(t *testing.T, p *Plugin) {
				require.ErrorIs(t, run(ctx, p, 1, onePart).fail, ErrTimeout)
			},
			want: []string{"p open ", "p part timeout"},
		},
		{
			name: "an answer the ABI forbids", fixture: "garbage",
			drive: func(t *testing.T, p *Plugin) {
				_, err := p.Decide(ctx, &abi.Attempt{Number: 1})
				require.ErrorIs(t, err, ErrABIViolation)
			},
			want: []string{"p decide abi-violation"},
		},
		{
			name: "a call whose ctx is done", fixture: "upper",
			drive: func(t *testing.T, p *Plugin) {
				done, cancel := context.WithCancel(ctx)
				cancel()
				_, err := p.Open(done, abi.StreamInfo{ID: 1})
				require.ErrorIs(t, err, context.Canceled)
			},
			want: []string{"p open canceled"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log callLog
			rt := newRuntime(t, append([]Option{WithObserver(&log)}, tt.opts...)...)
			p, err := rt.Load(ctx, "p", fixture(t, tt.fixture))
			require.NoError(t, err)
			tt.drive(t, p)
			require.Equal(t, tt.want, log.get())
		})
	}
}

func TestFailureKind(t *testing.T) {
	require.Empty(t, FailureKind(nil))
	require.Equal(t, "instance-lost", FailureKind(fmt.Errorf("wrapped: %w", &PluginError{Kind: ErrInstanceLost})))
	require.Equal(t, "no-capacity", FailureKind(&PluginError{Kind: ErrNoCapacity}))
	require.Equal(t, "limit", FailureKind(&PluginError{Kind: ErrLimit, Err: &LimitError{Limit: "replace parts per call", Max: 1024}}))
	require.Equal(t, "canceled", FailureKind(context.DeadlineExceeded))
	require.Equal(t, "unknown", FailureKind(fmt.Errorf("something else")))
}

// TestObserver_unsetAllocatesNothing: without an observer the hook adds no
// allocation to a part call (the hot path): Part costs what its body costs.
func TestObserver_unsetAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates unevenly")
	}
	ctx := context.Background()
	rt := newRuntime(t)
	p, err := rt.Load(ctx, "upper", fixture(t, "upper"))
	require.NoError(t, err)
	st, err := p.Open(ctx, abi.StreamInfo{ID: 1})
	require.NoError(t, err)
	defer st.Close()
	part := abi.Part{Kind: abi.KindStreamStart}
	// On a loaded machine the two measurements can take different paths
	// (a call that runs over a quarter of its deadline marks the plugin
	// slow, and its later calls are timed in CPU time, measuredCall):
	// measure again, up to three times, so that only an observer hook
	// that allocates on every call fails.
	var hooked, body float64
	for range 3 {
		hooked = testing.AllocsPerRun(50, func() { _, _ = st.Part(ctx, &part) })
		body = testing.AllocsPerRun(50, func() { _, _ = st.(*stream).part(ctx, &part) })
		if hooked == body {
			break
		}
	}
	require.Equal(t, body, hooked)
}

// TestObserver_compose: a second WithObserver adds to the first instead of
// replacing it (a gateway's metrics beside the caller's telemetry), and a
// nil one is ignored.
func TestObserver_compose(t *testing.T) {
	ctx := context.Background()
	var a, b, c callLog
	rt := newRuntime(t, WithObserver(&a), WithObserver(nil), WithObserver(&b), WithObserver(&c))
	p, err := rt.Load(ctx, "p", fixture(t, "upper"))
	require.NoError(t, err)
	require.NoError(t, run(ctx, p, 1, []abi.Part{{Kind: abi.KindTextDelta, ID: "t0", Delta: "hi"}}).fail)
	want := []string{"p open ", "p part ", "p end "}
	require.Equal(t, want, a.get())
	require.Equal(t, want, b.get())
	require.Equal(t, want, c.get())
}
