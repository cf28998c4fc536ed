//go:build wasip1

package guest

import (
	"runtime"
	"unsafe"
)

// The host's imports (ABI.md §4).

//go:wasmimport retryhost_v1 buffer
func hostBuffer(ptr unsafe.Pointer, size int32) int32

//go:wasmimport retryhost_v1 input
func hostInput(ptr unsafe.Pointer, size int32) int32

//go:wasmimport retryhost_v1 policy
func hostPolicy(ptr unsafe.Pointer, size int32) int32

//go:wasmimport retryhost_v1 log
func hostLog(level int32, ptr unsafe.Pointer, size int32)

// scratch is the registered buffer: a package-level array, so the memory
// stays reserved for it (ABI.md §4.1).
var scratch [BufferSize]byte

// G is this instance's guest, set by retryhost_init.
var G *Guest

func input(dst []byte) int {
	if len(dst) == 0 {
		return int(hostInput(nil, 0))
	}
	return int(hostInput(unsafe.Pointer(&dst[0]), int32(len(dst))))
}

func policy(rec []byte) int32 {
	return hostPolicy(unsafe.Pointer(&rec[0]), int32(len(rec)))
}

// Log writes one line to the host's logger.
func Log(level int32, msg string) {
	if len(msg) == 0 {
		return
	}
	hostLog(level, unsafe.Pointer(unsafe.StringData(msg)), int32(len(msg)))
}

// YieldEvery is how many exports (decide, open, part, parts, end, close) run
// between two yields. The guest's GC only makes progress when the guest
// yields (nothing preempts it between exports), so without yields the heap
// grows without bound; but one runtime.Gosched costs microseconds, far
// more than a part. Once a yield lets the GC's worker run, it finishes the
// cycle in that yield, so a yield every few dozen calls bounds the heap's
// overshoot by what those calls allocate (a few KiB for the refusal
// detector) at a fraction of the cost.
const YieldEvery = 32

var calls uint32

// MaybeYield yields every YieldEvery calls. Call it last in every hot
// export (not deferred: a defer costs more than the rest of a part).
func MaybeYield() {
	calls++
	if calls%YieldEvery == 0 {
		runtime.Gosched()
	}
}

//go:wasmexport retryhost_abi_v1
func abiV1() {}

//go:wasmexport retryhost_init
func retryhostInit(configLen int32) int32 {
	defer runtime.Gosched()
	if st := hostBuffer(unsafe.Pointer(&scratch[0]), int32(len(scratch))); st < 0 {
		return -1
	}
	G = New(scratch[:], Env{Input: input, Policy: policy})
	return G.Init(configLen)
}
