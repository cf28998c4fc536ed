package driver

import (
	"context"
	"testing"

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
