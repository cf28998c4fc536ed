package host

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// FuzzHostImports calls every host import with arbitrary (ptr, len) against
// a real instance: each must answer a Status or a length, never panic, and
// never accept a range outside guest memory.
func FuzzHostImports(f *testing.F) {
	for _, seed := range [][3]uint32{{0, 0, 0}, {1024, 4096, 1}, {0xffffffff, 1, 2}, {131000, 2000, 3}, {0, 0x80000000, 0}} {
		f.Add(seed[0], seed[1], uint8(seed[2]))
	}
	rt := newRuntime(f)
	p, err := rt.Load(context.Background(), "upper", fixture(f, "upper"), WithInstances(1))
	require.NoError(f, err)
	in := p.slots[0].inst
	size := in.mem.Size()
	valid := func(t *testing.T, r int32) {
		if r >= 0 {
			return
		}
		require.Contains(t, []abi.Status{abi.StatusFault, abi.StatusPhase, abi.StatusInvalid, abi.StatusTooSmall}, abi.Status(r))
	}
	f.Fuzz(func(t *testing.T, ptr, n uint32, which uint8) {
		stack := []uint64{uint64(ptr), uint64(n), 0}
		bufPtr, bufCap := in.bufPtr, in.bufCap
		defer func() { in.bufPtr, in.bufCap, in.hasInput, in.initing = bufPtr, bufCap, false, false }()
		switch which % 4 {
		case 0:
			hostBuffer(in.ctx, in.mod, stack)
			valid(t, int32(stack[0]))
			if int32(stack[0]) == 0 {
				require.LessOrEqual(t, uint64(in.bufPtr)+uint64(in.bufCap), uint64(size))
			}
		case 1:
			in.input, in.hasInput = make([]byte, 100), true
			hostInput(in.ctx, in.mod, stack)
			valid(t, int32(stack[0]))
		case 2:
			in.initing = true
			hostPolicy(in.ctx, in.mod, stack)
			valid(t, int32(stack[0]))
		case 3:
			stack = []uint64{0, uint64(ptr), uint64(n)}
			hostLog(in.ctx, in.mod, stack)
		}
	})
}
