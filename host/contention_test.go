package host

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// burnCPU returns the CPU time, on the calling thread, of one decide of the
// burn fixture with the given number.
func burnCPU(t *testing.T, p *Plugin, number int) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := threadID()
	c0, ok := threadCPU(tid)
	require.True(t, ok)
	_, err := p.Decide(context.Background(), &abi.Attempt{Number: number})
	require.NoError(t, err)
	c1, _ := threadCPU(tid)
	return time.Duration(c1 - c0)
}

// TestDeadline_CPUContentionDoesNotDisableACompliantPlugin: a condition
// that needs about 35 ms of CPU per call runs under the default 50 ms
// deadline while goroutines on more threads than cores keep the CPU busy,
// so each call takes several times its CPU time on the wall clock. Its
// calls are measured in CPU time and the plugin is never disabled (on the
// wall clock every loaded call timed out and the breaker disabled it
// after its fifth).
func TestDeadline_CPUContentionDoesNotDisableACompliantPlugin(t *testing.T) {
	if !cpuClock {
		t.Skip("no per-thread CPU clock on this OS: the deadline is wall-clock")
	}
	ctx := context.Background()
	// Calibrate under the guard (its checks make loops many times
	// slower), on an idle instance: the iterations for ~35 ms of CPU.
	cal := newRuntime(t, WithCallTimeout(10*time.Second))
	cp, err := cal.Load(ctx, "burn", fixture(t, "burn"), WithInstances(1))
	require.NoError(t, err)
	per := burnCPU(t, cp, 200) // 200k iterations
	number := max(int(float64(200)*float64(35*time.Millisecond)/float64(per)), 1)
	t.Logf("calibrated: %v for 200k iterations, number %d for ~35 ms", per, number)

	var logs logBuffer
	// The wall-clock cap (1 s by default) is raised: this machine may be
	// loaded far beyond the test's own spinners, and the test is about
	// CPU time, not that cap.
	wide := optionFunc(func(c *config) { c.wallFactor = 400 })
	rt, err := New(ctx, WithCallTimeout(50*time.Millisecond), WithLogger(logs.logger()), wide)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close(ctx)) })
	p, err := rt.Load(ctx, "burn", fixture(t, "burn"), WithInstances(1))
	require.NoError(t, err)

	// Load: 2 threads per core spinning.
	prev := runtime.GOMAXPROCS(2 * runtime.NumCPU())
	defer runtime.GOMAXPROCS(prev)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 * runtime.NumCPU() {
		wg.Go(func() {
			x := 0
			for !stop.Load() {
				for i := range 1 << 16 {
					x += i
				}
			}
			_ = x
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()

	timeouts, ok := 0, 0
	const calls = 8
	for i := range calls {
		start := time.Now()
		runtime.LockOSThread()
		tid := threadID()
		c0, _ := threadCPU(tid)
		_, err := p.Decide(ctx, &abi.Attempt{Number: number})
		c1, _ := threadCPU(tid)
		runtime.UnlockOSThread()
		t.Logf("call %d: %v wall, %v CPU, err %v", i, time.Since(start).Round(time.Millisecond),
			time.Duration(c1-c0).Round(time.Millisecond), err)
		require.NotErrorIs(t, err, ErrDisabled, "a compliant plugin is never disabled")
		switch {
		case err == nil:
			ok++
		case assertTimeout(t, err):
			timeouts++
		}
	}
	require.NotContains(t, logs.String(), "plugin disabled")
	require.True(t, p.slow.Load(), "its calls are measured in CPU time")
	// On the wall clock every loaded call timed out; in CPU time only the
	// first may (before the watchdog saw that the plugin's calls run long).
	require.LessOrEqual(t, timeouts, 1, "only a call before the plugin was seen as slow times out")
}

func assertTimeout(t *testing.T, err error) bool {
	require.ErrorIs(t, err, ErrTimeout)
	return true
}

// TestDeadline_CPUTimeStillStopsALoop: a measured call that really loops is
// stopped once it has used its CPU budget.
func TestDeadline_CPUTimeStillStopsALoop(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, WithCallTimeout(50*time.Millisecond))
	p, err := rt.Load(ctx, "loop", fixture(t, "loop"), WithInstances(1))
	require.NoError(t, err)
	p.slow.Store(true)
	_, err = p.Decide(ctx, &abi.Attempt{})
	require.ErrorIs(t, err, ErrTimeout)
}

// slowHandler is a slog handler that blocks each record for d: a guest
// that logs through it waits in the host without using CPU.
type slowHandler struct{ d time.Duration }

func (h slowHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (h slowHandler) Handle(context.Context, slog.Record) error { time.Sleep(h.d); return nil }
func (h slowHandler) WithAttrs([]slog.Attr) slog.Handler        { return h }
func (h slowHandler) WithGroup(string) slog.Handler             { return h }

// TestDeadline_WallClockCapOfACPUTimedCall: a CPU-timed call that uses no
// CPU (here it waits in the log import) is still stopped at the wall-clock
// cap, 20× the call timeout.
func TestDeadline_WallClockCapOfACPUTimedCall(t *testing.T) {
	if !cpuClock {
		t.Skip("no per-thread CPU clock on this OS")
	}
	ctx := context.Background()
	rt := newRuntime(t, WithCallTimeout(20*time.Millisecond), WithLogger(slog.New(slowHandler{d: 2 * time.Second})))
	p, err := rt.Load(ctx, "chatty", fixture(t, "chatty"), WithInstances(1))
	require.NoError(t, err)
	p.slow.Store(true)
	_, err = p.Decide(ctx, &abi.Attempt{})
	require.ErrorIs(t, err, ErrTimeout, "400 ms of wall clock (20 × 20 ms) passed with no CPU used")
}

// TestDeadline_FirstLateCallIsGraced: a call of a plugin not yet measured
// in CPU time that passes its wall-clock deadline without having used the
// CPU (here it waits in the log import, as a guest's thread waits for a
// core on a loaded machine) is not stopped: it gets the wall-clock cap once,
// completes, and from then on the plugin's calls are CPU-timed. A second
// late unmeasured call, a CPU-timed loop, and the wall-clock cap still stop.
func TestDeadline_FirstLateCallIsGraced(t *testing.T) {
	if !cpuClock {
		t.Skip("no per-thread CPU clock on this OS: the deadline is wall-clock")
	}
	ctx := context.Background()
	// 60 ms of waiting against a 20 ms deadline: 3× it, far below the cap (400 ms).
	rt := newRuntime(t, WithCallTimeout(20*time.Millisecond), WithLogger(slog.New(slowHandler{d: 60 * time.Millisecond})))
	p, err := rt.Load(ctx, "chatty", fixture(t, "chatty"), WithInstances(1))
	require.NoError(t, err)
	require.False(t, p.slow.Load())
	_, err = p.Decide(ctx, &abi.Attempt{})
	require.NoError(t, err, "a late first call that used no CPU is not a timeout")
	require.True(t, p.slow.Load(), "its plugin's calls are CPU-timed from now on")
	_, err = p.Decide(ctx, &abi.Attempt{})
	require.NoError(t, err, "a CPU-timed call that waits is not stopped before the cap")

	// The grace is once per call: the watchdog's second expiry stops it.
	in := &instance{p: p}
	in.deadline.Store(1)
	require.True(t, in.extend(2, 1), "first expiry of an unmeasured call: graced")
	require.Greater(t, in.deadline.Load(), int64(1))
	require.False(t, in.extend(in.deadline.Load()+1, in.deadline.Load()), "second expiry: stopped")

	// A loop in a plugin's first call is still stopped, at most at the cap.
	lp, err := newRuntime(t, WithCallTimeout(20*time.Millisecond)).Load(ctx, "loop", fixture(t, "loop"), WithInstances(1))
	require.NoError(t, err)
	_, err = lp.Decide(ctx, &abi.Attempt{})
	require.ErrorIs(t, err, ErrTimeout)
	require.True(t, lp.slow.Load())
	_, err = lp.Decide(ctx, &abi.Attempt{})
	require.ErrorIs(t, err, ErrTimeout, "a CPU-timed loop is stopped")
}

// BenchmarkDeadlineMeasure is the cost of measuring a call in CPU time
// (a plugin seen running long calls) against the plain wall-clock guard,
// on the smallest condition call.
func BenchmarkDeadlineMeasure(b *testing.B) {
	ctx := context.Background()
	a := &abi.Attempt{Number: 1, Model: "openai/gpt-5", Status: 429, Class: abi.ClassRateLimit}
	for _, cpu := range []bool{false, true} {
		b.Run(map[bool]string{false: "wall-clock", true: "cpu-time"}[cpu], func(b *testing.B) {
			if cpu && !cpuClock {
				b.Skip("no per-thread CPU clock on this OS")
			}
			rt := newRuntime(b)
			p, err := rt.Load(ctx, "cond", fixture(b, "condition"), WithConfig([]byte("anthropic/claude")), WithInstances(1))
			if err != nil {
				b.Fatal(err)
			}
			p.slow.Store(cpu)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Decide(ctx, a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
