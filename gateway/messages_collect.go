package gateway

import (
	"encoding/json"
	"slices"
	"strings"

	ant "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/retryhost/retryhost/abi"
)

// msgBlock is one content block of a non-streaming answer.
type msgBlock struct {
	kind   abi.PartKind // KindTextStart, KindReasoningStart, KindToolInputStart, KindToolResult or KindRaw
	id     string
	name   string
	server bool            // server_tool_use: the provider ran the tool
	text   strings.Builder // the text, thinking, or tool input
	result string          // a server tool's result (JSON)
	sig    string          // a thinking block's signature

	// From an Anthropic upstream's raw events.
	start     string     // the block's content_block as the upstream opened it
	citations []string   // a text block's citations (JSON objects)
	deltas    []rawDelta // a raw block's deltas
}

// rawDelta is one delta of a block only raw events carry.
type rawDelta struct{ typ, value string }

// collect builds the answer's blocks in the order they came (text,
// tool_use, a server tool's result, more text…), as Anthropic returns
// them.
func (e *messagesEncoder) collect(p *abi.Part) {
	switch p.Kind {
	case abi.KindRaw:
		e.collectRaw(p)
	case abi.KindTextDelta:
		if p.Delta != "" {
			e.collected(abi.KindTextStart, p.ID).text.WriteString(p.Delta)
		}
	case abi.KindReasoningDelta:
		if p.Delta != "" {
			e.collected(abi.KindReasoningStart, p.ID).text.WriteString(p.Delta)
		}
	case abi.KindToolInputStart, abi.KindToolCall:
		blk := e.collected(abi.KindToolInputStart, p.ID)
		if p.Tool != nil {
			blk.name, blk.server = p.Tool.Name, p.Tool.ProviderExecuted
			if p.Kind == abi.KindToolCall { // the whole input: it replaces the deltas
				blk.text.Reset()
				blk.text.WriteString(p.Tool.Input)
			}
		}
	case abi.KindToolInputDelta:
		if ob := e.find(abi.KindToolInputStart, p.ID); ob != nil {
			e.blocks[ob.index].text.WriteString(p.Delta)
		}
	case abi.KindToolResult:
		if p.Tool != nil && p.Tool.ProviderExecuted {
			blk := &msgBlock{kind: abi.KindToolResult, id: p.ID, name: p.Tool.Name, result: p.Tool.Result}
			if u := e.upstream(abi.KindToolResult, p.ID); u != nil {
				blk.start = u.start
			}
			e.blocks = append(e.blocks, blk)
		}
	case abi.KindTextEnd:
		e.close(abi.KindTextStart, p.ID)
	case abi.KindReasoningEnd:
		e.close(abi.KindReasoningStart, p.ID)
	case abi.KindFinish:
		if p.Finish != nil {
			e.reason, e.usage = p.Finish.Reason, p.Finish.Usage
		}
	}
}

// collectRaw is raw for a non-streaming answer: the same blocks, built.
func (e *messagesEncoder) collectRaw(p *abi.Part) {
	ev, ok := p.Raw.(ant.MessageStreamEventUnion)
	if !ok {
		return
	}
	u := e.note(&ev)
	if u == nil {
		return
	}
	switch ev.Type {
	case "content_block_start":
		if u.kind == abi.KindRaw {
			e.collected(abi.KindRaw, u.id)
		}
	case "content_block_delta":
		d := &ev.Delta
		switch {
		case mapped(u.kind, d.Type) || rawJSON(ev.JSON.Delta.Raw()) == "": // as raw does
		case u.kind == abi.KindRaw:
			if ob := e.find(abi.KindRaw, u.id); ob != nil {
				blk := e.blocks[ob.index]
				blk.deltas = append(blk.deltas, rawDelta{d.Type, deltaValue(d)})
			}
		case u.kind == abi.KindTextStart || u.kind == abi.KindReasoningStart:
			// The block opens as in a stream; what the delta adds to it is
			// known for a citation and a signature.
			blk := e.collected(u.kind, u.id)
			switch {
			case u.kind == abi.KindTextStart && d.Type == "citations_delta":
				if c := rawJSON(d.JSON.Citation.Raw()); c != "" {
					blk.citations = append(blk.citations, c)
				}
			case u.kind == abi.KindReasoningStart && d.Type == "signature_delta":
				blk.sig += d.Signature
			}
		}
	case "content_block_stop":
		if u.kind == abi.KindRaw {
			e.close(abi.KindRaw, u.id)
		}
	}
}

// deltaValue returns what a delta adds to its block: its text, thinking,
// signature or partial JSON, or its citation's JSON.
func deltaValue(d *ant.MessageStreamEventUnionDelta) string {
	switch d.Type {
	case "text_delta":
		return d.Text
	case "thinking_delta":
		return d.Thinking
	case "signature_delta":
		return d.Signature
	case "input_json_delta":
		return d.PartialJSON
	case "citations_delta":
		return rawJSON(d.JSON.Citation.Raw())
	}
	return ""
}

// collected returns the open block of kind and id, starting one if none.
func (e *messagesEncoder) collected(kind abi.PartKind, id string) *msgBlock {
	if ob := e.find(kind, id); ob != nil {
		return e.blocks[ob.index]
	}
	blk := &msgBlock{kind: kind, id: id}
	if u := e.upstream(kind, id); u != nil {
		blk.start, blk.sig = u.start, u.sig
	}
	e.open = append(e.open, openBlock{kind: kind, id: id, index: len(e.blocks)})
	e.blocks = append(e.blocks, blk)
	return blk
}

func (e *messagesEncoder) close(kind abi.PartKind, id string) {
	for i := range e.open {
		if e.open[i].kind == kind && e.open[i].id == id {
			e.open = append(e.open[:i], e.open[i+1:]...)
			return
		}
	}
}

// appendAnswer appends the message object of a non-streaming answer,
// growing b once for the whole answer (see answerSize).
func (e *messagesEncoder) appendAnswer(b []byte) []byte {
	b = slices.Grow(b, e.answerSize())
	b = append(b, `{"id":`...)
	b = appendJSONString(b, e.id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = appendJSONString(b, e.model)
	b = append(b, `,"content":[`...)
	for i, blk := range e.blocks {
		if i > 0 {
			b = append(b, ',')
		}
		b = blk.appendJSON(b)
	}
	b = append(b, `],"stop_reason":`...)
	b = appendJSONString(b, stopReason(e.reason))
	b = e.appendEndMembers(b)
	b = append(b, `,"usage":`...)
	b = e.appendAnswerUsage(b)
	return append(b, "}\n"...)
}

// appendAnswerUsage appends a non-streaming answer's usage: as
// anthropic-sdk-go accumulates a stream's, message_start's usage object
// with message_delta's members over it (service_tier comes in the first,
// server_tool_use in the second), with the driver's counts.
func (e *messagesEncoder) appendAnswerUsage(b []byte) []byte {
	if e.startUsage != "" {
		over, ok := members(e.endUsage)
		if !ok {
			over = nil
		}
		var merged []byte
		if merged, ok = appendMerged(nil, e.startUsage, over); ok {
			if out, ok := appendMerged(b, string(merged), anthropicUsage(&e.usage)); ok {
				return out
			}
		}
	}
	return e.appendUsage(b, &e.usage)
}

// appendJSON appends the block: as the upstream opened it (its members
// kept, in their order) with what came after, when the upstream's raw
// events told its start, else in the gateway's words.
func (blk *msgBlock) appendJSON(b []byte) []byte {
	var set []member
	switch blk.kind {
	case abi.KindTextStart:
		set = []member{{"text", string(appendJSONString(nil, blk.text.String()))}}
		if len(blk.citations) > 0 {
			set = append(set, member{"citations", "[" + strings.Join(blk.citations, ",") + "]"})
		}
	case abi.KindReasoningStart:
		set = []member{{"thinking", string(appendJSONString(nil, blk.text.String()))},
			{"signature", string(appendJSONString(nil, blk.sig))}}
	case abi.KindToolInputStart:
		set = []member{{"input", string(appendToolInput(nil, blk.text.String()))}}
	case abi.KindToolResult, abi.KindRaw:
		set = foldDeltas(blk.start, blk.deltas)
	}
	if blk.start != "" {
		if out, ok := appendMerged(b, blk.start, set); ok {
			return out
		}
	}
	switch blk.kind {
	case abi.KindTextStart:
		b = append(b, `{"type":"text",`...)
		for i, m := range set {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, m.key)
			b = append(b, ':')
			b = append(b, m.value...)
		}
		return append(b, '}')
	case abi.KindReasoningStart:
		b = append(b, `{"type":"thinking","thinking":`...)
		b = appendJSONString(b, blk.text.String())
		b = append(b, `,"signature":`...)
		b = appendJSONString(b, blk.sig)
		return append(b, '}')
	case abi.KindToolInputStart:
		b = append(b, `{"type":"`...)
		b = append(b, toolUseType(blk.server)...)
		b = append(b, `","id":`...)
		b = appendJSONString(b, blk.id)
		b = append(b, `,"name":`...)
		b = appendJSONString(b, blk.name)
		b = append(b, `,"input":`...)
		b = appendToolInput(b, blk.text.String())
		return append(b, '}')
	case abi.KindToolResult:
		return appendToolResult(b, blk.name, blk.id, blk.result)
	}
	return append(b, "null"...) // unreachable: a raw block always has its start
}

// foldDeltas returns the members a raw block's deltas change, folded as
// anthropic-sdk-go's Message.Accumulate folds them into a block it knows
// (text, thinking and signature appended to the start's, partial JSON
// making the input, citations appended). A delta of a type newer than
// this code has no known meaning, so a non-streaming answer goes without
// it (a stream relays it).
func foldDeltas(start string, deltas []rawDelta) []member {
	if len(deltas) == 0 {
		return nil
	}
	var v map[string]json.RawMessage
	_ = json.Unmarshal([]byte(start), &v)
	str := func(key string) *strings.Builder {
		var sb strings.Builder
		var s string
		if json.Unmarshal(v[key], &s) == nil {
			sb.WriteString(s)
		}
		return &sb
	}
	acc := map[string]*strings.Builder{}
	var input strings.Builder
	var citations []string
	for _, d := range deltas {
		switch d.typ {
		case "text_delta", "thinking_delta", "signature_delta":
			key := strings.TrimSuffix(d.typ, "_delta")
			if acc[key] == nil {
				acc[key] = str(key)
			}
			acc[key].WriteString(d.value)
		case "input_json_delta":
			input.WriteString(d.value)
		case "citations_delta":
			if d.value != "" {
				citations = append(citations, d.value)
			}
		}
	}
	var set []member
	for _, key := range []string{"text", "thinking", "signature"} {
		if sb := acc[key]; sb != nil {
			set = append(set, member{key, string(appendJSONString(nil, sb.String()))})
		}
	}
	if in := strings.TrimSpace(input.String()); in != "" && json.Valid([]byte(in)) {
		set = append(set, member{"input", in})
	}
	if len(citations) > 0 {
		var items []string
		var old []json.RawMessage
		if json.Unmarshal(v["citations"], &old) == nil {
			for _, c := range old {
				items = append(items, string(c))
			}
		}
		set = append(set, member{"citations", "[" + strings.Join(append(items, citations...), ",") + "]"})
	}
	return set
}

func toolUseType(server bool) string {
	if server {
		return "server_tool_use"
	}
	return "tool_use"
}

// appendToolResult appends the block of a server tool's result, such as
// {"type":"web_search_tool_result","tool_use_id":…,"content":[…]}, its
// content as the upstream sent it.
func appendToolResult(b []byte, name, id, result string) []byte {
	b = append(b, `{"type":`...)
	b = appendJSONString(b, name+"_tool_result")
	b = append(b, `,"tool_use_id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"content":`...)
	if !json.Valid([]byte(result)) {
		result = "null"
	}
	b = append(b, result...)
	return append(b, '}')
}

// appendToolInput appends a tool call's input: its JSON when it is a JSON
// object (what Anthropic clients expect), {} when empty, else the text as a
// JSON string, so that nothing the model wrote is dropped.
func appendToolInput(b []byte, s string) []byte {
	var obj map[string]json.RawMessage
	switch {
	case s == "":
		return append(b, "{}"...)
	case json.Unmarshal([]byte(s), &obj) == nil && obj != nil:
		return append(b, s...)
	}
	return appendJSONString(b, s)
}

// answerSize estimates the length of the message object appendAnswer
// writes: its blocks' text unescaped, plus a frame for the keys and the
// usage (messageFrame) and one per block (blockFrame).
func (e *messagesEncoder) answerSize() int {
	const messageFrame, blockFrame = 384, 96
	n := messageFrame + len(e.id) + len(e.model)
	for _, blk := range e.blocks {
		n += blockFrame + len(blk.id) + len(blk.name) + blk.text.Len() + len(blk.result) + len(blk.sig) + len(blk.start)
		for _, c := range blk.citations {
			n += len(c) + 1
		}
		for _, d := range blk.deltas {
			n += len(d.value)
		}
	}
	return n
}
