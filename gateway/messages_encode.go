package gateway

import (
	"strconv"
	"strings"

	"github.com/retryhost/retryhost/abi"
)

// messagesEncoder writes the Messages API format of one answer: the
// stream's events (message_start, content_block_start / _delta / _stop,
// message_delta, message_stop), or one message object. The message names
// the route of the model that answered as its model.
//
// Blocks are numbered in the order they open; text and thinking blocks
// open at their first non-empty delta (an upstream's empty blocks are not
// relayed), a tool_use block at its tool-input-start; a text or thinking
// block is closed when another block opens (see stopText), tool_use blocks
// may be open at once (deltas name their index), and every open block is
// closed before message_delta.
//
// From an Anthropic upstream's raw events (policy.Options.RawChunks) it
// relays what the parts do not carry, as the upstream sent it: blocks no
// part maps (redacted_thinking, container_upload, types newer than this
// code) with their deltas; the deltas the parts do not map (a thinking
// block's signature_delta, a text block's citations_delta, delta types
// newer than this code); each block's content_block as the upstream
// opened it (fields such as a tool_use's caller or a text block's
// citations), a server tool's result whole; the stop_sequence and the
// usage members the driver does not count. Transforms never see raw
// events; the driver keeps them in their place among the parts and drops
// them with parts a transform replaces (ABI §6.5).
type messagesEncoder struct {
	id    string
	model string

	started  bool
	next     int         // the index of the next block
	open     []openBlock // blocks started and not stopped (streamed, or collected)
	tools    map[string]bool
	finished bool
	// waiting are the blocks of an answer that is not an Anthropic
	// upstream's that cannot open yet, in the order they began: a tool_use
	// block is open, and it cannot close before its input ends (see wait).
	waiting      []*waitingBlock
	waitingBytes int
	overlap      bool // waiting grew past maxWaiting: blocks open at once, as before

	// From an Anthropic upstream's raw events.
	anthropicUp bool               // one arrived: the blocks are laid out as the upstream's
	up          map[int64]*upBlock // its blocks by its index, from start to stop
	startUsage  string             // message_start's usage object
	endDelta    string             // message_delta's delta object (stop_sequence, stop_details…)
	endUsage    string             // message_delta's usage object

	// A non-streaming answer.
	blocks []*msgBlock
	reason abi.FinishReason
	usage  abi.Usage
}

// upBlock is one block of an Anthropic upstream's answer, as its raw
// content_block_start told it.
type upBlock struct {
	// kind is the block the parts make of it (KindTextStart,
	// KindReasoningStart, KindToolInputStart, KindToolResult), or KindRaw
	// for a block that only raw events carry.
	kind abi.PartKind
	// id is the parts' id of the block: the upstream's index for text,
	// thinking and raw blocks, the tool call's id for a tool and its result.
	id    string
	start string // its content_block JSON, when it can open the block
	sig   string // a thinking block's signature in its start
}

// maxUpBlocks caps the upstream blocks the encoder tracks at once (their
// starts until they stop): the adapter caps the open blocks of a stream
// at 1,024 and ends it past that. A block past the cap goes out from its
// parts alone (without the upstream's own fields), or not at all when no
// part carries it (redacted_thinking, a newer type).
const maxUpBlocks = 1024

// waitingBlock is a block held back while a tool_use block is open, with
// its deltas so far.
type waitingBlock struct {
	kind     abi.PartKind
	id       string
	start    []byte // its content_block JSON and the event's end, as an empty func appends them
	typ, key string // its deltas' type and member
	buf      strings.Builder
	ended    bool
}

// maxWaiting bounds the bytes of the deltas held back while a tool_use
// block is open (as the adapters bound a stream's tool input, 4 MiB). Past
// it the held blocks go out at once, open beside the tool_use block (what
// anthropic-sdk-go accumulates right, by index), rather than grow.
const maxWaiting = 4 << 20

type openBlock struct {
	kind  abi.PartKind // KindTextStart, KindReasoningStart, KindToolInputStart or KindRaw
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
	b = append(b, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
	if e.startUsage != "" { // the upstream's own
		b = append(b, e.startUsage...)
	} else { // usage is known at the end: message_delta carries every count
		b = append(b, `{"input_tokens":0,"output_tokens":0}`...)
	}
	return append(b, "}}\n\n"...)
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
	u := e.upstream(kind, id)
	if empty == nil && (u == nil || u.start == "") {
		return b, -1 // a raw block opens only as the upstream opened it
	}
	b = e.start(b)
	if !e.anthropicUp {
		b = e.stopText(b)
	}
	idx := e.next
	e.next++
	e.open = append(e.open, openBlock{kind: kind, id: id, index: idx})
	b = event(b, "content_block_start")
	b = append(b, `{"type":"content_block_start","index":`...)
	b = strconv.AppendInt(b, int64(idx), 10)
	b = append(b, `,"content_block":`...)
	if u != nil && u.start != "" {
		b = append(b, u.start...)
		b = append(b, "}\n\n"...)
	} else {
		b = empty(b)
	}
	return b, idx
}

// stopText closes the open text and thinking blocks before another block
// opens, as Anthropic's API streams its blocks one after the other, when
// the answer is not an Anthropic upstream's (whose blocks, raw events
// tell, are relayed as it laid them out): an OpenAI-compatible model's
// text ends only at the end of its stream, after its tool calls (or a
// late refusal). A later delta of such a block opens a new one. Tool_use
// blocks stay open: an OpenAI stream may interleave the arguments of
// parallel tool calls, so one cannot be closed before the stream ends.
func (e *messagesEncoder) stopText(b []byte) []byte {
	kept := e.open[:0]
	for _, ob := range e.open {
		if ob.kind == abi.KindTextStart || ob.kind == abi.KindReasoningStart {
			b = appendBlockStop(b, ob.index)
		} else {
			kept = append(kept, ob)
		}
	}
	e.open = kept
	return b
}

// upstream returns the upstream block the parts of kind and id come from,
// or nil.
func (e *messagesEncoder) upstream(kind abi.PartKind, id string) *upBlock {
	for _, u := range e.up {
		if u.kind == kind && u.id == id {
			return u
		}
	}
	return nil
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

// toolOpen reports whether an open block must stay open while another
// would start: a tool_use block of an answer that is not an Anthropic
// upstream's (an OpenAI stream may interleave the arguments of parallel
// tool calls, so one cannot be closed before its input ends).
func (e *messagesEncoder) toolOpen() bool {
	if e.anthropicUp || e.overlap {
		return false
	}
	for _, ob := range e.open {
		if ob.kind == abi.KindToolInputStart {
			return true
		}
	}
	return false
}

// wait returns the held-back block of kind and id that a delta of it goes
// to, holding a new one back (empty appends its start) when a tool_use
// block is open and it is not; nil when the delta goes out now.
func (e *messagesEncoder) wait(kind abi.PartKind, id string, empty func([]byte) []byte, typ, key string) *waitingBlock {
	if w := e.held(kind, id); w != nil {
		return w
	}
	if e.find(kind, id) != nil || !e.toolOpen() {
		return nil
	}
	w := &waitingBlock{kind: kind, id: id, start: empty(nil), typ: typ, key: key}
	e.waiting = append(e.waiting, w)
	return w
}

// held returns the held-back block of kind and id that has not ended, or nil.
func (e *messagesEncoder) held(kind abi.PartKind, id string) *waitingBlock {
	for _, w := range e.waiting {
		if w.kind == kind && w.id == id && !w.ended {
			return w
		}
	}
	return nil
}

// deltaTo appends a delta of the block of kind and id, opening the block
// if needed, or holds it back with the block (see wait).
func (e *messagesEncoder) deltaTo(b []byte, kind abi.PartKind, id string, empty func([]byte) []byte, typ, key, s string) []byte {
	if w := e.wait(kind, id, empty, typ, key); w != nil {
		return e.keep(b, w, s)
	}
	b, idx := e.block(b, kind, id, empty)
	return delta(b, idx, typ, key, s)
}

// keep adds s to a held-back block's deltas. Past maxWaiting the held
// blocks go out at once, open beside the tool_use block, and no block is
// held from then on (overlap).
func (e *messagesEncoder) keep(b []byte, w *waitingBlock, s string) []byte {
	w.buf.WriteString(s)
	if e.waitingBytes += len(s); e.waitingBytes > maxWaiting {
		e.overlap = true
		return e.flush(b)
	}
	return b
}

// end appends the end of the block of kind and id: a held-back one is
// marked ended, an open one stopped, and then the blocks held back behind
// it go out (see flush).
func (e *messagesEncoder) end(b []byte, kind abi.PartKind, id string) []byte {
	if w := e.held(kind, id); w != nil {
		w.ended = true
		return b
	}
	return e.flush(e.stop(b, kind, id))
}

// flush sends the held-back blocks, in the order they began, while no
// tool_use block stays open: each opens with its deltas so far as one
// delta, and stops if it has ended.
func (e *messagesEncoder) flush(b []byte) []byte {
	for len(e.waiting) > 0 && !e.toolOpen() {
		w := e.waiting[0]
		e.waiting[0] = nil
		e.waiting = e.waiting[1:]
		e.waitingBytes -= w.buf.Len()
		var idx int
		b, idx = e.block(b, w.kind, w.id, func(b []byte) []byte { return append(b, w.start...) })
		if w.buf.Len() > 0 {
			b = delta(b, idx, w.typ, w.key, w.buf.String())
		}
		if w.ended {
			b = e.stop(b, w.kind, w.id)
		}
	}
	if len(e.waiting) == 0 {
		e.waiting = nil
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

func (e *messagesEncoder) appendPart(b []byte, p *abi.Part) []byte {
	var idx int
	switch p.Kind {
	case abi.KindTextDelta:
		if p.Delta == "" {
			return b
		}
		return e.deltaTo(b, abi.KindTextStart, p.ID, emptyText, "text_delta", "text", p.Delta)
	case abi.KindTextEnd:
		return e.end(b, abi.KindTextStart, p.ID)
	case abi.KindReasoningDelta:
		if p.Delta == "" {
			return b
		}
		return e.deltaTo(b, abi.KindReasoningStart, p.ID, emptyThinking, "thinking_delta", "thinking", p.Delta)
	case abi.KindReasoningEnd:
		return e.end(b, abi.KindReasoningStart, p.ID)
	case abi.KindToolInputStart:
		if e.tools[p.ID] {
			return b
		}
		e.tool(p.ID)
		if e.wait(abi.KindToolInputStart, p.ID, emptyToolUse(p.ID, p.Tool), "input_json_delta", "partial_json") != nil {
			return b
		}
		b, _ = e.block(b, abi.KindToolInputStart, p.ID, emptyToolUse(p.ID, p.Tool))
		return b
	case abi.KindToolInputDelta:
		if p.Delta == "" || e.held(abi.KindToolInputStart, p.ID) == nil && e.find(abi.KindToolInputStart, p.ID) == nil {
			return b
		}
		return e.deltaTo(b, abi.KindToolInputStart, p.ID, nil, "input_json_delta", "partial_json", p.Delta)
	case abi.KindToolInputEnd:
		return e.end(b, abi.KindToolInputStart, p.ID)
	case abi.KindToolCall:
		if e.tools[p.ID] || p.Tool == nil {
			return e.end(b, abi.KindToolInputStart, p.ID) // its input went out as deltas
		}
		e.tool(p.ID)
		if w := e.wait(abi.KindToolInputStart, p.ID, emptyToolUse(p.ID, p.Tool), "input_json_delta", "partial_json"); w != nil {
			w.ended = true
			return e.keep(b, w, p.Tool.Input)
		}
		b, idx = e.block(b, abi.KindToolInputStart, p.ID, emptyToolUse(p.ID, p.Tool))
		if p.Tool.Input != "" {
			b = delta(b, idx, "input_json_delta", "partial_json", p.Tool.Input)
		}
		return e.flush(e.stop(b, abi.KindToolInputStart, p.ID))
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
		if u := e.upstream(abi.KindToolResult, p.ID); u != nil {
			b = append(b, u.start...) // as the upstream sent it
		} else {
			b = appendToolResult(b, p.Tool.Name, p.ID, p.Tool.Result)
		}
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
	for _, w := range e.waiting {
		w.ended = true
	}
	b = e.flush(b)
	b = event(b, "message_delta")
	b = append(b, `{"type":"message_delta","delta":`...)
	b = e.appendDelta(b, r)
	b = append(b, `,"usage":`...)
	b = e.appendUsage(b, u)
	return append(b, "}\n\n"...)
}

// appendDelta appends message_delta's delta: the upstream's (its
// stop_sequence, stop_details, container… kept) with the stop_reason of r.
func (e *messagesEncoder) appendDelta(b []byte, r abi.FinishReason) []byte {
	reason := string(appendJSONString(nil, stopReason(r)))
	if e.endDelta != "" {
		if out, ok := appendMerged(b, e.endDelta, []member{{"stop_reason", reason}}); ok {
			return out
		}
	}
	b = append(b, `{"stop_reason":`...)
	b = append(b, reason...)
	return append(b, `,"stop_sequence":null}`...)
}

// appendEndMembers appends, for a non-streaming answer, the members of
// the upstream's message_delta delta after stop_reason (stop_sequence,
// stop_details, container…): the message's own.
func (e *messagesEncoder) appendEndMembers(b []byte) []byte {
	ms, ok := members(e.endDelta)
	if !ok {
		return append(b, `,"stop_sequence":null`...)
	}
	seq := false
	for _, m := range ms {
		if m.key != "stop_reason" {
			seq = seq || m.key == "stop_sequence"
			b = appendMember(b, true, m)
		}
	}
	if !seq {
		b = append(b, `,"stop_sequence":null`...)
	}
	return b
}

// appendUsage appends usage: the upstream's usage object when it sent one
// (members such as server_tool_use and service_tier kept), with the
// driver's counts.
func (e *messagesEncoder) appendUsage(b []byte, u *abi.Usage) []byte {
	if e.endUsage != "" {
		if out, ok := appendMerged(b, e.endUsage, anthropicUsage(u)); ok {
			return out
		}
	}
	return appendAnthropicUsage(b, u)
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

// anthropicUsage returns the members appendAnthropicUsage writes, for
// appendMerged.
func anthropicUsage(u *abi.Usage) []member {
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	return []member{
		{"input_tokens", n(max(0, u.InputTokens-u.CacheReadTokens-u.CacheWriteTokens))},
		{"cache_creation_input_tokens", n(u.CacheWriteTokens)},
		{"cache_read_input_tokens", n(u.CacheReadTokens)},
		{"output_tokens", n(u.OutputTokens)},
	}
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
