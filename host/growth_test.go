package host

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// withTestClock replaces the runtime's clock and runs onGrow inside every
// host-side growth of a guest memory.
func withTestClock(clock func() int64, onGrow func()) Option {
	return optionFunc(func(c *config) { c.clock, c.onGrow = clock, onGrow })
}

// A guest's memory.grow is host work (a new slice, a copy, page faults)
// that took up to 120 ms on a loaded machine and got well-behaved Go
// guests killed by the 50 ms watchdog. Here the clock jumps ten call
// timeouts (still within the call's 1 s wall-clock cap) while the host
// grows the memory and the watchdog scans right then: the call must not
// time out, and the instance must stay.
func TestMemoryGrowthIsNotChargedToTheCall(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		var now atomic.Int64
		var rt *Runtime
		grows := 0
		onGrow := func() {
			grows++
			now.Add(int64(500 * time.Millisecond))
			rt.expire(rt.now(), nil) // the watchdog's tick, mid-growth
		}
		var logs logBuffer
		rt = newRuntime(t, append(opts, WithCallTimeout(50*time.Millisecond), WithLogger(logs.logger()),
			withTestClock(now.Load, onGrow))...)
		p, err := rt.Load(context.Background(), "grow", fixture(t, "grow"))
		require.NoError(t, err)
		for range 3 {
			d, err := p.Decide(context.Background(), &abi.Attempt{})
			require.NoError(t, err)
			require.Equal(t, abi.Decision{}, d)
		}
		require.Positive(t, grows, "the fixture grows its memory in every call")
		require.NotContains(t, logs.String(), "plugin instance discarded")
	})
}

// The deadline is pushed back by exactly the growth's duration, and a call
// the watchdog already claimed stays claimed and grows nothing more.
func TestMemoryGrowthDeadline(t *testing.T) {
	for _, tc := range []struct {
		name       string
		before     int64
		want       int64
		growthTook int64
		refused    bool
	}{
		{"running call: pushed back", 1000, 1000 + 700, 700, false},
		{"idle instance: untouched", 0, 0, 700, false},
		{"claimed call: stays claimed, grows nothing", deadlineClaimed, deadlineClaimed, 700, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var now atomic.Int64
			var in *instance
			var during int64
			onGrow := func() {
				during = in.deadline.Load()
				now.Add(tc.growthTook)
			}
			rt := newRuntime(t, withTestClock(now.Load, onGrow))
			in = &instance{p: &Plugin{rt: rt}}
			in.deadline.Store(tc.before)
			m := &guestMemory{in: in, buf: make([]byte, 4, 4), limit: 1 << 20}
			copy(m.buf, "abcd")
			b := m.Reallocate(6)
			if tc.refused {
				require.Nil(t, b, "memory.grow fails in the guest")
				require.Equal(t, tc.want, in.deadline.Load())
				return
			}
			require.Len(t, b, 6)
			require.Equal(t, "abcd", string(b[:4]), "growth keeps the contents")
			require.Equal(t, tc.want, in.deadline.Load())
			if tc.before > 0 {
				require.Equal(t, int64(deadlinePaused), during, "the watchdog skips a call while its memory grows")
			}
			grows := 0
			rt.cfg.onGrow = func() { grows++ }
			require.Len(t, m.Reallocate(8), 8)
			require.Zero(t, grows, "capacity doubles: a growth within it copies nothing")
		})
	}
}

// The watchdog kills a call from its own goroutine while the guest may
// still be growing its memory: the call must end in ErrTimeout, without a
// data race or a panic (the kill marks the module closed; the calling
// goroutine releases the memory, see instCtx).
func TestMemoryGrowthThenTimeout(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		rt := newRuntime(t, append(opts, WithCallTimeout(20*time.Millisecond))...)
		p, err := rt.Load(context.Background(), "growloop", fixture(t, "growloop"))
		require.NoError(t, err)
		for range 3 {
			_, err := p.Decide(context.Background(), &abi.Attempt{})
			require.ErrorIs(t, err, ErrTimeout)
		}
	})
}

// A condition growing its memory a page at a time in a loop makes the host
// grow it again and again, and each growth pushed the call's deadline back
// by its duration: a call took 1.4–1.5 s, past the 1 s wall-clock cap.
// Here every host-side growth takes an hour on the runtime's clock (real
// time plus the jumps): the cap must stop the call right after the first
// growth, on its own goroutine and without waiting for the watchdog,
// whether the call is wall-clock timed (graced once) or CPU-timed, each
// time on a fresh instance.
func TestWallCap_HoldsWhileTheGuestGrowsItsMemory(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		var jump, grows atomic.Int64
		epoch := time.Now()
		clock := func() int64 { return int64(time.Since(epoch)) + jump.Load() }
		var logs logBuffer
		rt := newRuntime(t, append(opts, WithLogger(logs.logger()), WithBreaker(0, time.Hour),
			withTestClock(clock, func() { grows.Add(1); jump.Add(int64(time.Hour)) }))...)
		p, err := rt.Load(context.Background(), "growloop", fixture(t, "growloop"), WithInstances(1))
		require.NoError(t, err)
		for i := range 3 {
			p.slow.Store(i > 0) // the later calls are CPU-timed
			done := make(chan error, 1)
			go func() {
				_, err := p.Decide(context.Background(), &abi.Attempt{})
				done <- err
			}()
			select {
			case err := <-done:
				require.ErrorIs(t, err, ErrTimeout, "call %d", i)
				require.ErrorIs(t, err, errWallCap, "call %d: stopped at the wall-clock cap: %v", i, err)
			case <-time.After(time.Minute):
				t.Fatalf("call %d: not stopped: the growth pushed its deadline past the wall-clock cap", i)
			}
			require.Equal(t, int64(i+1), grows.Load(), "call %d: stopped at its first growth past the cap", i)
		}
	})
}

// TestPluginMemory_BoundsThePool: four instances of a plugin that grows
// its memory until the host refuses hold, together, no more than the
// plugin's memory total, though each alone could take the per-instance
// limit; every call still succeeds (a refused memory.grow is the guest's
// business), and closing the plugin returns every byte to the total.
func TestPluginMemory_BoundsThePool(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		const limit, total = 4 << 20, 10 << 20
		rt := newRuntime(t, append(opts, WithMemoryLimit(limit), WithPluginMemory(total))...)
		p, err := rt.Load(context.Background(), "hog", fixture(t, "hog"), WithInstances(4))
		require.NoError(t, err)
		for range 8 {
			_, err := p.Decide(context.Background(), &abi.Attempt{})
			require.NoError(t, err)
		}
		var held uint64
		refused := 0
		for _, s := range p.slots {
			s.mu.Lock()
			size := uint64(s.inst.mem.Size())
			s.mu.Unlock()
			held += size
			if size < limit {
				refused++
			}
		}
		require.LessOrEqual(t, held, uint64(total), "the instances together stay within the plugin's total")
		require.Equal(t, int64(held), p.memUsed.Load(), "the total counts what the instances hold")
		require.Positive(t, refused, "some instance's growth was refused below its own limit")
		require.NoError(t, p.Close(context.Background()))
		require.Zero(t, p.memUsed.Load(), "closing the plugin returns its memory")
	})
}

// TestPluginMemory_PoolDoesNotGrowPastTheTotal: instances whose declared
// minimum memory does not fit in the plugin's total are not created: the
// load fails with ErrLimit naming the limit, and nothing stays charged.
func TestPluginMemory_PoolDoesNotGrowPastTheTotal(t *testing.T) {
	rt := newRuntime(t, WithPluginMemory(256<<10)) // hog declares 128 KiB
	_, err := rt.Load(context.Background(), "hog", fixture(t, "hog"), WithInstances(3))
	require.ErrorIs(t, err, ErrLimit)
	var le *LimitError
	require.ErrorAs(t, err, &le)
	require.Equal(t, "plugin memory", le.Limit)

	p, err := rt.Load(context.Background(), "hog", fixture(t, "hog"), WithInstances(2))
	require.NoError(t, err, "two instances fit")
	require.Equal(t, int64(256<<10), p.memUsed.Load())
}
