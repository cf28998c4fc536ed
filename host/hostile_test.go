package host

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// baseline runs 100 streams through "upper" on a runtime of its own and
// checks that none failed: what the same streams must give beside hostile
// neighbours.
func baseline(ctx context.Context, t *testing.T, opts ...Option) []string {
	t.Helper()
	base := newRuntime(t, opts...)
	good, err := base.Load(ctx, "upper", fixture(t, "upper"))
	require.NoError(t, err)
	want := runGood(t, good, 100)
	for i, w := range want {
		require.NotContains(t, w, "FAILED", "baseline stream %d", i)
	}
	return want
}

// runGood drives n concurrent streams through tr and returns each one's output.
func runGood(t *testing.T, tr abi.Transformer, n int) []string {
	t.Helper()
	out := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := run(context.Background(), tr, uint64(i), textStream(streamText(i)...))
			if r.fail != nil || r.err != nil {
				out[i] = fmt.Sprintf("FAILED: %v %v", r.fail, r.err)
				return
			}
			out[i] = render(r.out)
		})
	}
	wg.Wait()
	return out
}

// TestHostile_IsolatedFromOtherPlugins: each hostile transform gets its
// specified outcome, applied to its own stream by its fail policy, while 100
// concurrent streams through a well-behaved plugin in the same runtime come
// out byte-identical to a run without the hostile ones.
func TestHostile_IsolatedFromOtherPlugins(t *testing.T) {
	hostile := []struct {
		fixture string
		policy  abi.FailPolicy
		kind    error
	}{
		{"loop", abi.FailOpen, ErrTimeout},
		{"trap", abi.FailClosed, ErrTrap},
		{"membomb", abi.FailOpen, ErrTrap},
		{"garbage", abi.FailClosed, ErrABIViolation},
		{"huge", abi.FailOpen, ErrABIViolation},
	}
	engines(t, func(t *testing.T, opts ...Option) {
		var logs logBuffer
		opts = append(opts, WithCallTimeout(time.Second), WithMemoryLimit(4<<20), WithLogger(logs.logger()))
		ctx := context.Background()

		want := baseline(ctx, t, opts...)

		rt := newRuntime(t, opts...)
		good, err := rt.Load(ctx, "upper", fixture(t, "upper"))
		require.NoError(t, err)
		plugins := make([]*Plugin, len(hostile))
		for i, h := range hostile {
			plugins[i], err = rt.Load(ctx, h.fixture, fixture(t, h.fixture), WithPolicy(abi.TransformPolicy{Fail: h.policy}))
			require.NoError(t, err)
		}
		results := make([]result, len(hostile))
		var got []string
		var wg sync.WaitGroup
		for i := range hostile {
			wg.Go(func() { results[i] = run(ctx, plugins[i], 1000+uint64(i), textStream("hi")) })
		}
		wg.Go(func() { got = runGood(t, good, 100) })
		wg.Wait()

		require.Equal(t, want, got, "well-behaved streams must be byte-identical with hostile plugins around")
		for i, h := range hostile {
			t.Run(h.fixture, func(t *testing.T) {
				r := results[i]
				require.ErrorIs(t, r.fail, h.kind)
				require.NoError(t, r.err)
				if h.policy == abi.FailOpen {
					require.Equal(t, render(textStream("hi")), render(r.out), "fail-open passes the stream untouched")
				} else {
					require.Empty(t, r.out, "fail-closed ends the stream at the failure (its first part)")
				}
				// The failed instance was replaced: the plugin still opens streams.
				st, err := plugins[i].Open(ctx, abi.StreamInfo{ID: 1})
				require.NoError(t, err)
				st.Close()
			})
		}
		require.Contains(t, logs.String(), "plugin instance discarded")
		// huge logs 1 MiB lines: each kept line is cut to MaxLogLine.
		n := 0
		for _, m := range logs.messages() {
			if strings.HasPrefix(m, "\x00") {
				n++
				require.Len(t, m, abi.MaxLogLine)
			}
		}
		require.Positive(t, n, "the huge plugin's log lines reach the logger")
	})
}

func TestHostile_Decide(t *testing.T) {
	tests := []struct {
		fixture string
		kind    error
	}{
		{"loop", ErrTimeout},
		{"trap", ErrTrap},
		{"garbage", ErrABIViolation},
		{"huge", ErrABIViolation},
	}
	engines(t, func(t *testing.T, opts ...Option) {
		rt := newRuntime(t, append(opts, WithCallTimeout(100*time.Millisecond))...)
		for _, tc := range tests {
			t.Run(tc.fixture, func(t *testing.T) {
				p, err := rt.Load(context.Background(), tc.fixture, fixture(t, tc.fixture))
				require.NoError(t, err)
				d, err := p.Decide(context.Background(), &abi.Attempt{Number: 1, Status: 500})
				require.ErrorIs(t, err, tc.kind)
				require.NotErrorIs(t, err, context.DeadlineExceeded, "a plugin's timeout is not the caller's deadline")
				require.NotErrorIs(t, err, context.Canceled)
				var pe *PluginError
				require.ErrorAs(t, err, &pe)
				require.Equal(t, "decide", pe.Op)
				require.Equal(t, abi.Decision{}, d)
			})
		}
	})
}

// TestTrap_FailsOnlyStreamsOfThatInstance: a trap discards one instance; the
// streams whose state lived there fail on their next call, the others go on.
func TestTrap_FailsOnlyStreamsOfThatInstance(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t)
	p, err := rt.Load(ctx, "boom", fixture(t, "boom"), WithInstances(2))
	require.NoError(t, err)
	// Round robin: streams 0 and 2 share an instance, 1 and 3 share the other.
	hello := abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: "hello"}
	boom := abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: "boom"}
	var sts []abi.StreamTransform
	for i := range 5 {
		st, err := p.Open(ctx, abi.StreamInfo{ID: uint64(i)})
		require.NoError(t, err)
		sts = append(sts, st)
	}
	defer func() {
		for _, st := range sts {
			st.Close()
		}
	}()
	// Streams 0 to 3 are opened in the guest by their first part; stream 4
	// (on the instance of 0 and 2) has made no call yet.
	for _, st := range sts[:4] {
		v, err := st.Part(ctx, &hello)
		require.NoError(t, err)
		require.Equal(t, abi.PartPass, v.Action)
	}
	_, err = sts[0].Part(ctx, &boom)
	require.ErrorIs(t, err, ErrTrap)
	_, err = sts[2].Part(ctx, &hello)
	require.ErrorIs(t, err, ErrInstanceLost, "a stream of the trapped instance")
	for _, i := range []int{1, 3} {
		v, err := sts[i].Part(ctx, &hello)
		require.NoError(t, err, "a stream of the other instance")
		require.Equal(t, abi.PartPass, v.Action)
	}
	v, err := sts[4].Part(ctx, &hello)
	require.NoError(t, err, "a stream with no state in the guest yet opens on the replacement instance")
	require.Equal(t, abi.PartPass, v.Action)
	st, err := p.Open(ctx, abi.StreamInfo{ID: 9})
	require.NoError(t, err, "the discarded instance is replaced for new streams")
	v, err = st.Part(ctx, &hello)
	require.NoError(t, err)
	require.Equal(t, abi.PartPass, v.Action)
	st.Close()
}

func TestBreaker_DisablesACrashLoopingPlugin(t *testing.T) {
	var logs logBuffer
	rt := newRuntime(t, WithLogger(logs.logger()), WithBreaker(3, time.Hour))
	ctx := context.Background()
	p, err := rt.Load(ctx, "trap", fixture(t, "trap"))
	require.NoError(t, err)
	for range 3 {
		_, err := p.Decide(ctx, &abi.Attempt{})
		require.ErrorIs(t, err, ErrTrap)
	}
	_, err = p.Decide(ctx, &abi.Attempt{})
	require.ErrorIs(t, err, ErrDisabled)
	_, err = p.Open(ctx, abi.StreamInfo{})
	require.ErrorIs(t, err, ErrDisabled)
	require.Contains(t, logs.String(), "plugin disabled")
}

func TestClose_WaitsForStreams(t *testing.T) {
	ctx := context.Background()
	rt, err := New(ctx)
	require.NoError(t, err)
	p, err := rt.Load(ctx, "upper", fixture(t, "upper"))
	require.NoError(t, err)
	st, err := p.Open(ctx, abi.StreamInfo{ID: 1})
	require.NoError(t, err)

	short, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, p.Close(short), context.Canceled, "a stream is still open")
	_, err = p.Open(ctx, abi.StreamInfo{ID: 2})
	require.ErrorIs(t, err, ErrClosed)
	_, err = st.Part(ctx, &abi.Part{Kind: abi.KindTextDelta, Delta: "x"})
	require.ErrorIs(t, err, ErrClosed, "a forced close ends the streams in flight")
	st.Close()
	require.NoError(t, rt.Close(ctx))
}

func TestClose_GracefulWhenIdle(t *testing.T) {
	ctx := context.Background()
	rt, err := New(ctx)
	require.NoError(t, err)
	p, err := rt.Load(ctx, "upper", fixture(t, "upper"))
	require.NoError(t, err)
	st, err := p.Open(ctx, abi.StreamInfo{ID: 1})
	require.NoError(t, err)
	done := make(chan error)
	go func() { done <- rt.Close(ctx) }()
	// The stream can still finish while Close waits for it.
	v, err := st.Part(ctx, &abi.Part{Kind: abi.KindTextDelta, Delta: "x"})
	require.NoError(t, err)
	require.Equal(t, abi.PartReplace, v.Action)
	st.Close()
	require.NoError(t, <-done)
}

func TestHostile_OutOfBoundsPointersAtCallTime(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		rt := newRuntime(t, opts...)
		p, err := rt.Load(context.Background(), "oobinput", fixture(t, "oobinput"))
		require.NoError(t, err)
		_, err = p.Decide(context.Background(), &abi.Attempt{Number: 1})
		require.ErrorIs(t, err, ErrPluginFailed)
		// The guest returned the input import's StatusFault as its own
		// result: that is the guest's -1, reported as such, not as a
		// status the host answered.
		var re *ResultError
		require.ErrorAs(t, err, &re)
		require.Equal(t, ResultError{Export: abi.ExportDecide, Result: -1}, *re)
		require.NotErrorIs(t, err, abi.StatusFault)
		require.ErrorContains(t, err, "retryhost_decide returned -1")
		// The buffer was not moved: the plugin still works.
		_, err = p.Decide(context.Background(), &abi.Attempt{Number: 2})
		require.ErrorAs(t, err, &re)
	})
}
