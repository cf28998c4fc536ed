package host

import (
	"context"
	"fmt"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/retryhost/retryhost/internal/testkit/wasmgen"
)

// BenchmarkCompileCurve measures wazero's optimising compiler (debug info
// off, as the host runs it) on one function of each shape the pre-parse
// bounds, at and past the default limits, reporting the compile's wall
// time and the Go heap's peak above its level before the compile. The
// limits table in docs/security.md quotes its output:
//
//	go test -run '^$' -bench CompileCurve -benchtime 1x ./host/
func BenchmarkCompileCurve(b *testing.B) {
	shapes := []struct {
		name string
		gen  func(n int) []byte
		ns   []int
	}{
		{"sibling-blocks-branching-out", wasmgen.SiblingBranches, []int{1000, 2048, 4096, 8192}},
		{"br_if", wasmgen.BrIfs, []int{2048, 4096, 8192, 16384}},
		{"br_table-labels", func(n int) []byte { return wasmgen.BrTables(1, n) }, []int{4096, 16384, 65536}},
		{"nesting", func(n int) []byte { return wasmgen.Nested(1, n) }, []int{1024, 2048, 4096}},
	}
	ctx := context.Background()
	for _, s := range shapes {
		for _, n := range s.ns {
			wasm := s.gen(n)
			b.Run(fmt.Sprintf("%s=%d", s.name, n), func(b *testing.B) {
				rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithDebugInfoEnabled(false))
				defer rt.Close(ctx)
				var peak uint64
				for b.Loop() {
					stop := heapPeak()
					start := time.Now()
					cm, err := rt.CompileModule(ctx, wasm)
					b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms/compile")
					peak = max(peak, stop())
					if err != nil {
						b.Fatal(err)
					}
					_ = cm.Close(ctx)
				}
				b.ReportMetric(float64(peak>>20), "peak-heap-MiB")
				b.ReportMetric(float64(len(wasm)), "module-bytes")
			})
		}
	}
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
