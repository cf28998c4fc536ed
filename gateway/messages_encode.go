package gateway

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	ant "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/retryhost/retryhost/abi"
)

// messagesEncoder writes the Messages API format of one answer: the
// stream's events (message_start, content_block_start / _delta / _stop,
// message_delta, message_stop), or one message object. The message names
// the route of the model that answered as its model.
//
// Blocks are numbered in the order they open; text and thinking blocks
// open at their first non-empty delta (an upstream's empty blocks are not
// relayed), a tool_use block at its tool-input-start; several may be open
// at once (deltas name their index), and every open block is closed
// before message_delta.
type messagesEncoder struct {
	id    string
	model string

	started  bool
	next     int         // the index of the next block
	open     []openBlock // blocks started and not stopped (streamed, or collected)
	tools    map[string]bool
	finished bool
	sigs     map[string]string // reasoning block id → its signature, until the block ends

	// A non-streaming answer.
	blocks []*msgBlock
	reason abi.FinishReason
	usage  abi.Usage
}

type openBlock struct {
	kind  abi.PartKind // KindTextStart, KindReasoningStart or KindToolInputStart
	id    string
	index int
}

// event appends "event: name" and the opening of its data line.
func event(b []byte, name string) []byte {
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	return b
}

// start appends message_start once, before the first block.
func (e *messagesEncoder) start(b []byte) []byte {
	if e.started {
		return b
	}
	e.started = true
	b = event(b, "message_start")
	b = append(b, `{"type":"message_start","message":{"id":`...)
	b = appendJSONString(b, e.id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = appendJSONString(b, e.model)
	// Usage is known at the end: message_delta carries every count.
	return append(b, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}}`+"\n\n"...)
}

// find returns the open block of kind and id, or nil.
func (e *messagesEncoder) find(kind abi.PartKind, id string) *openBlock {
	for i := range e.open {
		if e.open[i].kind == kind && e.open[i].id == id {
			return &e.open[i]
		}
	}
	return nil
}

// block returns the index of the open block of kind and id, starting it
// (content_block_start with the JSON of its empty block) if needed.
func (e *messagesEncoder) block(b []byte, kind abi.PartKind, id string, empty func([]byte) []byte) ([]byte, int) {
	if ob := e.find(kind, id); ob != nil {
		return b, ob.index
	}
	b = e.start(b)
	idx := e.next
	e.next++
	e.open = append(e.open, openBlock{kind: kind, id: id, index: idx})
	b = event(b, "content_block_start")
	b = append(b, `{"type":"content_block_start","index":`...)
	b = strconv.AppendInt(b, int64(idx), 10)
	b = append(b, `,"content_block":`...)
	b = empty(b)
	return b, idx
}

// stop appends content_block_stop for the open block of kind and id.
func (e *messagesEncoder) stop(b []byte, kind abi.PartKind, id string) []byte {
	for i := range e.open {
		if e.open[i].kind == kind && e.open[i].id == id {
			idx := e.open[i].index
			e.open = append(e.open[:i], e.open[i+1:]...)
			return appendBlockStop(b, idx)
		}
	}
	return b
}

func appendBlockStop(b []byte, idx int) []byte {
	b = event(b, "content_block_stop")
	b = append(b, `{"type":"content_block_stop","index":`...)
	b = strconv.AppendInt(b, int64(idx), 10)
	return append(b, "}\n\n"...)
}

// delta appends a content_block_delta of block idx: {"type":typ, key: s}.
func delta(b []byte, idx int, typ, key, s string) []byte {
	b = event(b, "content_block_delta")
	b = append(b, `{"type":"content_block_delta","index":`...)
	b = strconv.AppendInt(b, int64(idx), 10)
	b = append(b, `,"delta":{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","`...)
	b = append(b, key...)
	b = append(b, `":`...)
	b = appendJSONString(b, s)
	return append(b, "}}\n\n"...)
}

func emptyText(b []byte) []byte { return append(b, `{"type":"text","text":""}}`+"\n\n"...) }

func emptyThinking(b []byte) []byte {
	return append(b, `{"type":"thinking","thinking":"","signature":""}}`+"\n\n"...)
}

// emptyToolUse returns the opening of a tool_use block.
func emptyToolUse(id string, t *abi.ToolInfo) func([]byte) []byte {
	return func(b []byte) []byte {
		name, server := "", false
		if t != nil {
			name, server = t.Name, t.ProviderExecuted
		}
		b = append(b, `{"type":"`...)
		b = append(b, toolUseType(server)...)
		b = append(b, `","id":`...)
		b = appendJSONString(b, id)
		b = append(b, `,"name":`...)
		b = appendJSONString(b, name)
		return append(b, `,"input":{}}}`+"\n\n"...)
	}
}

// raw reads an Anthropic upstream's raw event (policy.Options.RawChunks;
// transforms never see it, and one held behind a thinking block a
// transform replaces is dropped with it): a thinking block's signature
// (signature_delta), which the adapter maps to no part, goes out with its
// block, so that a client can send the block back in its next turn.
func (e *messagesEncoder) raw(p *abi.Part) {
	ev, ok := p.Raw.(ant.MessageStreamEventUnion)
	if !ok || ev.Type != "content_block_delta" || ev.Delta.Type != "signature_delta" || ev.Delta.Signature == "" {
		return
	}
	if e.sigs == nil {
		e.sigs = map[string]string{}
	}
	e.sigs[strconv.FormatInt(ev.Index, 10)] += ev.Delta.Signature // the adapter's reasoning block id
}

// signature returns and forgets the signature of reasoning block id.
func (e *messagesEncoder) signature(id string) string {
	sig := e.sigs[id]
	delete(e.sigs, id)
	return sig
}

func (e *messagesEncoder) appendPart(b []byte, p *abi.Part) []byte {
	var idx int
	switch p.Kind {
	case abi.KindTextDelta:
		if p.Delta == "" {
			return b
		}
		b, idx = e.block(b, abi.KindTextStart, p.ID, emptyText)
		return delta(b, idx, "text_delta", "text", p.Delta)
	case abi.KindTextEnd:
		return e.stop(b, abi.KindTextStart, p.ID)
	case abi.KindReasoningDelta:
		if p.Delta == "" {
			return b
		}
		b, idx = e.block(b, abi.KindReasoningStart, p.ID, emptyThinking)
		return delta(b, idx, "thinking_delta", "thinking", p.Delta)
	case abi.KindReasoningEnd:
		if sig := e.signature(p.ID); sig != "" {
			if ob := e.find(abi.KindReasoningStart, p.ID); ob != nil {
				b = delta(b, ob.index, "signature_delta", "signature", sig)
			}
		}
		return e.stop(b, abi.KindReasoningStart, p.ID)
	case abi.KindToolInputStart:
		if e.tools[p.ID] {
			return b
		}
		e.tool(p.ID)
		b, _ = e.block(b, abi.KindToolInputStart, p.ID, emptyToolUse(p.ID, p.Tool))
		return b
	case abi.KindToolInputDelta:
		ob := e.find(abi.KindToolInputStart, p.ID)
		if ob == nil || p.Delta == "" {
			return b
		}
		return delta(b, ob.index, "input_json_delta", "partial_json", p.Delta)
	case abi.KindToolInputEnd:
		return e.stop(b, abi.KindToolInputStart, p.ID)
	case abi.KindToolCall:
		if e.tools[p.ID] || p.Tool == nil {
			return e.stop(b, abi.KindToolInputStart, p.ID) // its input went out as deltas
		}
		e.tool(p.ID)
		b, idx = e.block(b, abi.KindToolInputStart, p.ID, emptyToolUse(p.ID, p.Tool))
		if p.Tool.Input != "" {
			b = delta(b, idx, "input_json_delta", "partial_json", p.Tool.Input)
		}
		return e.stop(b, abi.KindToolInputStart, p.ID)
	case abi.KindToolResult:
		if p.Tool == nil || !p.Tool.ProviderExecuted {
			return b
		}
		b = e.start(b)
		idx := e.next
		e.next++
		b = event(b, "content_block_start")
		b = append(b, `{"type":"content_block_start","index":`...)
		b = strconv.AppendInt(b, int64(idx), 10)
		b = append(b, `,"content_block":`...)
		b = appendToolResult(b, p.Tool.Name, p.ID, p.Tool.Result)
		b = append(b, "}\n\n"...)
		return appendBlockStop(b, idx)
	case abi.KindFinish:
		if e.finished || p.Finish == nil {
			return b
		}
		return e.finish(b, p.Finish.Reason, &p.Finish.Usage)
	}
	return b
}

func (e *messagesEncoder) tool(id string) {
	if e.tools == nil {
		e.tools = map[string]bool{}
	}
	e.tools[id] = true
}

// finish closes the open blocks and appends message_delta.
func (e *messagesEncoder) finish(b []byte, r abi.FinishReason, u *abi.Usage) []byte {
	e.finished = true
	b = e.start(b)
	for _, ob := range e.open {
		b = appendBlockStop(b, ob.index)
	}
	e.open = e.open[:0]
	b = event(b, "message_delta")
	b = append(b, `{"type":"message_delta","delta":{"stop_reason":`...)
	b = appendJSONString(b, stopReason(r))
	b = append(b, `,"stop_sequence":null},"usage":`...)
	b = appendAnthropicUsage(b, u)
	return append(b, "}\n\n"...)
}

// appendEnd appends message_stop (after message_delta, should the stream
// have ended without a finish part).
func (e *messagesEncoder) appendEnd(b []byte, u *abi.Usage) []byte {
	if !e.finished {
		b = e.finish(b, abi.FinishReason{}, u)
	}
	b = event(b, "message_stop")
	return append(b, `{"type":"message_stop"}`+"\n\n"...)
}

// appendErrorEvent appends Anthropic's in-band error event.
func (e *messagesEncoder) appendErrorEvent(b []byte, ae *apiError) []byte {
	b = event(b, "error")
	b = messagesDoor{}.appendError(b, ae)
	return append(b, "\n\n"...)
}

// appendAnthropicUsage appends usage as Anthropic counts it: input_tokens
// is the uncached part of the prompt (the driver's InputTokens is all of
// it, cache reads and writes included).
func appendAnthropicUsage(b []byte, u *abi.Usage) []byte {
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, max(0, u.InputTokens-u.CacheReadTokens-u.CacheWriteTokens), 10)
	b = append(b, `,"cache_creation_input_tokens":`...)
	b = strconv.AppendInt(b, u.CacheWriteTokens, 10)
	b = append(b, `,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, u.CacheReadTokens, 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, u.OutputTokens, 10)
	return append(b, '}')
}

// stopReason is the Messages API stop_reason of r: the provider's own word
// when it is one of Anthropic's, else the unified reason's.
func stopReason(r abi.FinishReason) string {
	switch r.Raw {
	case "end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal", "model_context_window_exceeded":
		return r.Raw
	}
	switch r.Unified {
	case abi.ReasonLength:
		return "max_tokens"
	case abi.ReasonToolCalls:
		return "tool_use"
	case abi.ReasonContentFilter, abi.ReasonRefusal:
		return "refusal"
	}
	return "end_turn"
}

// msgBlock is one content block of a non-streaming answer.
type msgBlock struct {
	kind   abi.PartKind // KindTextStart, KindReasoningStart, KindToolInputStart or KindToolResult
	id     string
	name   string
	server bool            // server_tool_use: the provider ran the tool
	text   strings.Builder // the text, thinking, or tool input
	result string          // a server tool's result (JSON)
	sig    string          // a thinking block's signature
}

// collect builds the answer's blocks in the order they came (text,
// tool_use, a server tool's result, more text…), as Anthropic returns
// them.
func (e *messagesEncoder) collect(p *abi.Part) {
	switch p.Kind {
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
			e.blocks = append(e.blocks, &msgBlock{kind: abi.KindToolResult, id: p.ID, name: p.Tool.Name, result: p.Tool.Result})
		}
	case abi.KindTextEnd:
		e.close(abi.KindTextStart, p.ID)
	case abi.KindReasoningEnd:
		if ob := e.find(abi.KindReasoningStart, p.ID); ob != nil {
			e.blocks[ob.index].sig = e.signature(p.ID)
		}
		e.close(abi.KindReasoningStart, p.ID)
	case abi.KindFinish:
		if p.Finish != nil {
			e.reason, e.usage = p.Finish.Reason, p.Finish.Usage
		}
	}
}

// collected returns the open block of kind and id, starting one if none.
func (e *messagesEncoder) collected(kind abi.PartKind, id string) *msgBlock {
	if ob := e.find(kind, id); ob != nil {
		return e.blocks[ob.index]
	}
	e.open = append(e.open, openBlock{kind: kind, id: id, index: len(e.blocks)})
	e.blocks = append(e.blocks, &msgBlock{kind: kind, id: id})
	return e.blocks[len(e.blocks)-1]
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
		switch blk.kind {
		case abi.KindTextStart:
			b = append(b, `{"type":"text","text":`...)
			b = appendJSONString(b, blk.text.String())
			b = append(b, '}')
		case abi.KindReasoningStart:
			b = append(b, `{"type":"thinking","thinking":`...)
			b = appendJSONString(b, blk.text.String())
			b = append(b, `,"signature":`...)
			b = appendJSONString(b, blk.sig)
			b = append(b, '}')
		case abi.KindToolInputStart:
			b = append(b, `{"type":"`...)
			b = append(b, toolUseType(blk.server)...)
			b = append(b, `","id":`...)
			b = appendJSONString(b, blk.id)
			b = append(b, `,"name":`...)
			b = appendJSONString(b, blk.name)
			b = append(b, `,"input":`...)
			b = appendToolInput(b, blk.text.String())
			b = append(b, '}')
		case abi.KindToolResult:
			b = appendToolResult(b, blk.name, blk.id, blk.result)
		}
	}
	b = append(b, `],"stop_reason":`...)
	b = appendJSONString(b, stopReason(e.reason))
	b = append(b, `,"stop_sequence":null,"usage":`...)
	b = appendAnthropicUsage(b, &e.usage)
	return append(b, "}\n"...)
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
		n += blockFrame + len(blk.id) + len(blk.name) + blk.text.Len() + len(blk.result) + len(blk.sig)
	}
	return n
}
