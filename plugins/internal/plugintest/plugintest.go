// Package plugintest holds what the plugins' tests share: a reference
// application of transform verdicts (the hold queue semantics of ABI.md
// §6.3) and stream generators. Standard library only.
package plugintest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/retryhost/retryhost/abi"
)

// Result is what a transform let through for one stream.
type Result struct {
	Out      []abi.Part // the parts emitted, in order
	Err      error      // the verdict's error (PartError), nil otherwise
	Detached bool       // the transform detached
	Calls    int        // how many parts the transform was called for
	Actions  []abi.PartAction
}

// Run drives one stream of t over parts and applies the verdicts over a
// hold queue, as the driver does: PASS releases the queue then the part,
// HOLD queues it, DROP discards it, REPLACE discards queue and part and
// emits the replacement, DETACH releases everything and passes the rest
// untouched, ERROR discards the queue and ends the stream. At the end, the
// End verdict resolves what is held.
func Run(ctx context.Context, t abi.Transformer, info abi.StreamInfo, parts []abi.Part) (Result, error) {
	st, err := t.Open(ctx, info)
	if err != nil {
		return Result{}, err
	}
	defer st.Close()
	var r Result
	var held []abi.Part
	for i := range parts {
		p := parts[i]
		if r.Detached {
			r.Out = append(r.Out, p)
			continue
		}
		r.Calls++
		v, err := st.Part(ctx, &p)
		if err != nil {
			return r, fmt.Errorf("part %d: %w", i, err)
		}
		r.Actions = append(r.Actions, v.Action)
		switch v.Action {
		case abi.PartPass:
			r.Out = append(append(r.Out, held...), p)
			held = held[:0]
		case abi.PartHold:
			held = append(held, p)
		case abi.PartDrop:
		case abi.PartReplace:
			held = held[:0]
			r.Out = append(r.Out, v.Replace...)
		case abi.PartDetach:
			r.Out = append(append(r.Out, held...), p)
			held = held[:0]
			r.Detached = true
		case abi.PartError:
			r.Err = v.Err
			return r, nil
		default:
			return r, fmt.Errorf("part %d: unknown action %d", i, v.Action)
		}
	}
	if r.Detached {
		return r, nil
	}
	v, err := st.End(ctx)
	if err != nil {
		return r, fmt.Errorf("end: %w", err)
	}
	switch v.Action {
	case abi.PartPass, abi.PartHold, abi.PartDetach:
		r.Out = append(r.Out, held...)
	case abi.PartReplace:
		r.Out = append(r.Out, v.Replace...)
	case abi.PartError:
		r.Err = v.Err
	}
	return r, nil
}

// TextStream builds a typical stream: stream start, metadata, text start,
// the text cut into deltas of the given sizes (cycled), text end, finish.
func TextStream(text string, sizes ...int) []abi.Part {
	if len(sizes) == 0 {
		sizes = []int{4}
	}
	ps := []abi.Part{
		{Kind: abi.KindStreamStart},
		{Kind: abi.KindResponseMeta, ID: "resp-1", Meta: &abi.ResponseMeta{ID: "resp-1", ModelID: "m"}},
		{Kind: abi.KindTextStart, ID: "t0"},
	}
	for i := 0; len(text) > 0; i++ {
		n := min(max(sizes[i%len(sizes)], 1), len(text))
		ps = append(ps, abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: text[:n]})
		text = text[n:]
	}
	return append(ps, abi.Part{Kind: abi.KindTextEnd, ID: "t0"},
		abi.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop, Raw: "stop"}}})
}

// openings are the starts of generated answers: refusals, near misses and
// ordinary answers, with typographic apostrophes and odd spacing.
var openings = []string{
	"I'm sorry, but I can't help with that.",
	"I’m sorry, but I can’t do this.",
	"  I  AM sorry,\n but I cannot comply.",
	"I'm sorry to hear that! Here is what you can do:",
	"I'm so glad you asked.",
	"I cannot provide medical advice, but",
	"I can provide that: here it is.",
	"As an AI language model, I",
	"As an artist, I love this.",
	"Sorry, I can't help with that request.",
	"Sorry for the wait: the answer is 42.",
	"Sure! Here is the code:",
	"\n\n",
	"",
	"I",
	"I'm sorry, but I ca\xe2\x80\x99t",
	"Désolé, je ne peux pas.",
	"I\u00a0apologize, but I cannot.",
	"MY APOLOGIES, BUT I CAN'T",
}

// RandomStream generates a stream from rng: an opening (maybe mangled by
// a random byte), cut at random sizes, sometimes with reasoning (a lone
// delta or a whole block), a tool call first or a citation opening the
// text, sometimes without a finish.
func RandomStream(rng *rand.Rand) []abi.Part {
	text := openings[rng.IntN(len(openings))]
	if rng.IntN(4) == 0 && len(text) > 0 {
		b := []byte(text)
		b[rng.IntN(len(b))] = byte(rng.IntN(256))
		text = string(b)
	}
	text += strings.Repeat(" and more", rng.IntN(3))
	sizes := []int{1 + rng.IntN(7), 1 + rng.IntN(3), 1 + rng.IntN(12)}
	ps := TextStream(text, sizes...)
	switch rng.IntN(8) {
	case 0:
		ps = append(ps[:2:2], append([]abi.Part{{Kind: abi.KindReasoningDelta, ID: "r", Delta: "hmm"}}, ps[2:]...)...)
	case 1:
		ps = append(ps[:2:2], append([]abi.Part{{Kind: abi.KindToolCall, ID: "c1", Tool: &abi.ToolInfo{Name: "f", Input: "{}"}}}, ps[2:]...)...)
	case 2:
		ps = ps[:len(ps)-1]
	case 3: // extended thinking: a whole reasoning block before the text
		ps = append(ps[:2:2], append(ReasoningBlock("r0", "Let me think.", "The user asks for x."), ps[2:]...)...)
	case 4: // a citation opening the text
		ps = append(ps[:3:3], append([]abi.Part{{Kind: abi.KindSource, ID: "t0", Source: &abi.Source{URL: "https://example.com", Title: "ex"}}}, ps[3:]...)...)
	}
	return ps
}

// ReasoningBlock is a reasoning block (start, one delta per text, end), as
// an answer with extended thinking opens.
func ReasoningBlock(id string, texts ...string) []abi.Part {
	ps := []abi.Part{{Kind: abi.KindReasoningStart, ID: id}}
	for _, t := range texts {
		ps = append(ps, abi.Part{Kind: abi.KindReasoningDelta, ID: id, Delta: t})
	}
	return append(ps, abi.Part{Kind: abi.KindReasoningEnd, ID: id})
}
