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
// between two yields (runtime.Gosched). Nothing preempts a guest between
// exports, so goroutines the runtime needs (the GC's workers, finalizers)
// run only when it yields or blocks. One Gosched costs 1–1.5 µs in
// Go-in-Wasm: every 32 calls that was ~40–60 ns per part, more than the
// rest of the SDK's dispatch; every 256 it is ~5 ns. Measured with Go
// 1.26 (plugins/sdk TestGuestHeapBounded and variants: 200,000 parts each
// allocating 1 KiB, as bytes or as pointer-linked nodes), the heap stayed
// bounded at every interval tried, even with no yield at all: an
// allocation during a GC cycle assists it, and parks (which runs the
// workers) when it must. The yield stays as a safety net at a negligible
// cost.
const YieldEvery = 256

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
