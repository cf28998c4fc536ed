package e2e_test

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
)

// Benchmark10kStreams: 10,000 streams live at once through the built-in
// refusal plugins (Go and C guests, guarded and trusted) and the native
// detector: half refuse, half answer, every stream's part k judged before
// any stream's part k+1. It reports the CPU per stream and the host memory
// the plugin side holds with all 10,000 open (heap and stacks in use,
// minus before the plugin was loaded). The target: all correct,
// ≤ 100 MiB.
//
//	go test ./plugins/e2e -run '^$' -bench 10kStreams -benchtime 3x
func Benchmark10kStreams(b *testing.B) {
	const streams, workers = 10_000, 64
	ctx := context.Background()
	start := []abi.Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindResponseMeta, Meta: &abi.ResponseMeta{ID: "r"}}, {Kind: abi.KindTextStart, ID: "t"}}
	refuse := append(append([]abi.Part(nil), start...),
		abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: "I'm sorry, "}, abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: "but I can't help."})
	answer := append(append([]abi.Part(nil), start...),
		abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: "Sure! "}, abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: "Here it is."})
	native, err := driver.NewRefusalDetector()
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		load func(b *testing.B) abi.Transformer
	}{
		{"native", func(*testing.B) abi.Transformer { return native }},
		{"go/guarded", wasmTransform("refusal", plugintest.GoRef("refusal"))},
		{"go/trusted", wasmTransform("refusal", plugintest.GoRef("refusal"), host.WithTrusted())},
		{"c/guarded", wasmTransform("c-refusal", plugins.Refusal)},
		{"c/trusted", wasmTransform("c-refusal", plugins.Refusal, host.WithTrusted())},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var before, peak runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			tr := tc.load(b)
			sts := make([]abi.StreamTransform, streams)
			b.ResetTimer()
			for b.Loop() {
				var wg sync.WaitGroup
				var mu sync.Mutex
				refused, detached := 0, 0
				for w := range workers {
					wg.Go(func() {
						first := w * streams / workers
						mine := sts[first : (w+1)*streams/workers]
						for i := range mine {
							st, err := tr.Open(ctx, abi.StreamInfo{ID: uint64(first + i)})
							if err != nil {
								b.Error(err)
								return
							}
							mine[i] = st
						}
						r, d := 0, 0
						done := make([]bool, len(mine))
						for k := range refuse {
							for i, st := range mine {
								if done[i] {
									continue
								}
								ps := answer
								if (first+i)%2 == 0 {
									ps = refuse
								}
								v, err := st.Part(ctx, &ps[k])
								if err != nil {
									b.Error(err)
									return
								}
								switch v.Action {
								case abi.PartError:
									r++
									done[i] = true
								case abi.PartDetach:
									d++
									done[i] = true
								}
							}
						}
						mu.Lock()
						refused, detached = refused+r, detached+d
						mu.Unlock()
					})
				}
				wg.Wait()
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&peak)
				b.StartTimer()
				for _, st := range sts {
					st.Close()
				}
				if refused != streams/2 || detached != streams/2 {
					b.Fatalf("refused %d and detached %d of %d", refused, detached, streams)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*streams), "ns/stream")
			b.ReportMetric(float64(int64(peak.HeapInuse+peak.StackInuse)-int64(before.HeapInuse+before.StackInuse))/(1<<20), "MiB-host")
		})
	}
}
