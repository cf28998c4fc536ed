package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// source turns Messages stream events into parts (adapter.Source).
type source struct {
	st *ssestream.Stream[ant.MessageStreamEventUnion]
	// body, when set, is the response's body, read here instead of
	// through st: it splits the events itself (adapter.EventBody), so
	// each event's data is decoded where it lies, with no line scanning
	// and no copy (see readEvent). Nil under the SDK's tracing, whose span
	// follows the SDK's decoder. st still closes the body.
	body adapter.EventBody
	// skip is the body's SkipMalformed, if it has one (the gateway's).
	skip interface{ SkipMalformed(data []byte) bool }
	resp *http.Response // the response, for an error event's *ant.Error
	cur  ant.MessageStreamEventUnion
	err  error // what ended the body: io.EOF or an error; sticky

	raw      bool // emit each event as a KindRaw part too (WithRawChunks)
	unmapped bool // … but those the parts carry whole (WithUnmappedEvents)

	blocks map[int64]*block
	// content reports that a part that commits a stream (under the
	// driver's default rule: output, not an empty block's start or end)
	// went out; until then a declared refusal can still fail over.
	content bool
	held    adapter.Held // tool input bytes, against MaxHeld
	// servers names the server tools called so far, by call id, for
	// their results.
	servers map[string]string

	stop        string
	explanation string
	input       int64
	output      int64
	cacheRead   int64
	cacheWrite  int64
	thinking    int64
}

type blockKind uint8

const (
	blockIgnored blockKind = iota
	blockText
	blockReasoning
	blockTool
)

type block struct {
	kind     blockKind
	id, name string
	server   bool
	redacted bool // a redacted_thinking block
	input    strings.Builder
}

func (s *source) Close() error { return s.st.Close() }

func (s *source) Next(q []abi.Part) ([]abi.Part, error) {
	for len(q) == 0 {
		ev, err := s.read()
		if err != nil {
			return q, streamError(err)
		}
		if ev == nil {
			return q, adapter.ErrTruncated // no message_stop
		}
		if s.raw && (!s.unmapped || !s.mapsWhole(ev)) {
			q = append(q, abi.Part{Kind: abi.KindRaw, Raw: *ev})
		}
		n := len(q)
		q, err = s.event(q, ev)
		s.noteContent(q[n:])
		if err != nil {
			return q, err
		}
	}
	return q, nil
}

// read returns the next event, nil at the end of the stream, or the
// error that ended it.
func (s *source) read() (*ant.MessageStreamEventUnion, error) {
	if s.body != nil {
		return s.readEvent()
	}
	if !s.st.Next() {
		return nil, s.st.Err()
	}
	s.cur = s.st.Current()
	return &s.cur, nil
}

// readEvent reads the next event from the body as the SDK's stream reads
// it from its decoder (the body splits events as that decoder does): a
// "ping" or untyped event is skipped, and so is one with empty data; an
// "error" event ends the stream with the *ant.Error the SDK makes of it;
// the others decode into the SDK's union type, and one that does not
// decode ends the stream with json.Unmarshal's error. The gateway's body
// (skip) skips and counts a malformed event instead, exactly those its
// validating Read would have dropped: json.Unmarshal has checked the JSON
// of a decoded event, so only the others are shown to it.
func (s *source) readEvent() (*ant.MessageStreamEventUnion, error) {
	for s.err == nil {
		typ, data, err := s.body.ReadEvent()
		if err != nil {
			s.err = err
			break
		}
		switch string(typ) {
		case "ping", "":
			if s.skip != nil && len(data) > 0 {
				s.skip.SkipMalformed(data) // skipped either way; counted if malformed
			}
			continue
		case "error":
			if s.skip != nil && s.skip.SkipMalformed(data) {
				continue
			}
			s.err = s.eventError(data)
			return nil, s.err
		}
		if len(data) <= 1 { // no data line, or data lines with nothing in them
			if s.skip != nil && len(data) > 0 {
				s.skip.SkipMalformed(data)
			}
			continue
		}
		s.cur = ant.MessageStreamEventUnion{} // decoded in place, as the SDK does: no copy per event
		err = json.Unmarshal(data, &s.cur)
		if s.skip != nil && (err != nil || !isObject(data)) && s.skip.SkipMalformed(data) {
			continue
		}
		if err != nil {
			s.err = err
			return nil, err
		}
		return &s.cur, nil
	}
	if s.err == io.EOF {
		return nil, nil
	}
	return nil, s.err
}

// isObject reports whether valid JSON is an object.
func isObject(data []byte) bool {
	d := bytes.TrimLeft(data, " \t\r\n")
	return len(d) > 0 && d[0] == '{'
}

// eventError is the error the SDK's stream ends with at an "error" event:
// an *ant.Error of the response, with the event's data for its JSON, or,
// with no request to name, a plain error quoting the data.
func (s *source) eventError(data []byte) error {
	data = bytes.TrimSuffix(data, []byte("\n"))
	r := s.resp
	if r == nil || r.Request == nil {
		return fmt.Errorf("received error while streaming: %s", data)
	}
	e := &ant.Error{Request: r.Request, Response: r, StatusCode: r.StatusCode,
		RequestID: r.Header.Get("request-id"), WorkspaceID: r.Header.Get("anthropic-workspace-id")}
	if e.UnmarshalJSON(data) != nil {
		return fmt.Errorf("received error while streaming: %s", data)
	}
	return e
}

// mapsWhole reports whether the parts mapped from ev carry all of it: a
// delta of its block's own text, thinking or tool input.
func (s *source) mapsWhole(ev *ant.MessageStreamEventUnion) bool {
	if ev.Type != "content_block_delta" {
		return false
	}
	b := s.blocks[ev.Index]
	if b == nil {
		return false
	}
	switch ev.Delta.Type {
	case "text_delta":
		return b.kind == blockText
	case "thinking_delta":
		return b.kind == blockReasoning && !b.redacted
	case "input_json_delta":
		return b.kind == blockTool
	}
	return false
}

// noteContent records whether parts carry output. An empty text or
// thinking block (a start and a stop with nothing between) is not output:
// a refusal after it must still fail over.
func (s *source) noteContent(parts []abi.Part) {
	for i := 0; i < len(parts) && !s.content; i++ {
		s.content = hasOutput(&parts[i])
	}
}

// event maps one event of the stream to parts appended to q; io.EOF with
// the finish part at the message's stop.
func (s *source) event(q []abi.Part, ev *ant.MessageStreamEventUnion) ([]abi.Part, error) {
	switch ev.Type {
	case "message_start":
		m := &ev.Message
		u := &m.Usage
		s.input, s.output = u.InputTokens, u.OutputTokens
		s.cacheRead, s.cacheWrite = u.CacheReadInputTokens, u.CacheCreationInputTokens
		q = append(q, abi.Part{Kind: abi.KindResponseMeta, ID: m.ID, Meta: &abi.ResponseMeta{ID: m.ID, ModelID: m.Model}})
	case "content_block_start":
		return s.blockStart(q, ev)
	case "content_block_delta":
		return s.blockDelta(q, ev)
	case "content_block_stop":
		return s.blockStop(q, ev), nil
	case "message_delta":
		s.messageDelta(ev)
	case "message_stop":
		return s.messageStop(q)
	}
	return q, nil
}

// blockStart opens a block: text, thinking, a tool's input, or a server
// tool's result, which arrives whole.
func (s *source) blockStart(q []abi.Part, ev *ant.MessageStreamEventUnion) ([]abi.Part, error) {
	cb := &ev.ContentBlock
	if _, ok := s.blocks[ev.Index]; !ok && len(s.blocks) >= adapter.MaxOpen {
		return q, adapter.LimitError(provider, "open blocks", adapter.MaxOpen)
	}
	b := &block{id: strconv.FormatInt(ev.Index, 10)}
	s.blocks[ev.Index] = b
	switch cb.Type {
	case "text":
		b.kind = blockText
		q = append(q, abi.Part{Kind: abi.KindTextStart, ID: b.id})
		if cb.Text != "" {
			q = append(q, abi.Part{Kind: abi.KindTextDelta, ID: b.id, Delta: cb.Text})
		}
	case "thinking", "redacted_thinking":
		b.kind, b.redacted = blockReasoning, cb.Type == "redacted_thinking"
		q = append(q, abi.Part{Kind: abi.KindReasoningStart, ID: b.id})
		if cb.Thinking != "" {
			q = append(q, abi.Part{Kind: abi.KindReasoningDelta, ID: b.id, Delta: cb.Thinking})
		}
	case "tool_use", "server_tool_use":
		b.kind, b.id, b.name, b.server = blockTool, cb.ID, cb.Name, cb.Type == "server_tool_use"
		if b.server {
			if s.servers == nil {
				s.servers = map[string]string{}
			}
			s.servers[b.id] = b.name
		}
		q = append(q, abi.Part{Kind: abi.KindToolInputStart, ID: b.id, Tool: &abi.ToolInfo{Name: b.name, ProviderExecuted: b.server}})
	default:
		if !strings.HasSuffix(cb.Type, "_tool_result") || cb.ToolUseID == "" {
			return q, nil // container uploads and blocks newer than this adapter
		}
		q = s.serverResult(q, cb)
	}
	return q, nil
}

// blockDelta maps a delta of an open block's own kind; others are dropped.
func (s *source) blockDelta(q []abi.Part, ev *ant.MessageStreamEventUnion) ([]abi.Part, error) {
	b := s.blocks[ev.Index]
	if b == nil {
		return q, nil
	}
	d := &ev.Delta
	switch {
	case d.Type == "text_delta" && b.kind == blockText && d.Text != "":
		q = append(q, abi.Part{Kind: abi.KindTextDelta, ID: b.id, Delta: d.Text})
	case d.Type == "thinking_delta" && b.kind == blockReasoning && d.Thinking != "":
		q = append(q, abi.Part{Kind: abi.KindReasoningDelta, ID: b.id, Delta: d.Thinking})
	case d.Type == "input_json_delta" && b.kind == blockTool && d.PartialJSON != "":
		if err := s.held.Add(provider, len(d.PartialJSON)); err != nil {
			return q, err
		}
		b.input.WriteString(d.PartialJSON)
		q = append(q, abi.Part{Kind: abi.KindToolInputDelta, ID: b.id, Delta: d.PartialJSON})
	case d.Type == "citations_delta" && b.kind == blockText:
		c := &d.Citation
		if src := citedSource(c.Type, c.URL, c.Title, c.Source, c.DocumentTitle); src != nil {
			q = append(q, abi.Part{Kind: abi.KindSource, ID: b.id, Source: src})
		}
	}
	return q, nil
}

// blockStop ends an open block; a tool's ends with its call.
func (s *source) blockStop(q []abi.Part, ev *ant.MessageStreamEventUnion) []abi.Part {
	b := s.blocks[ev.Index]
	if b == nil {
		return q
	}
	delete(s.blocks, ev.Index)
	switch b.kind {
	case blockText:
		q = append(q, abi.Part{Kind: abi.KindTextEnd, ID: b.id})
	case blockReasoning:
		q = append(q, abi.Part{Kind: abi.KindReasoningEnd, ID: b.id})
	case blockTool:
		q = append(q,
			abi.Part{Kind: abi.KindToolInputEnd, ID: b.id},
			abi.Part{Kind: abi.KindToolCall, ID: b.id, Tool: &abi.ToolInfo{
				Name: b.name, Input: orEmptyObject(b.input.String()), ProviderExecuted: b.server}})
	}
	return q
}

// messageDelta records the stop reason and the usage so far.
func (s *source) messageDelta(ev *ant.MessageStreamEventUnion) {
	if r := ev.Delta.StopReason; r != "" {
		s.stop = string(r)
	}
	if e := ev.Delta.StopDetails.Explanation; e != "" {
		s.explanation = e
	}
	u := &ev.Usage
	s.output = max(s.output, u.OutputTokens)
	if u.InputTokens > 0 {
		s.input = u.InputTokens
	}
	if u.CacheReadInputTokens > 0 {
		s.cacheRead = u.CacheReadInputTokens
	}
	if u.CacheCreationInputTokens > 0 {
		s.cacheWrite = u.CacheCreationInputTokens
	}
	if t := u.OutputTokensDetails.ThinkingTokens; t > 0 {
		s.thinking = t
	}
}

// messageStop ends the stream: with a refusal before any content, an
// error the driver can still fail over; otherwise the finish part.
func (s *source) messageStop(q []abi.Part) ([]abi.Part, error) {
	if s.stop == "refusal" && !s.content {
		// A declared refusal before any content: fail now, the driver
		// can still switch models.
		return q, adapter.Refusal(provider, s.stop, s.explanation)
	}
	f := &abi.Finish{Reason: stopReason(s.stop), Usage: usage(s.input, s.output, s.cacheRead, s.cacheWrite, s.thinking)}
	return append(q, abi.Part{Kind: abi.KindFinish, Finish: f}), io.EOF
}

// serverResult maps the result of a tool the provider ran itself (web
// search, web fetch, code execution…), which arrives whole in its block's
// start: a tool-result part with the result's JSON, and for a web search a
// source part per result.
func (s *source) serverResult(q []abi.Part, cb *ant.ContentBlockStartEventContentBlockUnion) []abi.Part {
	name := s.servers[cb.ToolUseID]
	if name == "" {
		name = strings.TrimSuffix(cb.Type, "_tool_result")
	}
	result := cb.JSON.Content.Raw()
	if result == "" {
		result = "null"
	}
	q = append(q, abi.Part{Kind: abi.KindToolResult, ID: cb.ToolUseID, Tool: &abi.ToolInfo{
		Name: name, Result: result, ProviderExecuted: true,
		IsError: strings.HasSuffix(cb.Content.Type, "_error")}})
	for _, r := range cb.Content.OfWebSearchResultBlockArray {
		q = append(q, abi.Part{Kind: abi.KindSource, ID: cb.ToolUseID, Source: &abi.Source{URL: r.URL, Title: r.Title}})
	}
	return q
}

// citedSource maps a citation of the answer's text (its type and fields,
// from a stream delta or a message's text block) to the source it cites:
// a web page (web search), a search result, or a document of the request
// (by title). Nil when it names nothing a caller could show.
func citedSource(typ, url, title, source, documentTitle string) *abi.Source {
	switch typ {
	case "web_search_result_location":
		return &abi.Source{URL: url, Title: title}
	case "search_result_location":
		return &abi.Source{URL: source, Title: title}
	case "char_location", "page_location", "content_block_location":
		if documentTitle != "" {
			return &abi.Source{Title: documentTitle}
		}
	}
	return nil
}
