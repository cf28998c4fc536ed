package plugintest

import (
	"context"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/refusalcore"
)

// NativeRefusal returns the native refusal detector's state machine over
// refusalcore, as driver.RefusalDetector implements it, for differential
// tests of the Wasm plugins.
// TODO(next): once the stream driver is on main, compare against
// driver.NewRefusalDetector itself instead of this copy.
type reference struct{ m *refusalcore.Matcher }

func NativeRefusal(phrases ...string) abi.Transformer {
	if len(phrases) == 0 {
		phrases = refusalcore.DefaultPhrases()
	}
	m, err := refusalcore.New(phrases)
	if err != nil {
		panic(err)
	}
	return &reference{m: m}
}

func (r *reference) Name() string                { return "refusal" }
func (r *reference) Policy() abi.TransformPolicy { return abi.TransformPolicy{} }
func (r *reference) Open(context.Context, abi.StreamInfo) (abi.StreamTransform, error) {
	return &refStream{m: r.m}, nil
}

type refStream struct {
	m          *refusalcore.Matcher
	text, norm []byte
}

func (s *refStream) Part(_ context.Context, p *abi.Part) (abi.Verdict, error) {
	switch p.Kind {
	case abi.KindStreamStart, abi.KindResponseMeta, abi.KindTextStart:
		return abi.Verdict{Action: abi.PartHold}, nil
	case abi.KindTextDelta:
	default:
		return abi.Verdict{Action: abi.PartDetach}, nil
	}
	s.text = append(s.text, p.Delta...)
	s.norm = refusalcore.AppendNormalized(s.norm[:0], string(s.text))
	switch o, phrase := s.m.Decide(s.norm); o {
	case refusalcore.Match:
		return abi.Verdict{Action: abi.PartError, Err: &abi.RefusalError{Transform: "refusal", Phrase: phrase, Text: string(s.text)}}, nil
	case refusalcore.Hold:
		return abi.Verdict{Action: abi.PartHold}, nil
	}
	return abi.Verdict{Action: abi.PartDetach}, nil
}

func (s *refStream) End(context.Context) (abi.Verdict, error) { return abi.Verdict{}, nil }
func (s *refStream) Close()                                   {}
