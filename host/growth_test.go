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
// guests killed by the 50 ms watchdog. Here the clock jumps an hour while
// the host grows the memory and the watchdog scans right then: the call
// must not time out, and the instance must stay.
func TestMemoryGrowthIsNotChargedToTheCall(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		var now atomic.Int64
		var rt *Runtime
		grows := 0
		onGrow := func() {
			grows++
			now.Add(int64(time.Hour))
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
// the watchdog already claimed stays claimed.
func TestMemoryGrowthDeadline(t *testing.T) {
	for _, tc := range []struct {
		name       string
		before     int64
		want       int64
		growthTook int64
	}{
		{"running call: pushed back", 1000, 1000 + 700, 700},
		{"idle instance: untouched", 0, 0, 700},
		{"claimed call: stays claimed", deadlineClaimed, deadlineClaimed, 700},
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
