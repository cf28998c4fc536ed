//go:build unix

package host

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/retryhost/retryhost/internal/testkit/wasmgen"
)

// compileShapes are the one-function shapes the pre-parse bounds, at and
// past the default limits (ModuleLimits.Blocks 2,048, Branches 4,096).
var compileShapes = []struct {
	name string
	gen  func(n int) []byte
	ns   []int
}{
	{"sibling-blocks-branching-out", wasmgen.SiblingBranches, []int{1000, 2000, 4000, 8000, 16000}},
	{"br_if-no-block", wasmgen.BrIfs, []int{2000, 8000, 32000}},
	{"blocks-local-br_if", localBranches, []int{2000, 8000}},
	{"br_table-labels-one-table", func(n int) []byte { return wasmgen.BrTables(1, n) }, []int{10000, 100000, 400000}},
	{"br_table-labels-100-tables", func(n int) []byte { return wasmgen.BrTables(100, n/100) }, []int{100000, 400000}},
	{"nesting", func(n int) []byte { return wasmgen.Nested(1, n) }, []int{1024, 2048, 4096}},
	{"blocks-far-br_if-and-4-label-br_table", farAndTable, []int{2048}},
}

// localBranches is one function of n sibling blocks, each with a br_if
// to its own end.
func localBranches(n int) []byte {
	body := []byte{0}
	for range n {
		body = append(body, 0x02, 0x40, 0x20, 0, 0x0d, 0, 0x0b) // block; local.get 0; br_if 0; end
	}
	return wasmgen.Code1(append(body, 0x0b))
}

// farAndTable is one function of n sibling blocks, each with a br_if to
// the function's exit and a br_table of four labels: n blocks within
// the Blocks limit, 5n branches past the Branches one.
func farAndTable(n int) []byte {
	body := []byte{0}
	for range n {
		body = append(body, 0x02, 0x40, 0x20, 0, 0x0d, 1, // block; local.get 0; br_if 1
			0x20, 0, 0x0e, 4, 0, 1, 0, 1, 0, 0x0b) // local.get 0; br_table 0 1 0 1 default 0; end
	}
	return wasmgen.Code1(append(body, 0x0b))
}

// BenchmarkCompileCurve measures wazero's optimising compiler (debug info
// off, as the host runs it) on one function of each shape, reporting the
// compile's wall time, the process's CPU time during it, the Go heap's
// peak above its level before the compile and the process's peak
// resident memory. The last is the row's own only when the row runs alone
// in its process, which `make bench-compile` does for each row to
// regenerate the table in docs/security.md (it lists the rows with
// -short, which skips every compile):
//
//	go test -run '^$' -bench CompileCurve -benchtime 1x ./host/
func BenchmarkCompileCurve(b *testing.B) {
	ctx := context.Background()
	for _, s := range compileShapes {
		for _, n := range s.ns {
			b.Run(fmt.Sprintf("%s=%d", s.name, n), func(b *testing.B) {
				if testing.Short() {
					b.Skip("rows are listed, not compiled, in -short mode")
				}
				wasm := s.gen(n)
				rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithDebugInfoEnabled(false))
				defer rt.Close(ctx)
				var peak uint64
				var cpu time.Duration
				for b.Loop() {
					stop := heapPeak()
					start, cpu0 := time.Now(), cpuTime()
					cm, err := rt.CompileModule(ctx, wasm)
					b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms/compile")
					cpu += cpuTime() - cpu0
					peak = max(peak, stop())
					if err != nil {
						b.Fatal(err)
					}
					_ = cm.Close(ctx)
				}
				b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/compile")
				b.ReportMetric(float64(peak>>20), "peak-heap-MiB")
				b.ReportMetric(float64(maxRSS()>>20), "peak-rss-MiB")
				b.ReportMetric(float64(len(wasm)), "module-bytes")
			})
		}
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// maxRSS is the process's peak resident memory in bytes (getrusage gives
// KiB on Linux, bytes on Darwin).
func maxRSS() uint64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	if runtime.GOOS == "darwin" {
		return uint64(ru.Maxrss)
	}
	return uint64(ru.Maxrss) << 10
}

// heapPeak samples the Go heap's live objects every millisecond until
// stop, which returns the peak above the first sample.
func heapPeak() (stop func() uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return max(peak, base) - base
	}
}
