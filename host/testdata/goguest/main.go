//go:build wasip1

// Command goguest is a minimal Go condition plugin written from ABI.md
// alone, used by host tests to prove a standard Go (wasip1, c-shared)
// reactor loads and decides under the host's sandbox. Build:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o goguest.wasm ./host/testdata/goguest
package main

import (
	"runtime"
	"unsafe"

	"github.com/retryhost/retryhost/abi"
)

//go:wasmimport retryhost_v1 buffer
func buffer(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport retryhost_v1 input
func input(ptr unsafe.Pointer, n uint32) int32

// buf is the scratch buffer; a package-level array the GC never moves.
var buf [64 << 10]byte

var fallback string

//go:wasmexport retryhost_abi_v1
func abiV1() {}

//go:wasmexport retryhost_init
func initPlugin(n int32) int32 {
	defer runtime.Gosched()
	if buffer(unsafe.Pointer(&buf[0]), uint32(len(buf))) < 0 {
		return -1
	}
	if n == 0 {
		return int32(copy(buf[:], "config must name the fallback model"))
	}
	cfg := make([]byte, n)
	input(unsafe.Pointer(&cfg[0]), uint32(n))
	fallback = string(cfg)
	return 0
}

//go:wasmexport retryhost_decide
func decide(n int32) int32 {
	defer runtime.Gosched() // let the guest's GC run (ABI.md §9)
	rec := buf[:min(int(n), len(buf))]
	if int(n) > len(buf) {
		rec = make([]byte, n)
		input(unsafe.Pointer(&rec[0]), uint32(n))
	}
	a, err := abi.DecodeAttempt(rec)
	if err != nil {
		return -1
	}
	var d abi.Decision
	switch {
	case a.Status == 429:
		d = abi.Decision{Action: abi.ActionRetry, UseRetryAfter: true, MaxAttempts: 3}
	case a.Status >= 500 && a.Status < 600:
		d = abi.Decision{Action: abi.ActionSwitch, Model: fallback}
	default:
		return 0
	}
	return int32(len(abi.AppendDecision(buf[:0], &d)))
}

func main() {}
