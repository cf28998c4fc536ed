package driver

import (
	"context"
	"fmt"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/refusalcore"
)

// RefusalDetector is the native Go refusal transform: it fails an attempt
// whose leading text is a natural-language refusal ("I'm sorry, but I
// can't…"), which no error or finish reason reveals, so the rules can fail
// over to another model before the caller sees a word.
//
// Per stream it holds the stream start, the response metadata, the text
// start and the leading text deltas, and decides on the normalised text
// (lower case, white space collapsed, trimmed, typographic apostrophes
// folded; see package refusalcore, which the Wasm refusal plugin shares):
//   - the text starts with a phrase: PartError with a *[RefusalError]
//     (the held parts are discarded, the upstream is closed);
//   - the text can no longer become a phrase: PartDetach (the held parts
//     are released in order and the detector is never called again);
//   - a reasoning part (extended thinking, redacted_thinking,
//     reasoning_content) or a source part (a citation) detaches by default
//     and is held with [ReasoningHold] (see [RefusalConfig]), so the text
//     after it is judged;
//   - any other kind of part (a tool call, a file, a finish…) detaches
//     too, so a tool-call stream is never buffered to its end;
//   - the stream ends while undecided: everything held is released.
//
// A RefusalDetector is immutable and safe for concurrent use.
type RefusalDetector struct {
	m      *refusalcore.Matcher
	policy abi.TransformPolicy
	hold   bool // ReasoningHold
}

// RefusalReasoning is what a [RefusalDetector] does at a reasoning or
// source part before its text has decided: the native counterpart of the
// refusal plugin's "reasoning" config (plugins/refusal/README.md).
type RefusalReasoning uint8

const (
	// ReasoningDetach (the default) ends the judging at the first
	// reasoning or source part, as at any part that is no text: an answer
	// that thinks, or cites, before it speaks is passed unjudged, and its
	// thinking reaches the caller as it comes.
	ReasoningDetach RefusalReasoning = iota
	// ReasoningHold holds reasoning and source parts with the preamble and
	// judges the text that follows as if they were not there: a refusal
	// after thinking fails the attempt (the held thinking is discarded
	// with it), any other text releases the thinking, in order, with it.
	// The cost: the caller's first byte waits for the whole thinking, and
	// the thinking counts for the hold caps (256 parts, 64 KiB, 10 s; at a
	// cap the held parts are flushed and that refusal passes).
	ReasoningHold
)

// String returns "detach" or "hold", the refusal plugin's config words.
func (r RefusalReasoning) String() string {
	switch r {
	case ReasoningDetach:
		return "detach"
	case ReasoningHold:
		return "hold"
	}
	return fmt.Sprintf("RefusalReasoning(%d)", uint8(r))
}

// RefusalConfig configures [NewRefusalDetectorWith]; the zero value is the
// detector [NewRefusalDetector] builds with no phrases. It is a plain
// value, read once when the detector is built.
type RefusalConfig struct {
	// Phrases replaces the default phrase list (refusalcore.DefaultPhrases)
	// when not empty.
	Phrases []string
	// Reasoning is what the detector does at a reasoning or source part.
	// Default ReasoningDetach.
	Reasoning RefusalReasoning
}

// NewRefusalDetector builds a detector for phrases, or for
// refusalcore.DefaultPhrases when none are given. A phrase that is empty
// once normalised is an error (it would match every stream). The policy is
// fail-open with the default hold caps, flushing on a cap; reasoning and
// source parts detach (ReasoningDetach; see [NewRefusalDetectorWith]).
func NewRefusalDetector(phrases ...string) (*RefusalDetector, error) {
	return NewRefusalDetectorWith(RefusalConfig{Phrases: phrases})
}

// NewRefusalDetectorWith builds a detector as c says: NewRefusalDetector's
// rules for the phrases, and c.Reasoning at reasoning and source parts. A
// Reasoning other than ReasoningDetach and ReasoningHold is an error.
func NewRefusalDetectorWith(c RefusalConfig) (*RefusalDetector, error) {
	if c.Reasoning > ReasoningHold {
		return nil, fmt.Errorf("retryhost: unknown refusal reasoning %d (want ReasoningDetach or ReasoningHold)", uint8(c.Reasoning))
	}
	phrases := c.Phrases
	if len(phrases) == 0 {
		phrases = refusalcore.DefaultPhrases()
	}
	m, err := refusalcore.New(phrases)
	if err != nil {
		return nil, err
	}
	return &RefusalDetector{m: m, hold: c.Reasoning == ReasoningHold}, nil
}

// Name returns "refusal".
func (d *RefusalDetector) Name() string { return "refusal" }

// Policy returns the detector's policy (see [NewRefusalDetector]).
func (d *RefusalDetector) Policy() abi.TransformPolicy { return d.policy }

// Open starts the detector's state for one stream.
func (d *RefusalDetector) Open(context.Context, abi.StreamInfo) (abi.StreamTransform, error) {
	s := &refusalStream{d: d}
	s.text = s.inline[:0]
	s.st.Reset(d.m)
	return s, nil
}

type refusalStream struct {
	d    *RefusalDetector
	text []byte            // the leading text as sent, for the RefusalError
	st   refusalcore.State // the decision, fed delta by delta: O(delta) per part
	// inline holds text until it outgrows it: one allocation per stream
	// for most streams (a refusal is decided within a few dozen bytes).
	inline [64]byte
}

func (s *refusalStream) Part(_ context.Context, p *abi.Part) (abi.Verdict, error) {
	switch p.Kind {
	case abi.KindStreamStart, abi.KindResponseMeta, abi.KindTextStart:
		return abi.Verdict{Action: abi.PartHold}, nil
	case abi.KindTextDelta:
	case abi.KindReasoningStart, abi.KindReasoningDelta, abi.KindReasoningEnd, abi.KindSource:
		if s.d.hold {
			return abi.Verdict{Action: abi.PartHold}, nil
		}
		return abi.Verdict{Action: abi.PartDetach}, nil
	default:
		return abi.Verdict{Action: abi.PartDetach}, nil
	}
	s.text = append(s.text, p.Delta...)
	switch o, phrase := s.st.Feed(p.Delta); o {
	case refusalcore.Match:
		return abi.Verdict{Action: abi.PartError, Err: &abi.RefusalError{
			Transform: s.d.Name(), Phrase: phrase, Text: string(s.text),
		}}, nil
	case refusalcore.Hold:
		return abi.Verdict{Action: abi.PartHold}, nil
	default:
		return abi.Verdict{Action: abi.PartDetach}, nil
	}
}

func (s *refusalStream) End(context.Context) (abi.Verdict, error) {
	return abi.Verdict{Action: abi.PartPass}, nil
}

func (s *refusalStream) Close() { s.text, s.st = nil, refusalcore.State{} }
