// Command refusal is the refusal detector as a Wasm transform plugin: it
// fails an attempt whose leading text is a natural-language refusal ("I'm
// sorry, but I can't…") so the conditions can fail over before the caller
// sees a word, and detaches as soon as the text cannot be a refusal.
//
// It decides exactly as the driver's native detector (driver.RefusalDetector):
// both use package refusalcore for the decision, and this file mirrors the
// native per-stream state machine (see README.md; a differential test checks
// the two agree).
//
// Build: make -C plugins (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared).
package main

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/internal/cfgrule"
	"github.com/retryhost/retryhost/plugins/refusalcore"
	"github.com/retryhost/retryhost/plugins/sdk"
	"github.com/retryhost/retryhost/plugins/sdk/transform"
)

// config is the plugin's JSON config; every field is optional.
type config struct {
	// Phrases replaces the default phrase list (refusalcore.DefaultPhrases).
	Phrases []string `json:"phrases"`
	// Fail is "open" (default: a failure of the plugin passes the stream
	// on untouched) or "closed" (it fails the attempt).
	Fail string `json:"fail"`
	// MaxHeldParts, MaxHeldBytes and MaxHoldTime (a Go duration, "10s")
	// cap the hold queue; 0 or empty keeps the host's defaults.
	MaxHeldParts int    `json:"max_held_parts"`
	MaxHeldBytes int    `json:"max_held_bytes"`
	MaxHoldTime  string `json:"max_hold_time"`
	// OnCap is "flush" (release the held parts and detach) or "fail"
	// (fail the attempt) when a cap is hit; empty follows fail: "closed"
	// fails, "open" flushes (ABI v1.2's default).
	OnCap string `json:"on_cap"`
	// Reasoning is "detach" (default: a reasoning or source part ends the
	// judging, as any part that is no text) or "hold" (reasoning and
	// source parts are held with the text that follows, which is judged:
	// an answer that thinks, or cites, before it refuses fails over, at
	// the cost of holding the whole thinking back from the client).
	Reasoning string `json:"reasoning"`
}

func init() {
	transform.Register(func(raw []byte) (transform.Transform, error) { return newDetector(raw) })
}

func main() {}

// detector is the plugin's transform.
type detector struct {
	m      *refusalcore.Matcher
	policy abi.TransformPolicy
	// hold is "reasoning": "hold": reasoning and source parts are held.
	hold bool
	// free holds closed streams for reuse: an instance is single-threaded,
	// and its streams come and go, so after warm-up Open allocates
	// nothing. It never holds more than the most streams open at once.
	free []*stream
}

// The limits the C build has too (plugins/README.md): both builds accept
// the same configs and decide the same streams.
const (
	maxPhrases     = 128  // phrases in a config
	maxPhraseLen   = 200  // bytes of one phrase, normalised
	maxPhraseBytes = 8192 // bytes of all phrases, normalised
	// maxText is the undecided text a stream may hold, in bytes as sent:
	// of a delta that would take it past, only the bytes up to it are
	// judged, and if they leave the text undecided that is a plugin
	// failure (the fail policy applies). A long delta the detector decides
	// within its first bytes is judged as a short one.
	maxText = 1000
)

func newDetector(raw []byte) (*detector, error) {
	var c config
	if err := cfgrule.Size(raw); err != nil {
		return nil, err
	}
	if err := sdk.DecodeJSON(raw, &c); err != nil {
		return nil, err
	}
	phrases := c.Phrases
	if len(phrases) == 0 {
		phrases = refusalcore.DefaultPhrases()
	}
	if len(phrases) > maxPhrases {
		return nil, errors.New(`config: "phrases": more than 128 phrases`)
	}
	total := 0
	for _, p := range phrases {
		n := len(refusalcore.Normalize(p))
		if n == 0 {
			return nil, errors.New(`config: "phrases": a phrase is empty once normalised`)
		}
		if n > maxPhraseLen {
			return nil, errors.New(`config: "phrases": a phrase is longer than 200 bytes once normalised`)
		}
		total += n
	}
	if total > maxPhraseBytes {
		return nil, errors.New(`config: "phrases": the phrases are longer than 8192 bytes in all once normalised`)
	}
	m, err := refusalcore.New(phrases)
	if err != nil {
		return nil, fmt.Errorf("config: \"phrases\": %w", err)
	}
	d := &detector{m: m}
	switch c.Fail {
	case "", "open":
	case "closed":
		d.policy.Fail = abi.FailClosed
	default:
		return nil, errors.New(`config: "fail": must be "open" or "closed"`)
	}
	switch c.OnCap {
	case "":
	case "flush":
		d.policy.OnCap = abi.CapFlush
	case "fail":
		d.policy.OnCap = abi.CapFail
	default:
		return nil, errors.New(`config: "on_cap": must be "flush" or "fail"`)
	}
	switch c.Reasoning {
	case "", "detach":
	case "hold":
		d.hold = true
	default:
		return nil, errors.New(`config: "reasoning": must be "detach" or "hold"`)
	}
	if c.MaxHeldParts < 0 || c.MaxHeldParts > cfgrule.MaxCap {
		return nil, errors.New(`config: "max_held_parts": want an integer 0-2147483647`)
	}
	if c.MaxHeldBytes < 0 || c.MaxHeldBytes > cfgrule.MaxCap {
		return nil, errors.New(`config: "max_held_bytes": want an integer 0-2147483647`)
	}
	d.policy.MaxHeldParts, d.policy.MaxHeldBytes = c.MaxHeldParts, c.MaxHeldBytes
	if d.policy.MaxHoldTime, err = cfgrule.Duration(c.MaxHoldTime); err != nil {
		return nil, errors.New(`config: "max_hold_time": want a non-negative Go duration such as "10s"`)
	}
	return d, nil
}

// Policy is declared to the host at load.
func (d *detector) Policy() abi.TransformPolicy { return d.policy }

// Static declares what the stream answers without reading a part (see
// stream): the preamble is held, every kind but a text delta detaches;
// with "reasoning": "hold", reasoning and source parts are held too. The
// host (or the SDK) answers those parts without a call.
func (d *detector) Static() map[abi.PartKind]abi.PartAction {
	m := map[abi.PartKind]abi.PartAction{
		abi.KindStreamStart:  abi.PartHold,
		abi.KindResponseMeta: abi.PartHold,
		abi.KindTextStart:    abi.PartHold,
	}
	for k := abi.KindTextEnd; k <= abi.KindError; k++ {
		m[k] = abi.PartDetach
	}
	if d.hold {
		for _, k := range heldAside {
			m[k] = abi.PartHold
		}
	}
	return m
}

// heldAside are the kinds "reasoning": "hold" holds: no words of the
// answer, so the text after them is still its opening. A raw part never
// reaches a transform (ABI.md §6.5): it waits behind the held parts.
var heldAside = [...]abi.PartKind{abi.KindReasoningStart, abi.KindReasoningDelta, abi.KindReasoningEnd, abi.KindSource}

func (d *detector) Open(abi.StreamInfo) (transform.Stream, error) {
	var s *stream
	if n := len(d.free); n > 0 {
		s, d.free = d.free[n-1], d.free[:n-1]
	} else {
		s = &stream{d: d}
		s.text = s.inline[:0]
	}
	s.st.Reset(d.m)
	return s, nil
}

// stream holds one stream's leading text. It is the same state machine as
// the native detector's:
//   - stream start, response metadata and text start are held;
//   - text deltas are held while the normalised text is a prefix of a
//     phrase, fail the attempt with a refusal when it starts with one, and
//     detach when it can no longer become one;
//   - reasoning and source parts are held with "reasoning": "hold", and
//     detach by default;
//   - any other part detaches (a tool call is no refusal);
//   - at the end, whatever is held passes.
type stream struct {
	d    *detector
	text []byte            // the leading text as sent, for the RefusalError
	st   refusalcore.State // the decision, fed delta by delta: O(delta) per part
	// inline holds text until it outgrows it: one allocation per stream
	// for most streams (a refusal is decided within a few dozen bytes).
	inline [64]byte
	// err is the verdict's error: the SDK encodes a verdict before Part
	// returns, so it may live here and alias text, and a refusal costs no
	// allocation (two allocations were a quarter of a refusal stream's
	// CPU in the guest).
	err abi.RefusalError
}

func (s *stream) Part(p *abi.Part) (abi.Verdict, error) {
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
	d := p.Delta
	if room := maxText - len(s.text); len(d) > room {
		d = d[:room]
	}
	s.text = append(s.text, d...)
	switch o, phrase := s.st.Feed(d); o {
	case refusalcore.Match:
		s.err = abi.RefusalError{Phrase: phrase, Text: unsafe.String(unsafe.SliceData(s.text), len(s.text))}
		return abi.Verdict{Action: abi.PartError, Err: &s.err}, nil
	case refusalcore.Hold:
		if len(d) < len(p.Delta) {
			return abi.Verdict{}, errors.New("refusal: more than 1000 bytes of undecided text")
		}
		return abi.Verdict{Action: abi.PartHold}, nil
	default:
		return abi.Verdict{Action: abi.PartDetach}, nil
	}
}

func (s *stream) End() (abi.Verdict, error) { return abi.Verdict{Action: abi.PartPass}, nil }

// Close returns the stream to the detector's free list (the SDK never
// calls a closed stream again). A text buffer grown past 1 KiB is not
// kept.
func (s *stream) Close() {
	if cap(s.text) > 1<<10 {
		s.text = s.inline[:0]
	}
	s.text = s.text[:0]
	s.err = abi.RefusalError{}
	s.d.free = append(s.d.free, s)
}
