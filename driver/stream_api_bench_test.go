package driver

import (
	"context"
	"testing"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// BenchmarkRetryableModelStream is the whole request through the public
// API (engine, attempt, gate, outcome) on a 1,000-part stream, beside the
// raw provider stream in the same run.
func BenchmarkRetryableModelStream(b *testing.B) {
	const n = 1000
	det, _ := NewRefusalDetector()
	for _, src := range []struct {
		name string
		m    func() *benchModel
	}{
		{"slice", func() *benchModel { return &benchModel{parts: benchParts()} }},
		{"json", func() *benchModel { return &benchModel{wire: benchWire()} }},
	} {
		b.Run(src.name+"/raw", func(b *testing.B) {
			m := src.m()
			b.ReportAllocs()
			for b.Loop() {
				s, _ := m.Stream(context.Background(), nil)
				if drainBench(b, s) != n {
					b.Fatal("lost parts")
				}
			}
			reportPerPart(b, n)
		})
		for _, tc := range []struct {
			name string
			ts   []abi.Transformer
		}{{"model", nil}, {"model+refusal", []abi.Transformer{det}}} {
			b.Run(src.name+"/"+tc.name, func(b *testing.B) {
				m := src.m()
				r, err := New(m, WithRules(Fallback(&fixedModel{s: &loopStream{parts: benchParts()}})))
				if err != nil {
					b.Fatal(err)
				}
				rm, err := NewRetryableModel(r, WithTransforms(tc.ts...))
				if err != nil {
					b.Fatal(err)
				}
				req := &Request{}
				b.ReportAllocs()
				for b.Loop() {
					s, err := rm.Stream(context.Background(), req)
					if err != nil {
						b.Fatal(err)
					}
					if drainBench(b, s) != n {
						b.Fatal("lost parts")
					}
				}
				reportPerPart(b, n)
			})
		}
	}
}

// BenchmarkRetryableModelFailover is a short request whose first attempt
// fails before content (an error part after the preamble), beside the same
// request answered at once: the difference is what a fail-over costs.
func BenchmarkRetryableModelFailover(b *testing.B) {
	answer := []Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindTextStart, ID: "t"},
		{Kind: abi.KindTextDelta, ID: "t", Delta: "ok"}, {Kind: abi.KindFinish, Finish: &abi.Finish{}}}
	failing := []Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindError, Err: errBoom}}
	det, _ := NewRefusalDetector()
	for _, tc := range []struct {
		name  string
		first []Part
	}{{"answered", answer}, {"failover", failing}} {
		b.Run(tc.name, func(b *testing.B) {
			a := &benchModel{parts: tc.first}
			fb := &keyedBenchModel{benchModel{parts: answer}, "bench/fallback"}
			r, err := New(a, WithRules(Fallback(fb)))
			if err != nil {
				b.Fatal(err)
			}
			rm, err := NewRetryableModel(r, WithTransforms(det), WithFirstContentTimeout(time.Minute))
			if err != nil {
				b.Fatal(err)
			}
			req := &Request{}
			b.ReportAllocs()
			for b.Loop() {
				s, err := rm.Stream(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				if drainBench(b, s) != len(answer) {
					b.Fatal("lost parts")
				}
			}
		})
	}
}

type keyedBenchModel struct {
	benchModel
	key string
}

func (m *keyedBenchModel) Key() string { return m.key }
