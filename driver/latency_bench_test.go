package driver

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// The latency targets, measured (never asserted):
//
//	go test ./driver -run '^$' -bench Latency -benchtime 20000x
//
// BenchmarkLatencyFirstContent: how long the first content part takes from
// leaving the transform chain to reaching the caller's Recv (the commit
// gate's work: the commit, the preamble released before it, the
// callbacks); bar p99 ≤ 20 µs. BenchmarkLatencyFailover: how long from the
// failed attempt's error leaving the provider stream to the next model's
// Stream call (the conditions, the rules, the bookkeeping; no backoff); bar
// p99 ≤ 100 µs. Both report p50 and p99 over b.N requests.

// stampTransform records when the first content part leaves it: placed
// last in the chain, that is when the part leaves the chain.
type stampTransform struct{ at *time.Time }

func (t *stampTransform) Name() string                { return "stamp" }
func (t *stampTransform) Policy() abi.TransformPolicy { return abi.TransformPolicy{} }
func (t *stampTransform) Open(context.Context, abi.StreamInfo) (abi.StreamTransform, error) {
	return t, nil
}

func (t *stampTransform) Part(_ context.Context, p *abi.Part) (abi.Verdict, error) {
	if p.Kind == abi.KindTextDelta && t.at.IsZero() {
		*t.at = time.Now()
	}
	return abi.Verdict{}, nil
}
func (t *stampTransform) End(context.Context) (abi.Verdict, error) { return abi.Verdict{}, nil }
func (t *stampTransform) Close()                                   {}

// failingModel's stream fails after its preamble, stamping the moment the
// error leaves it.
type failingModel struct{ at *time.Time }

func (m *failingModel) Key() string                                           { return "bench/failing" }
func (m *failingModel) Generate(context.Context, *Request) (*Response, error) { return nil, errBoom }
func (m *failingModel) Stream(context.Context, *Request) (Stream, error) {
	return &failingStream{at: m.at}, nil
}

type failingStream struct {
	at *time.Time
	i  int
}

func (s *failingStream) Recv() (Part, error) {
	s.i++
	if s.i == 1 {
		return Part{Kind: abi.KindStreamStart}, nil
	}
	*s.at = time.Now()
	return Part{}, &ProviderError{Status: 503, Message: "overloaded", Retryable: true}
}
func (s *failingStream) Close() error { return nil }

// stampModel stamps the moment its Stream is called.
type stampModel struct {
	at    *time.Time
	parts []Part
}

func (m *stampModel) Key() string                                           { return "bench/next" }
func (m *stampModel) Generate(context.Context, *Request) (*Response, error) { return &Response{}, nil }
func (m *stampModel) Stream(context.Context, *Request) (Stream, error) {
	*m.at = time.Now()
	return &benchStream{parts: m.parts}, nil
}

func reportQuantiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))].Nanoseconds()) }
	b.ReportMetric(q(0.50), "p50-ns")
	b.ReportMetric(q(0.99), "p99-ns")
}

var latencyAnswer = []Part{
	{Kind: abi.KindStreamStart}, {Kind: abi.KindResponseMeta, Meta: &abi.ResponseMeta{ID: "r"}},
	{Kind: abi.KindTextStart, ID: "t"}, {Kind: abi.KindTextDelta, ID: "t", Delta: "Paris"},
	{Kind: abi.KindTextEnd, ID: "t"}, {Kind: abi.KindFinish, Finish: &abi.Finish{}},
}

func BenchmarkLatencyFirstContent(b *testing.B) {
	det, err := NewRefusalDetector()
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts []StreamOption
	}{
		{"gate", nil},
		{"gate+deadlines+callback", []StreamOption{WithFirstContentTimeout(time.Minute), WithGapTimeout(time.Minute),
			WithOnCommit(func(context.Context, CommitInfo) {})}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var left time.Time
			r, err := New(&benchModel{parts: latencyAnswer})
			if err != nil {
				b.Fatal(err)
			}
			rm, err := NewRetryableModel(r, append([]StreamOption{WithTransforms(det, &stampTransform{at: &left})}, tc.opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			req := &Request{}
			for b.Loop() {
				left = time.Time{}
				s, err := rm.Stream(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				for {
					p, err := s.Recv()
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					if p.Kind == abi.KindTextDelta {
						lat = append(lat, time.Since(left))
					}
				}
				s.Close()
			}
			reportQuantiles(b, lat)
		})
	}
}

func BenchmarkLatencyFailover(b *testing.B) {
	det, err := NewRefusalDetector()
	if err != nil {
		b.Fatal(err)
	}
	var failed, next time.Time
	r, err := New(&failingModel{at: &failed}, WithRules(OnStatusRange(500, 599).Switch(&stampModel{at: &next, parts: latencyAnswer})))
	if err != nil {
		b.Fatal(err)
	}
	rm, err := NewRetryableModel(r, WithTransforms(det), WithFirstContentTimeout(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	req := &Request{}
	for b.Loop() {
		failed, next = time.Time{}, time.Time{}
		s, err := rm.Stream(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		if n := drainBench(b, s); n != len(latencyAnswer) {
			b.Fatalf("got %d parts", n)
		}
		s.Close()
		if failed.IsZero() || next.IsZero() {
			b.Fatal("every request must fail over (is the fallback sticky?)")
		}
		lat = append(lat, next.Sub(failed))
	}
	reportQuantiles(b, lat)
}
