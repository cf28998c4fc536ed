package driver

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// benchStream replays a prepared slice of parts: the cheapest possible
// provider, so that the benchmarks show the driver's own cost per part.
type benchStream struct {
	parts []Part
	i     int
}

func (s *benchStream) Recv() (Part, error) {
	if s.i >= len(s.parts) {
		return Part{}, io.EOF
	}
	p := s.parts[s.i]
	s.i++
	return p, nil
}

func (s *benchStream) Close() error { return nil }

type benchModel struct {
	parts []Part
	s     benchStream
	wire  [][]byte // when set, Stream decodes these instead (see jsonStream)
	js    jsonStream
}

func (m *benchModel) Key() string                                           { return "bench/model" }
func (m *benchModel) Generate(context.Context, *Request) (*Response, error) { return &Response{}, nil }
func (m *benchModel) Stream(context.Context, *Request) (Stream, error) {
	if m.wire != nil {
		m.js = jsonStream{lines: m.wire}
		return &m.js, nil
	}
	m.s = benchStream{parts: m.parts}
	return &m.s, nil
}

// jsonStream decodes one JSON event per part, as a provider adapter does
// with a server-sent-events body: a more honest baseline for the driver's
// relative cost than a slice.
type jsonStream struct {
	lines [][]byte
	i     int
}

type wireEvent struct {
	Type  string `json:"type"`
	ID    string `json:"id"`
	Delta string `json:"delta"`
}

func (s *jsonStream) Recv() (Part, error) {
	if s.i >= len(s.lines) {
		return Part{}, io.EOF
	}
	var ev wireEvent
	if err := json.Unmarshal(s.lines[s.i], &ev); err != nil {
		return Part{}, err
	}
	s.i++
	switch ev.Type {
	case "start":
		return Part{Kind: abi.KindStreamStart}, nil
	case "end":
		return Part{Kind: abi.KindTextEnd, ID: ev.ID}, nil
	}
	return Part{Kind: abi.KindTextDelta, ID: ev.ID, Delta: ev.Delta}, nil
}

func (s *jsonStream) Close() error { return nil }

func benchWire() [][]byte {
	lines := [][]byte{[]byte(`{"type":"start"}`)}
	for len(lines) < 999 {
		lines = append(lines, []byte(`{"type":"delta","id":"t","delta":"Sure, here is the text "}`))
	}
	return append(lines, []byte(`{"type":"end","id":"t"}`))
}

// benchParts is a 1,000-part text stream with its preamble and finish.
func benchParts() []Part {
	ps := []Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindResponseMeta, ID: "r1"}, {Kind: abi.KindTextStart, ID: "t"}}
	for len(ps) < 998 {
		ps = append(ps, Part{Kind: abi.KindTextDelta, ID: "t", Delta: "Sure, here is the text "})
	}
	return append(ps, Part{Kind: abi.KindTextEnd, ID: "t"},
		Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop}}})
}

func drainBench(b *testing.B, s Stream) int {
	n := 0
	for {
		_, err := s.Recv()
		if err == io.EOF {
			return n
		}
		if err != nil {
			b.Fatal(err)
		}
		n++
	}
}

func reportPerPart(b *testing.B, parts int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*parts), "ns/part")
}

// BenchmarkStreamPipeline compares, on one 1,000-part stream: the raw
// provider stream; one attempt through the driver with no transform; and
// with the native refusal detector (which detaches at the first text). The
// provider is either a slice (no cost of its own: the driver's absolute
// overhead) or a JSON decoder per part (a provider adapter's usual work).
func BenchmarkStreamPipeline(b *testing.B) {
	det, err := NewRefusalDetector()
	if err != nil {
		b.Fatal(err)
	}
	for _, src := range []struct {
		name string
		m    func() *benchModel
	}{
		{"slice", func() *benchModel { return &benchModel{parts: benchParts()} }},
		{"json", func() *benchModel { return &benchModel{wire: benchWire()} }},
	} {
		const n = 1000
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
		}{
			{"driver", nil},
			{"driver+refusal", []abi.Transformer{det}},
		} {
			b.Run(src.name+"/"+tc.name, func(b *testing.B) {
				m := src.m()
				sp := &attemptSpec{model: m, req: &Request{}, number: 1, transformers: tc.ts, clock: realClock{}}
				b.ReportAllocs()
				for b.Loop() {
					r := runAttempt(context.Background(), sp)
					if r.err != nil {
						b.Fatal(r.err)
					}
					if drainBench(b, r.stream) != n {
						b.Fatal("lost parts")
					}
				}
				reportPerPart(b, n)
			})
		}
	}
}

// BenchmarkStreamAfterCommit measures the committed stream alone (setup
// excluded): allocations per part after commit must be zero.
func BenchmarkStreamAfterCommit(b *testing.B) {
	parts := benchParts()
	det, _ := NewRefusalDetector()
	for _, tc := range []struct {
		name string
		ts   []abi.Transformer
		gap  bool
	}{
		{"driver", nil, false},
		{"driver+refusal", []abi.Transformer{det}, false},
		{"driver+gap", nil, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			inf := &loopStream{parts: parts[3:998]}
			m := &fixedModel{s: inf}
			sp := &attemptSpec{model: m, req: &Request{}, number: 1, transformers: tc.ts, clock: realClock{}}
			if tc.gap {
				sp.gap = time.Minute
			}
			r := runAttempt(context.Background(), sp)
			if r.err != nil {
				b.Fatal(r.err)
			}
			defer r.stream.Close()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.stream.Recv(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// loopStream repeats its parts forever.
type loopStream struct {
	parts []Part
	i     int
}

func (s *loopStream) Recv() (Part, error) {
	p := s.parts[s.i%len(s.parts)]
	s.i++
	return p, nil
}
func (s *loopStream) Close() error { return nil }

type fixedModel struct{ s Stream }

func (m *fixedModel) Key() string                                           { return "bench/fixed" }
func (m *fixedModel) Generate(context.Context, *Request) (*Response, error) { return &Response{}, nil }
func (m *fixedModel) Stream(context.Context, *Request) (Stream, error)      { return m.s, nil }
