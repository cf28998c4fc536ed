package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	ant "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/retryhost/retryhost/abi"
)

// rawJSON returns an object's JSON as an upstream sent it, on one line (an
// SSE data line ends at a line break), or "" if it is not an object.
func rawJSON(s string) string {
	if strings.ContainsAny(s, "\r\n") {
		var buf bytes.Buffer
		if json.Compact(&buf, []byte(s)) != nil {
			return ""
		}
		s = buf.String()
	}
	if len(s) < 2 || s[0] != '{' {
		return ""
	}
	return s
}

// note reads the message-level members of a raw event and tracks its
// blocks: it returns the block a content_block event is about (nil if
// untracked), and for content_block_stop forgets it.
func (e *messagesEncoder) note(ev *ant.MessageStreamEventUnion) *upBlock {
	switch ev.Type {
	case "message_start":
		e.startUsage = rawJSON(ev.Message.JSON.Usage.Raw())
	case "message_delta":
		if d := rawJSON(ev.JSON.Delta.Raw()); d != "" {
			e.endDelta = d
		}
		if u := rawJSON(ev.JSON.Usage.Raw()); u != "" {
			e.endUsage = u
		}
	case "content_block_start":
		if e.up == nil {
			e.up = map[int64]*upBlock{}
		}
		if _, ok := e.up[ev.Index]; !ok && len(e.up) >= maxUpBlocks {
			return nil
		}
		u := upstreamBlock(ev)
		if u == nil {
			delete(e.up, ev.Index)
			return nil
		}
		e.up[ev.Index] = u
		return u
	case "content_block_delta":
		return e.up[ev.Index]
	case "content_block_stop":
		u := e.up[ev.Index]
		delete(e.up, ev.Index)
		return u
	}
	return nil
}

// upstreamBlock reads a content_block_start: which block the adapter's
// parts make of it, and whether its JSON can open that block (a text or
// thinking block opens empty, its text comes in deltas; a tool_use opens
// with an empty input).
func upstreamBlock(ev *ant.MessageStreamEventUnion) *upBlock {
	cb := &ev.ContentBlock
	start := rawJSON(ev.JSON.ContentBlock.Raw())
	u := &upBlock{kind: abi.KindRaw, id: strconv.FormatInt(ev.Index, 10)}
	switch cb.Type {
	case "":
		return nil
	case "text":
		u.kind = abi.KindTextStart
		if cb.Text == "" {
			u.start = start
		}
	case "thinking":
		u.kind = abi.KindReasoningStart
		if cb.Thinking == "" {
			u.start, u.sig = start, cb.Signature
		}
	case "tool_use", "server_tool_use":
		u.kind, u.id = abi.KindToolInputStart, cb.ID
		if in := cb.JSON.Input.Raw(); in == "" || in == "{}" {
			u.start = start
		}
	default:
		if strings.HasSuffix(cb.Type, "_tool_result") && cb.ToolUseID != "" {
			u.kind, u.id = abi.KindToolResult, cb.ToolUseID // the adapter's tool-result part
		}
		if start == "" {
			return nil
		}
		u.start = start
	}
	return u
}

// mapped reports whether the adapter maps a delta of typ on a block of
// kind to parts (so that it goes out from them).
func mapped(kind abi.PartKind, typ string) bool {
	switch typ {
	case "text_delta":
		return kind == abi.KindTextStart
	case "thinking_delta":
		return kind == abi.KindReasoningStart
	case "input_json_delta":
		return kind == abi.KindToolInputStart
	}
	return false
}

// raw relays what an Anthropic upstream's raw event carries that its parts
// do not (see messagesEncoder): a block no part maps opens, takes its
// deltas and stops with the raw events; an unmapped delta goes to its
// block, which opens if it has not yet (a signature for an empty thinking
// block, a citation before the text).
func (e *messagesEncoder) raw(b []byte, p *abi.Part) []byte {
	ev, ok := p.Raw.(ant.MessageStreamEventUnion)
	if !ok {
		return b
	}
	e.anthropicUp = true
	u := e.note(&ev)
	if u == nil {
		return b
	}
	switch ev.Type {
	case "content_block_start":
		if u.kind == abi.KindRaw {
			b, _ = e.block(b, abi.KindRaw, u.id, nil)
		}
	case "content_block_delta":
		if mapped(u.kind, ev.Delta.Type) {
			return b
		}
		d := rawJSON(ev.JSON.Delta.Raw())
		if d == "" {
			return b
		}
		idx := -1
		switch u.kind {
		case abi.KindTextStart:
			b, idx = e.block(b, u.kind, u.id, emptyText)
		case abi.KindReasoningStart:
			b, idx = e.block(b, u.kind, u.id, emptyThinking)
		case abi.KindRaw, abi.KindToolInputStart:
			if ob := e.find(u.kind, u.id); ob != nil {
				idx = ob.index
			}
		}
		if idx < 0 {
			return b // a server tool's result arrives whole; a block stopped already
		}
		b = event(b, "content_block_delta")
		b = append(b, `{"type":"content_block_delta","index":`...)
		b = strconv.AppendInt(b, int64(idx), 10)
		b = append(b, `,"delta":`...)
		b = append(b, d...)
		return append(b, "}\n\n"...)
	case "content_block_stop":
		if u.kind == abi.KindRaw {
			b = e.stop(b, abi.KindRaw, u.id)
		}
	}
	return b
}
