package e2e_test

import (
	"context"
	"io"
	"testing"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
)

// BenchmarkPipeline is the whole stream pipeline (RetryableModel: engine,
// attempt, transform chain, commit gate) on a 1,000-part answer, with the
// refusal detector native or as a Wasm plugin through the host, beside the
// raw provider stream in the same run. The target: the Wasm pipeline
// within 2× of the native one, and, once the detector detaches, within 10%
// of the raw stream.
//
//	go test ./plugins/e2e -run '^$' -bench Pipeline -benchmem
//
// The provider is an in-memory slice, which costs nothing itself: the
// ratios are the pessimistic ones (a real provider decodes JSON per part,
// ~0.75 µs, which the pipeline's overhead is then measured against).
func BenchmarkPipeline(b *testing.B) {
	const n = 1000
	parts := []abi.Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindResponseMeta, Meta: &abi.ResponseMeta{ID: "r", ModelID: "m"}},
		{Kind: abi.KindTextStart, ID: "t"}}
	for len(parts) < n-2 {
		parts = append(parts, abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: "word "})
	}
	parts = append(parts, abi.Part{Kind: abi.KindTextEnd, ID: "t"},
		abi.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop}}})
	m := &streamer{key: "bench/slice", parts: parts}

	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, _ := m.Stream(context.Background(), nil)
			drainN(b, s, n)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/part")
	})
	native, err := driver.NewRefusalDetector()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		tr   func(b *testing.B) abi.Transformer
	}{
		{"no-transform", func(*testing.B) abi.Transformer { return nil }},
		{"native-refusal", func(*testing.B) abi.Transformer { return native }},
		{"wasm-go-refusal/guarded", wasmTransform("refusal", plugintest.GoRef("refusal"))},
		{"wasm-go-refusal/trusted", wasmTransform("refusal", plugintest.GoRef("refusal"), host.WithTrusted())},
		{"wasm-c-refusal/guarded", wasmTransform("c-refusal", plugins.Refusal)},
		{"wasm-c-refusal/trusted", wasmTransform("c-refusal", plugins.Refusal, host.WithTrusted())},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var opts []driver.StreamOption
			if tr := tc.tr(b); tr != nil {
				opts = append(opts, driver.WithTransforms(tr))
			}
			r, err := driver.New(m)
			if err != nil {
				b.Fatal(err)
			}
			rm, err := driver.NewRetryableModel(r, opts...)
			if err != nil {
				b.Fatal(err)
			}
			req := &driver.Request{}
			b.ReportAllocs()
			for b.Loop() {
				s, err := rm.Stream(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				drainN(b, s, n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/part")
		})
	}
}

func drainN(b *testing.B, s driver.Stream, want int) {
	n := 0
	for {
		_, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		n++
	}
	if n != want {
		b.Fatalf("got %d parts, want %d", n, want)
	}
	_ = s.Close()
}

// wasmTransform loads a built-in plugin in a runtime of its own (closed
// with the benchmark), for a benchmark table's row.
func wasmTransform(name string, bin []byte, opts ...host.Option) func(b *testing.B) abi.Transformer {
	return func(b *testing.B) abi.Transformer {
		p, err := plugintest.Runtime(b, opts...).Load(context.Background(), name, bin)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
}
