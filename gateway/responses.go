package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// responses serves POST /v1/responses, OpenAI's Responses API, with the
// chat door's rules: the same routing (any model, OpenAI-compatible or
// Anthropic: the request is translated to the driver's, as a chat
// request is), commit gate, fail-over, limits, logs and metrics; answers
// as a response object or its typed events, errors in OpenAI's shape.
//
// A stateful request (previous_response_id, store: true, background:
// true, an item_reference input item) is not translated: its state lives in the one upstream account
// that stores the response, and the gateway stores no responses of its
// own. It is forwarded as it came (forwardStateful) when every model of
// its route is a model of one OpenAI account, failing over between them,
// and refused with a 400 on any other route, where a fail-over could
// reach a model that would not find the state.
func (g *Gateway) responses(w http.ResponseWriter, r *http.Request) { g.serve(w, r, responsesDoor{}) }

// responsesDoor is OpenAI's Responses API: POST /v1/responses.
type responsesDoor struct{}

func (responsesDoor) newID() string { return newID("resp_rh") }

func (responsesDoor) appendError(b []byte, e *apiError) []byte {
	return appendErrorJSON(b, e.typ, e.code, e.msg, e.param)
}

func (responsesDoor) passthrough(body []byte) bool { return isErrorObject(body) }

func (responsesDoor) encoder(id, model string, cr *chatRequest) encoder {
	return &responsesEncoder{id: id, model: model, created: time.Now().Unix(), text: map[string]int{}, calls: map[string]int{}}
}

// responsesFields are the request fields the door reads; any other is
// refused, since it could not reach every model a request may fail over
// to. A stateful request's fields all go to its account (forward).
var responsesFields = map[string]bool{
	"model": true, "input": true, "instructions": true, "stream": true, "tools": true, "tool_choice": true,
	"max_output_tokens": true, "temperature": true, "top_p": true, "store": true, "metadata": true,
	"parallel_tool_calls": true, "user": true, "previous_response_id": true, "background": true,
	"fallbacks": true, // the gateway's own, as on the other doors
}

// statefulFields make a Responses request stateful: set (not null, not
// false), its state is stored by the upstream account that answers it.
var statefulFields = [...]string{"previous_response_id", "store", "background"}

// statefulMsg says why a stateful request is refused on a route that is
// not one OpenAI account.
const statefulMsg = "a stateful request's response is stored by the one upstream account that answers it, and only a route whose models are all one OpenAI account (one base URL, key and headers) can keep it there: this route's fail-over could reach a model that would not find it, and the gateway stores no responses of its own. Use such a route, or send the conversation as input items, with store false or omitted"

// itemReference returns the param of the first item_reference among a
// Responses input's items (its type is optional: an item with an id and
// no role), "" when there is none. Such an item names an item an upstream
// account stored, which makes the request stateful.
func itemReference(input json.RawMessage) string {
	if len(input) == 0 || input[0] != '[' || !bytes.Contains(input, []byte(`"id"`)) {
		return ""
	}
	var items []struct {
		Type string          `json:"type"`
		ID   string          `json:"id"`
		Role json.RawMessage `json:"role"`
	}
	if json.Unmarshal(input, &items) != nil {
		return "" // the input's checks say what is wrong with it
	}
	for i, it := range items {
		if it.Type == "item_reference" || (it.Type == "" && it.Role == nil && it.ID != "") {
			return "input[" + strconv.Itoa(i) + "]"
		}
	}
	return ""
}

// parse reads a Responses body into the driver's request: instructions
// and system or developer messages as the system prompt, message items
// (text), function_call and function_call_output items, function tools.
func (responsesDoor) parse(body []byte, _ http.Header, _ *generation) (*chatRequest, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, badRequest("", "the body is not a JSON object")
	}
	cr := &chatRequest{}
	for _, k := range statefulFields {
		if f, ok := fields[k]; ok && string(f) != "null" && string(f) != "false" {
			cr.forward, cr.stateful = fields, k // its other fields are the account's to check
			break
		}
	}
	if at := itemReference(fields["input"]); at != "" && cr.forward == nil {
		cr.forward, cr.stateful = fields, at
	}
	for k := range fields {
		if !responsesFields[k] && cr.forward == nil {
			return nil, badRequest(k, "%s is not supported by the gateway's /v1/responses (it could not reach every model of a fail-over)", k)
		}
	}
	if err := json.Unmarshal(fields["model"], &cr.model); err != nil || cr.model == "" {
		return nil, badRequest("model", "model is required, a string naming a route (GET /v1/models lists them)")
	}
	if f, ok := fields["stream"]; ok && json.Unmarshal(f, &cr.stream) != nil {
		return nil, badRequest("stream", "stream: want a boolean")
	}
	if err := parseFallbacks(fields, cr); err != nil {
		return nil, err
	}
	if cr.forward != nil {
		delete(cr.forward, "fallbacks") // the gateway's, not the account's
		return cr, nil
	}
	r := &cr.req
	if f, ok := fields["instructions"]; ok && string(f) != "null" {
		if json.Unmarshal(f, &r.System) != nil {
			return nil, badRequest("instructions", "instructions: want a string")
		}
	}
	if f, ok := fields["max_output_tokens"]; ok && string(f) != "null" {
		if json.Unmarshal(f, &r.MaxOutputTokens) != nil || r.MaxOutputTokens <= 0 {
			return nil, badRequest("max_output_tokens", "max_output_tokens: want a positive integer")
		}
	}
	for _, k := range [...]string{"temperature", "top_p"} {
		f, ok := fields[k]
		if !ok || string(f) == "null" {
			continue
		}
		var v float64
		if json.Unmarshal(f, &v) != nil {
			return nil, badRequest(k, "%s: want a number", k)
		}
		if k == "temperature" {
			r.Temperature = &v
		} else {
			r.TopP = &v
		}
	}
	if f, ok := fields["tool_choice"]; ok && string(f) != "null" && string(f) != `"auto"` {
		return nil, badRequest("tool_choice", `tool_choice: only "auto" is supported by the gateway's /v1/responses`)
	}
	if err := parseResponsesTools(fields["tools"], r); err != nil {
		return nil, err
	}
	if err := parseResponsesInput(fields["input"], r); err != nil {
		return nil, err
	}
	return cr, nil
}

func parseResponsesTools(raw json.RawMessage, r *driver.Request) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var tools []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	if json.Unmarshal(raw, &tools) != nil {
		return badRequest("tools", "tools: want an array of function tools")
	}
	for i, t := range tools {
		if t.Type != "function" || t.Name == "" {
			return badRequest("tools["+strconv.Itoa(i)+"]", "tools[%d]: only function tools with a name are supported by the gateway's /v1/responses", i)
		}
		schema := string(t.Parameters)
		if schema == "" || schema == "null" {
			schema = `{"type":"object","properties":{}}`
		}
		r.Tools = append(r.Tools, driver.Tool{Name: t.Name, Description: t.Description, Schema: schema})
	}
	return nil
}

// parseResponsesInput reads input: a string (one user message) or items.
func parseResponsesInput(raw json.RawMessage, r *driver.Request) error {
	if len(raw) == 0 || string(raw) == "null" {
		return badRequest("input", "input is required: a string or an array of input items")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		r.Messages = append(r.Messages, driver.Message{Role: driver.RoleUser, Content: []driver.Content{{Text: s}}})
		return nil
	}
	var items []struct {
		Type      string          `json:"type"`
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		CallID    string          `json:"call_id"`
		Name      string          `json:"name"`
		Arguments string          `json:"arguments"`
		Output    json.RawMessage `json:"output"`
	}
	if json.Unmarshal(raw, &items) != nil || len(items) == 0 {
		return badRequest("input", "input: want a string or a non-empty array of input items")
	}
	var system []string
	if r.System != "" {
		system = append(system, r.System)
	}
	for i, it := range items {
		at := "input[" + strconv.Itoa(i) + "]"
		switch it.Type {
		case "", "message":
			text, err := responsesText(it.Content)
			if err != nil {
				return badRequest(at+".content", "%s.content: %s", at, err.msg)
			}
			switch it.Role {
			case "system", "developer":
				system = append(system, text)
			case "user", "assistant":
				r.Messages = append(r.Messages, driver.Message{Role: driver.Role(it.Role), Content: []driver.Content{{Text: text}}})
			default:
				return badRequest(at+".role", "%s.role: want user, assistant, system or developer", at)
			}
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return badRequest(at, "%s: a function_call needs call_id and name", at)
			}
			args := it.Arguments
			if args == "" {
				args = "{}"
			}
			c := driver.Content{ToolCallID: it.CallID, ToolName: it.Name, ToolInput: args}
			if n := len(r.Messages); n > 0 && r.Messages[n-1].Role == driver.RoleAssistant {
				r.Messages[n-1].Content = append(r.Messages[n-1].Content, c) // the calls of one turn together
			} else {
				r.Messages = append(r.Messages, driver.Message{Role: driver.RoleAssistant, Content: []driver.Content{c}})
			}
		case "function_call_output":
			if it.CallID == "" {
				return badRequest(at+".call_id", "%s: a function_call_output needs call_id", at)
			}
			out := string(it.Output)
			var os string
			if json.Unmarshal(it.Output, &os) == nil {
				out = os
			}
			r.Messages = append(r.Messages, driver.Message{Role: driver.RoleTool, Content: []driver.Content{{ToolCallID: it.CallID, ToolResult: out}}})
		default:
			return badRequest(at+".type", "%s: items of type %q are not supported by the gateway's /v1/responses (message, function_call and function_call_output are)", at, it.Type)
		}
	}
	r.System = strings.Join(system, "\n\n")
	if len(r.Messages) == 0 {
		return badRequest("input", "input: at least one user or assistant message is required")
	}
	return nil
}

// responsesText reads a message's content: a string, or text parts
// (input_text, output_text).
func responsesText(raw json.RawMessage) (string, *requestError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", &requestError{msg: "want a string or an array of text parts"}
	}
	var b strings.Builder
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			b.WriteString(p.Text)
		default:
			return "", &requestError{msg: "parts of type " + strconv.Quote(p.Type) + " are not supported by the gateway's /v1/responses (input_text and output_text are)"}
		}
	}
	return b.String(), nil
}

// responsesEncoder writes an answer as a Responses API response object,
// or as its typed events (each with its sequence_number). Reasoning is
// not sent (its items carry provider state that another model of a
// fail-over could not read).
type responsesEncoder struct {
	id, model string
	created   int64
	seq       int
	started   bool
	output    []map[string]any // the items, in order
	text      map[string]int   // a text block's id → its item's index in output
	calls     map[string]int   // a tool call's id → its item's index
	usage     abi.Usage
	finish    abi.Reason
}

func (e *responsesEncoder) response(status string) map[string]any {
	out := e.output
	if out == nil {
		out = []map[string]any{}
	}
	r := map[string]any{
		"id": e.id, "object": "response", "created_at": e.created, "status": status, "model": e.model,
		"output": out, "error": nil, "incomplete_details": nil, "parallel_tool_calls": true, "tool_choice": "auto",
		"tools": []any{}, "metadata": map[string]any{}, "text": map[string]any{"format": map[string]any{"type": "text"}},
	}
	if status == "incomplete" {
		reason := "max_output_tokens"
		if e.finish == abi.ReasonContentFilter || e.finish == abi.ReasonRefusal {
			reason = "content_filter"
		}
		r["incomplete_details"] = map[string]any{"reason": reason}
	}
	if status != "in_progress" {
		u := e.usage
		r["usage"] = map[string]any{
			"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens, "total_tokens": u.InputTokens + u.OutputTokens,
			"input_tokens_details":  map[string]any{"cached_tokens": u.CacheReadTokens},
			"output_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
		}
	}
	return r
}

func (e *responsesEncoder) status() string {
	switch e.finish {
	case abi.ReasonLength, abi.ReasonContentFilter, abi.ReasonRefusal:
		return "incomplete"
	}
	return "completed"
}

// event appends one typed event; v gets its type and sequence_number.
func (e *responsesEncoder) event(b []byte, typ string, v map[string]any) []byte {
	v["type"], v["sequence_number"] = typ, e.seq
	e.seq++
	data, _ := json.Marshal(v)
	b = append(b, "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// begin appends response.created and response.in_progress, once.
func (e *responsesEncoder) begin(b []byte) []byte {
	if e.started {
		return b
	}
	e.started = true
	b = e.event(b, "response.created", map[string]any{"response": e.response("in_progress")})
	return e.event(b, "response.in_progress", map[string]any{"response": e.response("in_progress")})
}

// take applies p to the items; stream, when set, appends p's events.
func (e *responsesEncoder) take(b []byte, p *abi.Part, stream bool) []byte {
	switch p.Kind {
	case abi.KindTextStart:
		e.openText(p.ID)
		if stream {
			i := e.text[p.ID]
			it := e.output[i]
			b = e.event(b, "response.output_item.added", map[string]any{"output_index": i, "item": itemCopy(it, "in_progress")})
			b = e.event(b, "response.content_part.added", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
		}
	case abi.KindTextDelta:
		i, ok := e.text[p.ID]
		if !ok {
			b = e.take(b, &abi.Part{Kind: abi.KindTextStart, ID: p.ID}, stream)
			i = e.text[p.ID]
		}
		it := e.output[i]
		it["_text"] = it["_text"].(string) + p.Delta
		if stream && p.Delta != "" {
			b = e.event(b, "response.output_text.delta", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0,
				"delta": p.Delta, "logprobs": []any{}})
		}
	case abi.KindTextEnd:
		i, ok := e.text[p.ID]
		if !ok {
			break
		}
		delete(e.text, p.ID)
		it := e.output[i]
		text := it["_text"].(string)
		delete(it, "_text")
		part := map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
		it["content"], it["status"] = []any{part}, "completed"
		if stream {
			b = e.event(b, "response.output_text.done", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "text": text, "logprobs": []any{}})
			b = e.event(b, "response.content_part.done", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "part": part})
			b = e.event(b, "response.output_item.done", map[string]any{"output_index": i, "item": it})
		}
	case abi.KindToolInputStart:
		name := ""
		if p.Tool != nil {
			name = p.Tool.Name
		}
		i := e.openCall(p.ID, name)
		if stream {
			b = e.event(b, "response.output_item.added", map[string]any{"output_index": i, "item": itemCopy(e.output[i], "in_progress")})
		}
	case abi.KindToolInputDelta:
		i, ok := e.calls[p.ID]
		if !ok {
			break
		}
		it := e.output[i]
		it["arguments"] = it["arguments"].(string) + p.Delta
		if stream && p.Delta != "" {
			b = e.event(b, "response.function_call_arguments.delta", map[string]any{"item_id": it["id"], "output_index": i, "delta": p.Delta})
		}
	case abi.KindToolCall:
		if p.Tool == nil || p.Tool.ProviderExecuted {
			break
		}
		i, ok := e.calls[p.ID]
		if !ok {
			i = e.openCall(p.ID, p.Tool.Name)
			if stream {
				b = e.event(b, "response.output_item.added", map[string]any{"output_index": i, "item": itemCopy(e.output[i], "in_progress")})
			}
		}
		delete(e.calls, p.ID)
		it := e.output[i]
		args := p.Tool.Input
		if args == "" {
			args = it["arguments"].(string)
		}
		it["arguments"], it["status"] = args, "completed"
		if stream {
			b = e.event(b, "response.function_call_arguments.done", map[string]any{"item_id": it["id"], "output_index": i, "name": it["name"], "arguments": args})
			b = e.event(b, "response.output_item.done", map[string]any{"output_index": i, "item": it})
		}
	case abi.KindFinish:
		if p.Finish != nil {
			e.usage, e.finish = p.Finish.Usage, p.Finish.Reason.Unified
		}
	}
	return b
}

func (e *responsesEncoder) openText(id string) {
	e.text[id] = len(e.output)
	e.output = append(e.output, map[string]any{"type": "message", "id": "msg_" + e.id[len("resp_"):] + "_" + strconv.Itoa(len(e.output)),
		"status": "in_progress", "role": "assistant", "content": []any{}, "_text": ""})
}

func (e *responsesEncoder) openCall(id, name string) int {
	i := len(e.output)
	e.calls[id] = i
	e.output = append(e.output, map[string]any{"type": "function_call", "id": "fc_" + e.id[len("resp_"):] + "_" + strconv.Itoa(i),
		"call_id": id, "name": name, "arguments": "", "status": "in_progress"})
	return i
}

// itemCopy is it as an event carries it while open: status set, no
// private members.
func itemCopy(it map[string]any, status string) map[string]any {
	c := make(map[string]any, len(it))
	for k, v := range it {
		if !strings.HasPrefix(k, "_") {
			c[k] = v
		}
	}
	c["status"] = status
	return c
}

// closeOpen closes the text items still open (an upstream that ended a
// block without its end part).
func (e *responsesEncoder) closeOpen(b []byte, stream bool) []byte {
	for len(e.text) > 0 {
		for id := range e.text {
			b = e.take(b, &abi.Part{Kind: abi.KindTextEnd, ID: id}, stream)
			break
		}
	}
	return b
}

func (e *responsesEncoder) raw(b []byte, _ *abi.Part) []byte { return b }

func (e *responsesEncoder) appendPart(b []byte, p *abi.Part) []byte {
	switch p.Kind {
	case abi.KindStreamStart, abi.KindResponseMeta, abi.KindFinish:
		return e.take(b, p, true) // no event of its own
	}
	b = e.begin(b)
	return e.take(b, p, true)
}

func (e *responsesEncoder) appendEnd(b []byte, u *abi.Usage) []byte {
	b = e.begin(b)
	b = e.closeOpen(b, true)
	if u != nil && *u != (abi.Usage{}) {
		e.usage = *u
	}
	st := e.status()
	typ := "response.completed"
	if st == "incomplete" {
		typ = "response.incomplete"
	}
	return e.event(b, typ, map[string]any{"response": e.response(st)})
}

// appendErrorEvent appends the error event, the Responses API's in-band
// error, after response.created when nothing was sent before it.
func (e *responsesEncoder) appendErrorEvent(b []byte, ae *apiError) []byte {
	b = e.begin(b)
	v := map[string]any{"code": ae.code, "message": ae.msg, "param": nil}
	if ae.param != "" {
		v["param"] = ae.param
	}
	return e.event(b, "error", v)
}

func (e *responsesEncoder) collect(p *abi.Part) {
	if p.Kind != abi.KindRaw {
		e.take(nil, p, false)
	}
}

func (e *responsesEncoder) appendAnswer(b []byte) []byte {
	e.closeOpen(nil, false)
	data, _ := json.Marshal(e.response(e.status()))
	return append(append(b, data...), '\n')
}
