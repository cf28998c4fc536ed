package gateway

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/retryhost/retryhost/abi"
)

// chunkEncoder writes the OpenAI wire format of one answer: the
// chat.completion.chunk events of a stream, or one chat.completion.
// Every chunk carries the same id, created and model (the route of the
// model that answered).
type chunkEncoder struct {
	id      string
	model   string
	created int64

	includeUsage bool       // stream_options.include_usage: a usage chunk before [DONE]
	acc          completion // a non-streaming answer

	roleSent bool
	refused  bool                // a refusal delta went out
	tools    map[string]chatTool // tool call id → its index in tool_calls
	finished bool
	up       rawFields // the upstream's fields the driver does not carry
	lp       string    // the logprobs of the delta being written (JSON), "" for null
}

// head appends a chunk's opening up to the choices.
func (e *chunkEncoder) head(b []byte) []byte {
	b = append(b, `data: {"id":`...)
	b = appendJSONString(b, e.id)
	b = append(b, `,"object":"chat.completion.chunk","created":`...)
	b = strconv.AppendInt(b, e.created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, e.model)
	return e.up.appendTop(b)
}

// delta appends a chunk with one choice whose delta holds the JSON members
// in fields (without braces), and finish_reason null.
func (e *chunkEncoder) delta(b []byte, fields func([]byte) []byte) []byte {
	b = e.head(b)
	b = append(b, `,"choices":[{"index":0,"delta":{`...)
	if !e.roleSent {
		e.roleSent = true
		b = append(b, `"role":"assistant",`...)
	}
	b = fields(b)
	b = append(b, `},"logprobs":`...)
	b = appendLogprobs(b, e.lp)
	e.lp = ""
	b = append(b, `,"finish_reason":null}]}`+"\n\n"...)
	return b
}

// appendPart appends the events part maps to (none for parts the wire
// format has no place for: stream start, metadata, block starts and ends).
func (e *chunkEncoder) appendPart(b []byte, p *abi.Part) []byte {
	switch p.Kind {
	case abi.KindTextDelta:
		if p.Delta == "" {
			return b
		}
		e.lp = e.up.take(p)
		field := `"content":`
		if p.ID == refusalBlock {
			field = `"refusal":`
			e.refused = true
		}
		return e.delta(b, func(b []byte) []byte {
			b = append(b, field...)
			return appendJSONString(b, p.Delta)
		})
	case abi.KindReasoningDelta:
		if p.Delta == "" {
			return b
		}
		return e.delta(b, func(b []byte) []byte {
			b = append(b, `"reasoning_content":`...)
			return appendJSONString(b, p.Delta)
		})
	case abi.KindToolInputStart:
		idx := e.tool(p.ID)
		name := ""
		if p.Tool != nil {
			name = p.Tool.Name
		}
		return e.delta(b, func(b []byte) []byte {
			return appendToolCall(b, idx, p.ID, name, "", true)
		})
	case abi.KindToolInputDelta:
		t, ok := e.tools[p.ID]
		if !ok || p.Delta == "" {
			return b
		}
		if !t.args {
			t.args = true
			e.tools[p.ID] = t
		}
		return e.delta(b, func(b []byte) []byte {
			return appendToolCall(b, t.idx, "", "", p.Delta, false)
		})
	case abi.KindToolCall:
		if p.Tool == nil {
			return b
		}
		if t, streamed := e.tools[p.ID]; streamed {
			if t.args || p.Tool.Input == "" {
				return b // its input went out as deltas
			}
			// No delta carried any of it (an Anthropic tool_use without
			// input streams none, or one empty input_json_delta): the
			// complete input ("{}") goes as the one arguments delta, so a
			// client's accumulated arguments are JSON, as OpenAI's are.
			t.args = true
			e.tools[p.ID] = t
			return e.delta(b, func(b []byte) []byte {
				return appendToolCall(b, t.idx, "", "", p.Tool.Input, false)
			})
		}
		idx := e.tool(p.ID)
		return e.delta(b, func(b []byte) []byte {
			return appendToolCall(b, idx, p.ID, p.Tool.Name, p.Tool.Input, true)
		})
	case abi.KindFinish:
		if e.finished || p.Finish == nil {
			return b
		}
		e.finished = true
		b = e.head(b)
		if e.roleSent {
			b = append(b, `,"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":`...)
		} else {
			// No delta went out (an empty answer): the finish names the
			// role, as an OpenAI stream's first chunk always does.
			e.roleSent = true
			b = append(b, `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":`...)
		}
		b = appendJSONString(b, finishString(p.Finish.Reason, e.refused))
		return append(b, "}]}\n\n"...)
	}
	return b
}

// chatTool is a tool call of a stream: its index in tool_calls, and
// whether some of its arguments went out.
type chatTool struct {
	idx  int
	args bool
}

func (e *chunkEncoder) tool(id string) int {
	if e.tools == nil {
		e.tools = map[string]chatTool{}
	}
	if t, ok := e.tools[id]; ok {
		return t.idx
	}
	i := len(e.tools)
	e.tools[id] = chatTool{idx: i}
	return i
}

func appendToolCall(b []byte, idx int, id, name, args string, first bool) []byte {
	b = append(b, `"tool_calls":[{"index":`...)
	b = strconv.AppendInt(b, int64(idx), 10)
	if first {
		b = append(b, `,"id":`...)
		b = appendJSONString(b, id)
		b = append(b, `,"type":"function","function":{"name":`...)
		b = appendJSONString(b, name)
		b = append(b, `,"arguments":`...)
	} else {
		b = append(b, `,"function":{"arguments":`...)
	}
	b = appendJSONString(b, args)
	return append(b, "}}]"...)
}

// appendUsage appends the usage chunk (choices empty) that
// stream_options.include_usage asks for.
func (e *chunkEncoder) appendUsage(b []byte, u *abi.Usage) []byte {
	b = e.head(b)
	b = append(b, `,"choices":[],"usage":`...)
	b = appendUsageJSON(b, u)
	return append(b, "}\n\n"...)
}

func appendUsageJSON(b []byte, u *abi.Usage) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, u.InputTokens, 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, u.OutputTokens, 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, u.InputTokens+u.OutputTokens, 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, u.CacheReadTokens, 10)
	b = append(b, `},"completion_tokens_details":{"reasoning_tokens":`...)
	b = strconv.AppendInt(b, u.ReasoningTokens, 10)
	return append(b, "}}"...)
}

// finishString is the OpenAI finish_reason of r: the provider's own word
// when it is one of OpenAI's, else the unified reason's.
func finishString(r abi.FinishReason, refusalSent bool) string {
	switch r.Raw {
	case "stop", "length", "tool_calls", "content_filter", "function_call":
		return r.Raw
	}
	switch r.Unified {
	case abi.ReasonLength:
		return "length"
	case abi.ReasonToolCalls:
		return "tool_calls"
	case abi.ReasonContentFilter:
		return "content_filter"
	case abi.ReasonRefusal:
		// A refusal the client got as a refusal delta (OpenAI's Responses
		// API) ends as Chat Completions ends one, with "stop"; one with
		// no refusal text (an Anthropic answer its safety classifier
		// stopped) is Chat Completions' content_filter, not a complete
		// answer.
		if !refusalSent {
			return "content_filter"
		}
	}
	return "stop"
}

// completion accumulates a committed stream into one answer.
type completion struct {
	text, reasoning strings.Builder
	refusal         strings.Builder
	calls           []toolCall
	finish          abi.FinishReason
	usage           abi.Usage
}

type toolCall struct {
	id, name string
	args     strings.Builder
	done     bool // a KindToolCall carried the complete input
}

func (c *completion) call(id string) *toolCall {
	for i := range c.calls {
		if c.calls[i].id == id {
			return &c.calls[i]
		}
	}
	c.calls = append(c.calls, toolCall{id: id})
	return &c.calls[len(c.calls)-1]
}

func (c *completion) add(p *abi.Part) {
	switch p.Kind {
	case abi.KindTextDelta:
		if p.ID == refusalBlock {
			c.refusal.WriteString(p.Delta)
		} else {
			c.text.WriteString(p.Delta)
		}
	case abi.KindReasoningDelta:
		c.reasoning.WriteString(p.Delta)
	case abi.KindToolInputStart:
		t := c.call(p.ID)
		if p.Tool != nil {
			t.name = p.Tool.Name
		}
	case abi.KindToolInputDelta:
		c.call(p.ID).args.WriteString(p.Delta)
	case abi.KindToolCall:
		t := c.call(p.ID)
		if p.Tool != nil {
			t.name = p.Tool.Name
			t.args.Reset()
			t.args.WriteString(p.Tool.Input)
			t.done = true
		}
	case abi.KindFinish:
		if p.Finish != nil {
			c.finish, c.usage = p.Finish.Reason, p.Finish.Usage
		}
	}
}

// completionFrame is about what a chat.completion takes beside its
// variable fields (the keys, the usage numbers, a tool call's frame).
const completionFrame = 512

// size estimates the length of c's chat.completion: its text and fields
// unescaped, so an answer that needs escapes grows the buffer once more.
func (e *chunkEncoder) size(c *completion) int {
	n := completionFrame + len(e.id) + len(e.model) + len(e.up.fingerprint) + len(e.up.tier) +
		c.text.Len() + c.reasoning.Len() + c.refusal.Len() + len(e.up.allContent) + len(e.up.allRefusal)
	for i := range c.calls {
		t := &c.calls[i]
		n += 64 + len(t.id) + len(t.name) + t.args.Len()
	}
	return n
}

// appendCompletion appends the chat.completion object of c, growing b
// once for the whole answer rather than by doubling from its first bytes.
func (e *chunkEncoder) appendCompletion(b []byte, c *completion) []byte {
	b = slices.Grow(b, e.size(c))
	b = append(b, `{"id":`...)
	b = appendJSONString(b, e.id)
	b = append(b, `,"object":"chat.completion","created":`...)
	b = strconv.AppendInt(b, e.created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, e.model)
	b = e.up.appendTop(b)
	b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	if c.text.Len() == 0 && len(c.calls) > 0 {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, c.text.String())
	}
	if c.reasoning.Len() > 0 {
		b = append(b, `,"reasoning_content":`...)
		b = appendJSONString(b, c.reasoning.String())
	}
	if c.refusal.Len() > 0 {
		b = append(b, `,"refusal":`...)
		b = appendJSONString(b, c.refusal.String())
	} else {
		b = append(b, `,"refusal":null`...)
	}
	if len(c.calls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i := range c.calls {
			t := &c.calls[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendJSONString(b, t.id)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendJSONString(b, t.name)
			b = append(b, `,"arguments":`...)
			b = appendJSONString(b, t.args.String())
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	b = append(b, `},"logprobs":`...)
	b = e.up.appendAll(b)
	b = append(b, `,"finish_reason":`...)
	b = appendJSONString(b, finishString(c.finish, c.refusal.Len() > 0))
	b = append(b, `}],"usage":`...)
	b = appendUsageJSON(b, &c.usage)
	return append(b, "}\n"...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD (as encoding/json does); U+2028 and U+2029 are escaped, so the
// output is also safe inside JavaScript.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
