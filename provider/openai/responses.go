package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// This file is the Responses API (POST /responses) side of the adapter,
// chosen with WithResponsesAPI. It maps the same driver request and the
// same parts, errors and classes as Chat Completions, so a policy can fail
// over between the two APIs, or to another provider, unchanged.

// generateResponses makes one non-streaming Responses API call.
func (m *Model) generateResponses(ctx context.Context, req *driver.Request) (*driver.Response, error) {
	params, opts, warnings, err := m.responsesParams(req)
	if err != nil {
		return nil, err
	}
	var raw *http.Response
	r, err := m.client.Responses.New(ctx, params, append(opts, option.WithResponseInto(&raw))...)
	if err != nil {
		return nil, m.openError(ctx, err, raw)
	}
	if r.Status == responses.ResponseStatusFailed {
		return nil, responseFailed(m.provider, &r.Error, []byte(r.RawJSON()))
	}
	resp := &driver.Response{
		Meta:     abi.ResponseMeta{ID: r.ID, ModelID: r.Model, Timestamp: unixFloat(r.CreatedAt)},
		Usage:    responsesUsage(&r.Usage),
		Warnings: warnings,
	}
	if raw != nil {
		resp.Headers = raw.Header
	}
	var refusal strings.Builder
	tools := false
	for i := range r.Output {
		it := &r.Output[i]
		switch it.Type {
		case "reasoning":
			var b strings.Builder
			for _, s := range it.Summary {
				b.WriteString(s.Text)
			}
			for _, c := range it.Content {
				if c.Type == "reasoning_text" {
					b.WriteString(c.Text)
				}
			}
			if b.Len() > 0 {
				resp.Content = append(resp.Content, abi.Part{Kind: abi.KindReasoningDelta, ID: it.ID, Delta: b.String()})
			}
		case "message":
			for _, c := range it.Content {
				switch c.Type {
				case "output_text":
					resp.Content = append(resp.Content, abi.Part{Kind: abi.KindTextDelta, ID: it.ID, Delta: c.Text})
					for _, a := range c.Annotations {
						if a.Type == "url_citation" {
							resp.Content = append(resp.Content, abi.Part{Kind: abi.KindSource, ID: it.ID, Source: &abi.Source{URL: a.URL, Title: a.Title}})
						}
					}
				case "refusal":
					refusal.WriteString(c.Refusal)
				}
			}
		case "function_call":
			tools = true
			resp.Content = append(resp.Content, abi.Part{Kind: abi.KindToolCall, ID: callID(it.CallID, it.ID),
				Tool: &abi.ToolInfo{Name: it.Name, Input: orEmptyObject(it.Arguments.OfString)}})
		}
	}
	resp.Finish = responsesFinish(r, tools)
	if refusal.Len() > 0 {
		if !slices.ContainsFunc(resp.Content, func(p abi.Part) bool { return driver.CommitOnOutput.IsContent(&p) }) {
			return nil, adapter.Refusal(m.provider, "refusal", refusal.String())
		}
		resp.Content = append(resp.Content, abi.Part{Kind: abi.KindTextDelta, ID: refusalID, Delta: refusal.String()})
		resp.Finish = abi.FinishReason{Unified: abi.ReasonRefusal, Raw: "refusal"}
	}
	return resp, nil
}

// streamResponses opens one streaming Responses API call.
func (m *Model) streamResponses(ctx context.Context, req *driver.Request) (driver.Stream, error) {
	params, opts, warnings, err := m.responsesParams(req)
	if err != nil {
		return nil, err
	}
	var raw *http.Response
	st := m.client.Responses.NewStreaming(ctx, params, append(opts, option.WithResponseInto(&raw), normalizeSSE)...)
	if err := st.Err(); err != nil {
		_ = st.Close()
		return nil, m.openError(ctx, err, raw)
	}
	if err := adapter.JSONError(m.provider, raw); err != nil {
		// A 200 with a JSON error object in place of the events.
		_ = st.Close()
		return nil, err
	}
	src := &responsesSource{provider: m.provider, st: st, raw: m.raw}
	if !m.sdkChunks && raw != nil && raw.Body != nil {
		// As for Chat Completions: the events are read here, and only
		// those the plain decoding cannot take go through the SDK's.
		src.ev = &responseEvents{body: raw.Body}
	}
	s := adapter.NewStream(ctx, m.provider, src, abi.Part{Kind: abi.KindStreamStart, Warnings: warnings})
	if raw != nil {
		s.SetHeader(raw.Header)
		s.SetBody(raw.Body) // a body that opens with a JSON error in place of events fails with it
	}
	return s, nil
}

// responsesParams translates a driver request for the Responses API.
func (m *Model) responsesParams(req *driver.Request) (responses.ResponseNewParams, []option.RequestOption, []abi.Warning, error) {
	p := responses.ResponseNewParams{}
	if req == nil {
		return p, nil, nil, errors.New("openai: nil request")
	}
	id, err := m.modelID(req)
	if err != nil {
		return p, nil, nil, err
	}
	p.Model = id
	if req.System != "" {
		p.Instructions = param.NewOpt(req.System)
	}
	var input responses.ResponseInputParam
	for i := range req.Messages {
		items, err := inputItems(&req.Messages[i])
		if err != nil {
			return p, nil, nil, fmt.Errorf("openai: message %d: %w", i, err)
		}
		input = append(input, items...)
	}
	p.Input.OfInputItemList = input
	for _, t := range req.Tools {
		var schema map[string]any
		if t.Schema != "" {
			if err := json.Unmarshal([]byte(t.Schema), &schema); err != nil {
				return p, nil, nil, fmt.Errorf("openai: tool %q: schema: %w", t.Name, err)
			}
		}
		// Not strict, as in Chat Completions: strict mode rejects the
		// schemas most tools declare (optional fields, open objects).
		tool := responses.ToolParamOfFunction(t.Name, schema, false)
		if t.Description != "" {
			tool.OfFunction.Description = param.NewOpt(t.Description)
		}
		p.Tools = append(p.Tools, tool)
	}
	if req.MaxOutputTokens > 0 {
		p.MaxOutputTokens = param.NewOpt(int64(req.MaxOutputTokens))
	}
	if req.Temperature != nil {
		p.Temperature = param.NewOpt(*req.Temperature)
	}
	if req.TopP != nil {
		p.TopP = param.NewOpt(*req.TopP)
	}
	var warnings []abi.Warning
	if req.Seed != nil {
		warnings = append(warnings, abi.Warning{Type: "unsupported", Feature: "seed", Message: "the Responses API has no seed; it was not sent"})
	}
	if len(req.StopSequences) > 0 {
		warnings = append(warnings, abi.Warning{Type: "unsupported", Feature: "stop", Message: "the Responses API has no stop sequences; they were not sent"})
	}
	opts, fields, err := m.passThrough(req)
	if err != nil {
		return p, nil, nil, err
	}
	if _, ok := fields["max_output_tokens"]; ok || m.paramSet["max_output_tokens"] {
		p.MaxOutputTokens = param.Opt[int64]{} // the caller's own wins, never both
	}
	return p, opts, warnings, nil
}

func inputItems(msg *driver.Message) ([]responses.ResponseInputItemUnionParam, error) {
	switch msg.Role {
	case driver.RoleSystem:
		return []responses.ResponseInputItemUnionParam{
			responses.ResponseInputItemParamOfMessage(joinText(msg.Content), responses.EasyInputMessageRoleSystem)}, nil
	case driver.RoleUser:
		return []responses.ResponseInputItemUnionParam{
			responses.ResponseInputItemParamOfMessage(joinText(msg.Content), responses.EasyInputMessageRoleUser)}, nil
	case driver.RoleAssistant:
		var out []responses.ResponseInputItemUnionParam
		if t := joinText(msg.Content); t != "" {
			out = append(out, responses.ResponseInputItemParamOfMessage(t, responses.EasyInputMessageRoleAssistant))
		}
		for _, c := range msg.Content {
			if c.ToolName != "" {
				out = append(out, responses.ResponseInputItemParamOfFunctionCall(orEmptyObject(c.ToolInput), c.ToolCallID, c.ToolName))
			}
		}
		return out, nil
	case driver.RoleTool:
		var out []responses.ResponseInputItemUnionParam
		for _, c := range msg.Content {
			if c.ToolCallID == "" {
				return nil, errors.New("tool result without ToolCallID")
			}
			item := responses.ResponseInputItemParamOfFunctionCallOutput(c.ToolResult)
			item.OfFunctionCallOutput.CallID = param.NewOpt(c.ToolCallID)
			out = append(out, item)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown role %q", msg.Role)
}

// callID is a function call's id for the caller: the call_id the tool
// result must name, else the item id.
func callID(call, item string) string {
	if call != "" {
		return call
	}
	return item
}

func unixFloat(sec float64) time.Time {
	if sec <= 0 || math.IsNaN(sec) || sec > math.MaxInt64/1e9 {
		return time.Time{}
	}
	return time.Unix(0, int64(sec*1e9)).UTC()
}

func responsesUsage(u *responses.ResponseUsage) abi.Usage {
	return abi.Usage{
		InputTokens:      u.InputTokens,
		OutputTokens:     u.OutputTokens,
		CacheReadTokens:  u.InputTokensDetails.CachedTokens,
		CacheWriteTokens: u.InputTokensDetails.CacheWriteTokens,
		ReasoningTokens:  u.OutputTokensDetails.ReasoningTokens,
	}
}

// responsesFinish maps a finished response's status: "completed" is a stop
// (or tool calls when the model called a function), "incomplete" says why
// in incomplete_details.
func responsesFinish(r *responses.Response, tools bool) abi.FinishReason {
	switch r.Status {
	case responses.ResponseStatusCompleted:
		if tools {
			return abi.FinishReason{Unified: abi.ReasonToolCalls, Raw: string(r.Status)}
		}
		return abi.FinishReason{Unified: abi.ReasonStop, Raw: string(r.Status)}
	case responses.ResponseStatusIncomplete:
		raw := r.IncompleteDetails.Reason
		switch raw {
		case "max_output_tokens":
			return abi.FinishReason{Unified: abi.ReasonLength, Raw: raw}
		case "content_filter":
			return abi.FinishReason{Unified: abi.ReasonContentFilter, Raw: raw}
		case "":
			raw = string(r.Status)
		}
		return abi.FinishReason{Unified: abi.ReasonOther, Raw: raw}
	case "":
		return abi.FinishReason{Unified: abi.ReasonUnknown}
	}
	return abi.FinishReason{Unified: abi.ReasonOther, Raw: string(r.Status)}
}

// responseFailed is the error of a response whose status is "failed": its
// error code classifies it ("server_error" is a retryable ClassServer,
// "rate_limit_exceeded" ClassRateLimit, "invalid_prompt" ClassClient); a
// failure without a code is a retryable server fault.
func responseFailed(provider string, e *responses.ResponseError, raw []byte) *driver.ProviderError {
	return adapter.EventError(provider, "", string(e.Code), e.Message, raw, nil)
}

// responsesSource turns Responses API stream events into parts
// (adapter.Source).
type responsesSource struct {
	provider string
	st       *ssestream.Stream[responses.ResponseStreamEventUnion]
	raw      bool // emit each event as a KindRaw part too (WithRawChunks)
	// ev reads the events itself (nil in tests of the SDK's path).
	ev  *responseEvents
	cur responses.ResponseStreamEventUnion

	metaSent bool
	content  bool // a part that commits a stream went out
	// open lists the text and reasoning blocks started and not ended, in
	// order, with the kind that ends each.
	open    []openBlock
	tools   map[string]*toolCall // function calls by item id; made on the first
	called  bool                 // a function call completed
	refusal strings.Builder      // a refusal before any content
	refused bool                 // a refusal after content went out as text
	// refusalItem is the message item of the refusal; refusalDone reports
	// that it ended while its refusal was held.
	refusalItem string
	refusalDone bool
	held        adapter.Held // tool input and refusal bytes, against MaxHeld
}

type openBlock struct {
	id  string
	end abi.PartKind
}

func (s *responsesSource) Close() error { return s.st.Close() }

func (s *responsesSource) Next(q []abi.Part) ([]abi.Part, error) {
	for len(q) == 0 {
		more, err := s.read()
		if err != nil {
			return q, streamError(s.provider, err)
		}
		if !more {
			return q, adapter.ErrTruncated // no response.completed
		}
		ev := &s.cur
		if s.raw {
			q = append(q, abi.Part{Kind: abi.KindRaw, Raw: *ev})
		}
		n := len(q)
		q, err = s.event(q, ev)
		for i := n; i < len(q) && !s.content; i++ {
			s.content = driver.CommitOnOutput.IsContent(&q[i])
		}
		if err != nil {
			return q, err
		}
	}
	return q, nil
}

// read decodes the next event into s.cur: false at the end of the
// stream, or the error that ended it.
func (s *responsesSource) read() (bool, error) {
	if s.ev != nil {
		return s.ev.next(&s.cur)
	}
	if !s.st.Next() {
		return false, s.st.Err()
	}
	s.cur = s.st.Current()
	return true, nil
}

// responseEvents reads a Responses API event stream as the SDK's
// ssestream.Stream does (the body splits the events as its decoder does).
// An event that is plainly one object (no "[DONE]", no thread.* type, no
// top-level "error", which the SDK's stream looks for first) is decoded
// where it lies, with json.Unmarshal into the SDK's union as the SDK
// does; any other goes to the body's SkipMalformed (the gateway's), then
// to the SDK's own per-event handling.
type responseEvents struct {
	body io.ReadCloser
	src  adapter.EventBody // made at the first read
	skip interface{ SkipMalformed(data []byte) bool }
	done bool
	err  error
}

func (e *responseEvents) next(cur *responses.ResponseStreamEventUnion) (bool, error) {
	if e.src == nil {
		e.src = adapter.Events(e.body)
		e.skip, _ = e.src.(interface{ SkipMalformed([]byte) bool })
	}
	for !e.done && e.err == nil {
		typ, data, err := e.src.ReadEvent()
		if err != nil {
			if e.done = true; err != io.EOF {
				e.err = err
			}
			break
		}
		if len(data) == 0 {
			continue // a type and no data: the SDK's decoder drops it
		}
		if string(data) == "[DONE]\n" {
			e.done = true
			break
		}
		if plainEvent(typ, data) {
			*cur = responses.ResponseStreamEventUnion{}
			if json.Unmarshal(data, cur) == nil {
				return true, nil
			}
		}
		if e.skip != nil && e.skip.SkipMalformed(data) {
			continue
		}
		return e.sdk(string(typ), bytes.Clone(data), cur)
	}
	return false, e.err
}

// plainEvent reports whether the SDK's stream would decode an event's
// data with json.Unmarshal and nothing else: not a thread.* event, an
// object, and no key "error" (which gjson, as the SDK asks it, also finds
// spelled with \u escapes).
func plainEvent(typ, data []byte) bool {
	return data[0] == '{' && !bytes.HasPrefix(typ, []byte("thread.")) &&
		!bytes.Contains(data, []byte(`"error"`)) && !bytes.Contains(data, []byte(`\u`))
}

// sdk handles an event by the SDK's stream's own rules. Not inlined: the
// SDK's stream holds a large union.
//
//go:noinline
func (e *responseEvents) sdk(typ string, data []byte, cur *responses.ResponseStreamEventUnion) (bool, error) {
	st := ssestream.NewStream[responses.ResponseStreamEventUnion](&oneEvent{ev: ssestream.Event{Type: typ, Data: data}}, nil)
	if st.Next() {
		*cur = st.Current()
		return true, nil
	}
	if e.err = st.Err(); e.err == nil {
		e.done = true // data opening with [DONE]
	}
	return false, e.err
}

// event maps one event of the stream to parts appended to q; io.EOF with
// the finish part at the response's end.
func (s *responsesSource) event(q []abi.Part, ev *responses.ResponseStreamEventUnion) (_ []abi.Part, err error) {
	if s.refusal.Len() > 0 && startsOutput(ev) {
		// Content after a held refusal: the refusal cannot fail over any
		// more; it goes out first, as text, in the order it came.
		if q, err = s.flushRefusal(q); err != nil {
			return q, err
		}
	}
	switch ev.Type {
	case "response.created", "response.in_progress", "response.queued":
		if r := &ev.Response; !s.metaSent && (r.ID != "" || r.Model != "") {
			s.metaSent = true
			q = append(q, abi.Part{Kind: abi.KindResponseMeta, ID: r.ID,
				Meta: &abi.ResponseMeta{ID: r.ID, ModelID: r.Model, Timestamp: unixFloat(r.CreatedAt)}})
		}
	case "response.output_item.added":
		if it := &ev.Item; it.Type == "function_call" {
			return s.startTool(q, it)
		}
	case "response.output_text.delta":
		if q, err = s.openBlock(q, ev.ItemID, abi.KindTextStart, abi.KindTextEnd); err != nil {
			return q, err
		}
		if ev.Delta != "" {
			q = append(q, abi.Part{Kind: abi.KindTextDelta, ID: ev.ItemID, Delta: ev.Delta})
		}
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		if q, err = s.openBlock(q, ev.ItemID, abi.KindReasoningStart, abi.KindReasoningEnd); err != nil {
			return q, err
		}
		if ev.Delta != "" {
			q = append(q, abi.Part{Kind: abi.KindReasoningDelta, ID: ev.ItemID, Delta: ev.Delta})
		}
	case "response.refusal.delta":
		if ev.Delta == "" {
			break
		}
		return s.refusalDelta(q, ev)
	case "response.output_text.annotation.added":
		if a := &ev.Annotation; a.Type == "url_citation" {
			q = append(q, abi.Part{Kind: abi.KindSource, ID: ev.ItemID, Source: &abi.Source{URL: a.URL, Title: a.Title}})
		}
	case "response.function_call_arguments.delta":
		if t := s.tools[ev.ItemID]; t != nil && ev.Delta != "" {
			if err := s.held.Add(s.provider, len(ev.Delta)); err != nil {
				return q, err
			}
			t.args.WriteString(ev.Delta)
			q = append(q, abi.Part{Kind: abi.KindToolInputDelta, ID: t.id, Delta: ev.Delta})
		}
	case "response.output_item.done":
		it := &ev.Item
		if it.ID == s.refusalItem && s.refusal.Len() > 0 {
			s.refusalDone = true
		}
		q = s.closeBlock(q, it.ID)
		if it.Type == "function_call" {
			return s.endTool(q, it)
		}
	case "response.completed", "response.incomplete":
		return s.completed(q, &ev.Response)
	case "response.failed":
		return q, responseFailed(s.provider, &ev.Response.Error, []byte(ev.RawJSON()))
	case "error":
		return q, adapter.EventError(s.provider, "", ev.Code, ev.Message, []byte(ev.RawJSON()), nil)
	}
	return q, nil
}

// refusalDelta delivers a refusal after content as text, or holds it
// while no content has come, so that it can still fail over.
func (s *responsesSource) refusalDelta(q []abi.Part, ev *responses.ResponseStreamEventUnion) (_ []abi.Part, err error) {
	if s.content || s.refused {
		// After content a refusal cannot fail over any more: deliver
		// it as text and finish with ReasonRefusal.
		s.refusalItem = ev.ItemID
		if q, err = s.flushRefusal(q); err != nil {
			return q, err
		}
		q = append(q, abi.Part{Kind: abi.KindTextDelta, ID: refusalID, Delta: ev.Delta})
	} else {
		if err := s.held.Add(s.provider, len(ev.Delta)); err != nil {
			return q, err
		}
		s.refusalItem = ev.ItemID
		s.refusal.WriteString(ev.Delta)
	}
	return q, nil
}

// completed ends the answer: a refusal before any content fails;
// otherwise every open block closes and the finish part follows.
func (s *responsesSource) completed(q []abi.Part, r *responses.Response) (_ []abi.Part, err error) {
	if s.refusal.Len() > 0 && !s.content {
		// A declared refusal before any content: fail now, the driver
		// can still switch models.
		return q, adapter.Refusal(s.provider, "refusal", s.refusal.String())
	}
	if s.refusal.Len() > 0 { // content came after it: text, never dropped
		if q, err = s.flushRefusal(q); err != nil {
			return q, err
		}
	}
	for len(s.open) > 0 {
		q = s.closeBlock(q, s.open[0].id)
	}
	reason := responsesFinish(r, s.called)
	if s.refused {
		reason = abi.FinishReason{Unified: abi.ReasonRefusal, Raw: "refusal"}
	}
	f := &abi.Finish{Reason: reason, Usage: responsesUsage(&r.Usage)}
	return append(q, abi.Part{Kind: abi.KindFinish, Finish: f}), io.EOF
}

// startsOutput reports whether ev carries output that commits a stream.
func startsOutput(ev *responses.ResponseStreamEventUnion) bool {
	switch ev.Type {
	case "response.output_text.delta", "response.reasoning_summary_text.delta", "response.reasoning_text.delta",
		"response.function_call_arguments.delta":
		return ev.Delta != ""
	case "response.output_item.added", "response.output_item.done":
		return ev.Item.Type == "function_call"
	}
	return false
}

// flushRefusal opens the refusal text block, once, and delivers the
// refusal text held while no content had come.
func (s *responsesSource) flushRefusal(q []abi.Part) ([]abi.Part, error) {
	s.refused = true
	q, err := s.openBlock(q, refusalID, abi.KindTextStart, abi.KindTextEnd)
	if err != nil {
		return q, err
	}
	if s.refusal.Len() > 0 {
		q = append(q, abi.Part{Kind: abi.KindTextDelta, ID: refusalID, Delta: s.refusal.String()})
		s.refusal.Reset()
	}
	if s.refusalDone {
		q = s.closeBlock(q, refusalID)
	}
	return q, nil
}

func (s *responsesSource) startTool(q []abi.Part, it *responses.ResponseOutputItemUnion) ([]abi.Part, error) {
	if _, ok := s.tools[it.ID]; ok {
		return q, nil
	}
	if len(s.tools)+len(s.open) >= adapter.MaxOpen {
		return q, adapter.LimitError(s.provider, "open blocks and tool calls", adapter.MaxOpen)
	}
	t := &toolCall{id: callID(it.CallID, it.ID), name: it.Name}
	if s.tools == nil {
		s.tools = map[string]*toolCall{}
	}
	s.tools[it.ID] = t
	q = append(q, abi.Part{Kind: abi.KindToolInputStart, ID: t.id, Tool: &abi.ToolInfo{Name: t.name}})
	if a := it.Arguments.OfString; a != "" {
		if err := s.held.Add(s.provider, len(a)); err != nil {
			return q, err
		}
		t.args.WriteString(a)
		q = append(q, abi.Part{Kind: abi.KindToolInputDelta, ID: t.id, Delta: a})
	}
	return q, nil
}

// endTool completes a function call. The done item's arguments are the
// whole input, and win over the deltas.
func (s *responsesSource) endTool(q []abi.Part, it *responses.ResponseOutputItemUnion) ([]abi.Part, error) {
	q, err := s.startTool(q, it) // a call whose added event never came
	if err != nil {
		return q, err
	}
	t := s.tools[it.ID]
	delete(s.tools, it.ID)
	input := it.Arguments.OfString
	if input == "" {
		input = t.args.String()
	}
	s.called = true
	return append(q,
		abi.Part{Kind: abi.KindToolInputEnd, ID: t.id},
		abi.Part{Kind: abi.KindToolCall, ID: t.id, Tool: &abi.ToolInfo{Name: t.name, Input: orEmptyObject(input)}}), nil
}

// openBlock starts block id unless it is open.
func (s *responsesSource) openBlock(q []abi.Part, id string, start, end abi.PartKind) ([]abi.Part, error) {
	for _, b := range s.open {
		if b.id == id {
			return q, nil
		}
	}
	if len(s.tools)+len(s.open) >= adapter.MaxOpen {
		return q, adapter.LimitError(s.provider, "open blocks and tool calls", adapter.MaxOpen)
	}
	s.open = append(s.open, openBlock{id: id, end: end})
	return append(q, abi.Part{Kind: start, ID: id}), nil
}

// closeBlock ends block id if it is open; a message item also ends the
// refusal block it holds.
func (s *responsesSource) closeBlock(q []abi.Part, id string) []abi.Part {
	for i := 0; i < len(s.open); i++ {
		if b := s.open[i]; b.id == id || (b.id == refusalID && id == s.refusalItem) {
			q = append(q, abi.Part{Kind: b.end, ID: b.id})
			s.open = slices.Delete(s.open, i, i+1)
			i--
		}
	}
	return q
}
