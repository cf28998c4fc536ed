package driver

import (
	"context"
	"strings"
	"testing"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/refusalcore"
)

// The native refusal detector against its baseline, the whole-text
// decision it replaced (re-normalise and re-match all the leading text per
// part, refusalcore's specification), side by side:
//
//	go test ./driver -run '^$' -bench Refusal -benchmem

// wholeTextStream is the baseline: the detector's per-part decision before
// refusalcore.State, kept here to measure against.
type wholeTextStream struct {
	m          *refusalcore.Matcher
	text, norm []byte
}

func (s *wholeTextStream) Part(_ context.Context, p *abi.Part) (abi.Verdict, error) {
	if p.Kind != abi.KindTextDelta {
		return abi.Verdict{Action: abi.PartHold}, nil
	}
	s.text = append(s.text, p.Delta...)
	s.norm = refusalcore.AppendNormalized(s.norm[:0], string(s.text))
	switch o, phrase := s.m.Decide(s.norm); o {
	case refusalcore.Match:
		return abi.Verdict{Action: abi.PartError, Err: &abi.RefusalError{Phrase: phrase, Text: string(s.text)}}, nil
	case refusalcore.Hold:
		return abi.Verdict{Action: abi.PartHold}, nil
	}
	return abi.Verdict{Action: abi.PartDetach}, nil
}

func (s *wholeTextStream) End(context.Context) (abi.Verdict, error) { return abi.Verdict{}, nil }
func (s *wholeTextStream) Close()                                   {}

// benchTextStream cuts text in deltas of n bytes after the preamble.
func benchTextStream(text string, n int) []abi.Part {
	parts := []abi.Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindResponseMeta}, {Kind: abi.KindTextStart, ID: "t"}}
	for i := 0; i < len(text); i += n {
		parts = append(parts, abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: text[i:min(i+n, len(text))]})
	}
	return parts
}

var refusalBenchStreams = []struct {
	name  string
	parts []abi.Part
}{
	{"refusal", benchTextStream("I'm sorry, but I can't help with that request.", 3)},
	{"answer", benchTextStream("Sure! Here is the code you asked for.", 3)},
	// A long refusal phrase in 1-byte deltas: where the whole-text decision
	// is quadratic in the held text.
	{"long-phrase-bytewise", benchTextStream("As an AI language model, I "+strings.Repeat("x", 20), 1)},
}

func refusalBenchOpeners(b *testing.B) []struct {
	name string
	open func() abi.StreamTransform
} {
	d, err := NewRefusalDetector()
	if err != nil {
		b.Fatal(err)
	}
	return []struct {
		name string
		open func() abi.StreamTransform
	}{
		{"wholetext", func() abi.StreamTransform { return &wholeTextStream{m: d.m} }},
		{"incremental", func() abi.StreamTransform {
			s, _ := d.Open(context.Background(), abi.StreamInfo{})
			return s
		}},
	}
}

// decideRefusal runs parts through s until a decision and returns how many
// parts it judged.
func decideRefusal(b *testing.B, s abi.StreamTransform, parts []abi.Part) int {
	ctx := context.Background()
	n := 0
	for i := range parts {
		v, err := s.Part(ctx, &parts[i])
		if err != nil {
			b.Fatal(err)
		}
		n++
		if v.Action == abi.PartError || v.Action == abi.PartDetach {
			break
		}
	}
	s.Close()
	return n
}

// BenchmarkRefusalDetectorPart: ns per part, open and close amortised.
func BenchmarkRefusalDetectorPart(b *testing.B) {
	for _, st := range refusalBenchStreams {
		for _, o := range refusalBenchOpeners(b) {
			b.Run(st.name+"/"+o.name, func(b *testing.B) {
				b.ReportAllocs()
				for parts := 0; parts < b.N; {
					parts += decideRefusal(b, o.open(), st.parts)
				}
			})
		}
	}
}

// BenchmarkRefusalDetectorStream: ns per stream, the whole decision.
func BenchmarkRefusalDetectorStream(b *testing.B) {
	for _, st := range refusalBenchStreams {
		for _, o := range refusalBenchOpeners(b) {
			b.Run(st.name+"/"+o.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					decideRefusal(b, o.open(), st.parts)
				}
			})
		}
	}
}
