package driver

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/retryhost/retryhost/abi"
)

// cutStream replays parts, then fails with err (io.EOF: a clean end).
type cutStream struct {
	parts []Part
	i     int
	err   error
}

func (s *cutStream) Recv() (Part, error) {
	if s.i >= len(s.parts) {
		return Part{}, s.err
	}
	s.i++
	return s.parts[s.i-1], nil
}
func (s *cutStream) Close() error { return nil }

type cutModel struct {
	key   string
	parts []Part
	err   error
}

func (m *cutModel) Key() string                                           { return m.key }
func (m *cutModel) Generate(context.Context, *Request) (*Response, error) { return &Response{}, nil }
func (m *cutModel) Stream(context.Context, *Request) (Stream, error) {
	return &cutStream{parts: m.parts, err: m.err}, nil
}

func benchText(n int, tail ...Part) []Part {
	ps := []Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindResponseMeta, ID: "r1"}, {Kind: abi.KindTextStart, ID: "t"}}
	for range n {
		ps = append(ps, Part{Kind: abi.KindTextDelta, ID: "t", Delta: "Sure, here is the text "})
	}
	return append(ps, tail...)
}

func drainB(b *testing.B, s Stream, want error) {
	for {
		_, err := s.Recv()
		if err == nil {
			continue
		}
		if err == io.EOF {
			err = nil
		}
		if !errors.Is(err, want) || (want == nil && err != nil) {
			b.Fatal(err)
		}
		return
	}
}

// BenchmarkContinuation measures what a continuation adds to a request:
// "continued" is a stream cut after 100 parts and continued on another
// model for 100 more; "two-requests" is the same work as two requests (the
// cut stream, then a fresh stream of the continuation's parts), so that
// the difference is the continuation's own cost: the rules, the request
// copy, the splice and the seam's trim. The new attempt's own time to
// first content is the model's (nothing here).
func BenchmarkContinuation(b *testing.B) {
	errCutB := errors.New("cut")
	fin := Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop}}}
	a := &cutModel{key: "bench/a", parts: benchText(100), err: errCutB}
	c := &cutModel{key: "bench/b", parts: benchText(100, Part{Kind: abi.KindTextEnd, ID: "t"}, fin), err: io.EOF}
	req := &Request{Messages: []Message{{Role: RoleUser, Content: []Content{{Text: "hi"}}}}}
	b.Run("continued", func(b *testing.B) {
		r, _ := New(a, WithRules(Fallback(c)))
		rm, _ := NewRetryableModel(r, WithAfterCommit(AfterCommitContinue))
		b.ReportAllocs()
		for b.Loop() {
			s, err := rm.Stream(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			drainB(b, s, nil)
		}
	})
	b.Run("two-requests", func(b *testing.B) {
		ra, _ := New(a)
		rma, _ := NewRetryableModel(ra)
		rc, _ := New(c)
		rmc, _ := NewRetryableModel(rc)
		b.ReportAllocs()
		for b.Loop() {
			s, err := rma.Stream(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			drainB(b, s, errCutB)
			s, err = rmc.Stream(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			drainB(b, s, nil)
		}
	})
}

// BenchmarkStreamContinueOn measures whole 1,000-part requests with
// continuation or the throughput floor on and nothing failing, beside the
// plain stream (off): what turning them on costs per part (ns/part). The
// spliced stream notes the text it would continue from; the floor reads
// the clock around each upstream Recv. Off, the stream is the plain one.
func BenchmarkStreamContinueOn(b *testing.B) {
	parts := benchParts()
	for _, tc := range []struct {
		name string
		opts []StreamOption
	}{
		{"off", nil},
		{"continue", []StreamOption{WithAfterCommit(AfterCommitContinue)}},
		{"floor", []StreamOption{WithThroughputFloor(1, 1e9)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := &cutModel{key: "bench/a", parts: parts, err: io.EOF}
			r, _ := New(m)
			rm, _ := NewRetryableModel(r, tc.opts...)
			b.ReportAllocs()
			for b.Loop() {
				s, err := rm.Stream(context.Background(), &Request{})
				if err != nil {
					b.Fatal(err)
				}
				drainB(b, s, nil)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(parts)), "ns/part")
		})
	}
}
