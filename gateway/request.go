package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/retryhost/retryhost/driver"
)

// chatRequest is a parsed /v1/chat/completions body.
type chatRequest struct {
	model        string
	stream       bool
	includeUsage bool
	fallbacks    []string
	req          driver.Request
	// unhonoured are the parameters of the request that the upstreams of
	// a provider (by ProviderOptions name) are not sent, having no
	// faithful translation there; nil when none.
	unhonoured map[string][]string
	// forward is a stateful Responses request's body, which goes to the
	// route's one OpenAI account as it came (see responsesDoor.parse);
	// stateful names the field that makes it so. nil for any other.
	forward  map[string]json.RawMessage
	stateful string
}

// requestError is a client mistake in the body: 400 with param named,
// and the error's code when it is not invalid_request.
type requestError struct {
	param, msg, code string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) error {
	return &requestError{param: param, msg: fmt.Sprintf(format, args...)}
}

// maxFallbacks caps a request's own fallback chain: each link is a whole
// policy request.
const maxFallbacks = 8

// gatewayFields are the fields the gateway consumes; every other field is
// forwarded to OpenAI-compatible upstreams as it came, but stream_options,
// which goes there only when the client sent it (usageOptions).
var gatewayFields = map[string]bool{"model": true, "stream": true, "fallbacks": true}

// parseChat reads the body into the driver's request (the fields it
// models, for every provider) and keeps every other field, and the
// original messages and tools, raw for the OpenAI-compatible upstreams of
// to (forward), and translates the fields its Anthropic, Gemini and
// Bedrock upstreams understand differently (toAnthropicFields,
// toGeminiFields, toBedrockFields).
func parseChat(body []byte, to upstreams) (*chatRequest, error) {
	fields, c, err := parseCommon(body)
	if err != nil {
		return nil, err
	}
	if err := streamOptions(fields, c); err != nil {
		return nil, err
	}
	var n *int
	if err := field(fields, "n", &n); err != nil || (n != nil && *n != 1) {
		return nil, badRequest("n", "n: only 1 is supported (the gateway follows one choice)")
	}
	r := &c.req
	if err := chatMessages(fields, r); err != nil {
		return nil, err
	}
	if err := chatTools(fields, r); err != nil {
		return nil, err
	}
	if err := chatLimits(fields, r); err != nil {
		return nil, err
	}
	forward(r, fields, to.providers)
	if len(to.anthropic) > 0 {
		c.unhonour(to.anthropic, toAnthropicFields(r, fields, to.anthropic))
	}
	if len(to.gemini) > 0 {
		c.unhonour(to.gemini, toGeminiFields(r, fields, to.gemini))
	}
	if len(to.bedrock) > 0 {
		claude, others := toBedrockFields(r, fields, to.bedrock)
		c.unhonour(to.bedrock, claude)
		c.unhonour(bedrockOthersOf(to.bedrock), others)
	}
	return c, nil
}

// streamOptions reads stream_options, which only a streamed request may
// send, and keeps it for the upstreams when it is not null.
func streamOptions(fields map[string]json.RawMessage, c *chatRequest) error {
	var so *struct {
		IncludeUsage bool `json:"include_usage"`
	}
	if err := field(fields, "stream_options", &so); err != nil {
		return badRequest("stream_options", "%s", mismatch("stream_options", err))
	}
	if so != nil {
		if !c.stream {
			// OpenAI's API refuses it the same way (a non-null
			// stream_options without stream), and a client that sends it
			// expects a usage chunk no answer of this request has.
			return badRequest("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
		}
		c.includeUsage = so.IncludeUsage
		fields["stream_options"] = usageOptions(fields["stream_options"], so.IncludeUsage)
	} else {
		delete(fields, "stream_options") // null: as if absent
	}
	return nil
}

// chatMessages reads the messages, at least one.
func chatMessages(fields map[string]json.RawMessage, r *driver.Request) error {
	msgs, ok := decodeMessages(fields["messages"])
	if !ok {
		if err := field(fields, "messages", &msgs); err != nil {
			return listError[wireMessage]("messages", fields["messages"], err)
		}
	}
	if len(msgs) == 0 {
		return badRequest("messages", "messages: at least one message is required")
	}
	r.Messages = make([]driver.Message, 0, len(msgs))
	for i := range msgs {
		m, err := msgs[i].driver()
		if err != nil {
			return badRequest(fmt.Sprintf("messages[%d]", i), "messages[%d]: %v", i, err)
		}
		r.Messages = append(r.Messages, m)
	}
	return nil
}

// chatTools reads the function tools; others are forwarded raw only.
func chatTools(fields map[string]json.RawMessage, r *driver.Request) error {
	var tools []struct {
		Type     string `json:"type"`
		Function *struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := field(fields, "tools", &tools); err != nil {
		return listError[struct {
			Function *struct {
				Name        string `json:"name"`
				Description string `json:"description"`
			} `json:"function"`
		}]("tools", fields["tools"], err)
	}
	for _, t := range tools {
		if t.Function == nil || t.Function.Name == "" {
			continue // not a function tool: forwarded raw only
		}
		r.Tools = append(r.Tools, driver.Tool{Name: t.Function.Name, Description: t.Function.Description,
			Schema: string(t.Function.Parameters)})
	}
	return nil
}

// chatLimits reads the output limit, the sampling settings, the seed and
// the stop sequences.
func chatLimits(fields map[string]json.RawMessage, r *driver.Request) error {
	for _, k := range [...]string{"max_completion_tokens", "max_tokens"} {
		var v *int
		if err := field(fields, k, &v); err != nil || (v != nil && *v < 0) {
			return badRequest(k, "%s: want a non-negative integer", k)
		}
		if v != nil && r.MaxOutputTokens == 0 {
			r.MaxOutputTokens = *v
		}
	}
	if err := sampling(fields, r); err != nil {
		return err
	}
	if err := field(fields, "seed", &r.Seed); err != nil {
		return badRequest("seed", "seed: want an integer")
	}
	if raw, ok := fields["stop"]; ok && !isNull(raw) {
		var one string
		if json.Unmarshal(raw, &one) == nil {
			r.StopSequences = []string{one}
		} else if err := json.Unmarshal(raw, &r.StopSequences); err != nil {
			return badRequest("stop", "stop: want a string or a list of strings")
		}
	}
	return nil
}

// unhonour notes that the upstreams of providers are not sent params.
func (c *chatRequest) unhonour(providers, params []string) {
	if len(params) == 0 {
		return
	}
	if c.unhonoured == nil {
		c.unhonoured = make(map[string][]string, len(providers))
	}
	for _, p := range providers {
		c.unhonoured[p] = params
	}
}

// parseCommon decodes a body that must be one JSON object, and the fields
// both doors read the same way: model (the route), stream and fallbacks.
func parseCommon(body []byte) (map[string]json.RawMessage, *chatRequest, error) {
	fields, ok := splitObject(body)
	if !ok {
		if err := json.Unmarshal(body, &fields); err != nil {
			// The rare path: a Decoder tells a bad object from data after a
			// good one (json.Unmarshal, which needs no copy of the body, says
			// only "invalid character").
			dec := json.NewDecoder(bytes.NewReader(body))
			if err := dec.Decode(&fields); err != nil {
				if errors.Is(err, io.EOF) {
					return nil, nil, badRequest("", "the body is empty: want a JSON object")
				}
				var te *json.UnmarshalTypeError
				if errors.As(err, &te) {
					return nil, nil, badRequest("", "the body is not a JSON object: got %s", jsonValue(te.Value))
				}
				return nil, nil, badRequest("", "the body is not a JSON object: %v", err)
			}
			return nil, nil, badRequest("", "the body has data after its JSON object")
		}
	}
	if fields == nil {
		return nil, nil, badRequest("", "the body is not a JSON object")
	}
	c := &chatRequest{}
	if err := field(fields, "model", &c.model); err != nil || c.model == "" {
		return nil, nil, badRequest("model", "model: a route name (a string) is required; GET /v1/models lists them")
	}
	if err := field(fields, "stream", &c.stream); err != nil {
		return nil, nil, badRequest("stream", "stream: want a boolean")
	}
	if err := parseFallbacks(fields, c); err != nil {
		return nil, nil, err
	}
	return fields, c, nil
}

// parseFallbacks reads the request's own fallback chain, the body field
// fallbacks that every door takes (at most maxFallbacks route names).
func parseFallbacks(fields map[string]json.RawMessage, c *chatRequest) error {
	if err := field(fields, "fallbacks", &c.fallbacks); err != nil {
		return badRequest("fallbacks", "fallbacks: want a list of route names")
	}
	if len(c.fallbacks) > maxFallbacks {
		return badRequest("fallbacks", "fallbacks: at most %d routes, got %d", maxFallbacks, len(c.fallbacks))
	}
	for i, f := range c.fallbacks {
		if f == "" { // also a null, which decodes as ""; no route has that name
			p := fmt.Sprintf("fallbacks[%d]", i)
			return badRequest(p, "%s: want a route name (a non-empty string); GET /v1/models lists them", p)
		}
	}
	return nil
}

// mismatch says what is wrong with the field at path in the client's terms:
// a JSON type mismatch as "path.sub: want a string, got a number" (the
// decoder's own message names Go types, such as wireMessage or
// []struct{…}, that mean nothing to a client), anything else as is.
func mismatch(path string, err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return fmt.Sprintf("%s: %v", path, err)
	}
	if te.Field != "" {
		path += "." + te.Field
	}
	return fmt.Sprintf("%s: want %s, got %s", path, jsonKind(te.Type), jsonValue(te.Value))
}

// listError is the 400 for the list field key whose decoding failed with
// err: the first element that does not decode as T is named by its index
// (the decoder's error has none), else the list itself.
func listError[T any](key string, raw json.RawMessage, err error) error {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) == nil {
		for i, it := range items {
			var v T
			if e := json.Unmarshal(it, &v); e != nil {
				p := fmt.Sprintf("%s[%d]", key, i)
				return badRequest(p, "%s", mismatch(p, e))
			}
		}
	}
	return badRequest(key, "%s", mismatch(key, err))
}

// jsonKind names the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a value"
}

// jsonValue names the JSON value the decoder met, from its
// UnmarshalTypeError.Value ("string", "array", "number 1.5", …).
func jsonValue(v string) string {
	switch {
	case v == "array":
		return "a list"
	case v == "object":
		return "an object"
	case v == "bool":
		return "a boolean"
	case v == "string":
		return "a string"
	case strings.HasPrefix(v, "number"):
		return "a number"
	}
	return v
}

// sampling reads temperature and top_p, which both formats spell alike.
func sampling(fields map[string]json.RawMessage, r *driver.Request) error {
	if err := field(fields, "temperature", &r.Temperature); err != nil {
		return badRequest("temperature", "temperature: want a number")
	}
	if err := field(fields, "top_p", &r.TopP); err != nil {
		return badRequest("top_p", "top_p: want a number")
	}
	return nil
}

// forward hands every field but the gateway's own, as the client sent it,
// to the upstreams that speak the request's format (by their
// ProviderOptions names); the adapters merge them into the body they send.
func forward(r *driver.Request, fields map[string]json.RawMessage, providers []string) {
	if len(providers) == 0 {
		return
	}
	fwd := make(map[string]any, len(fields))
	for k, v := range fields {
		if !gatewayFields[k] {
			fwd[k] = v
		}
	}
	if r.ProviderOptions == nil {
		r.ProviderOptions = make(map[string]any, len(providers))
	}
	for _, p := range providers {
		r.ProviderOptions[p] = fwd
	}
}

// field decodes fields[k] into v when present and not null.
func field(fields map[string]json.RawMessage, k string, v any) error {
	raw, ok := fields[k]
	if !ok || isNull(raw) {
		return nil
	}
	if scalar(raw, v) {
		return nil
	}
	return json.Unmarshal(raw, v)
}

// scalar decodes the common scalars of a request (the route, stream,
// sampling numbers, token counts, plain message text) without
// encoding/json, whose every Unmarshal allocates its decoder state: it
// reports false, having changed nothing, for anything it does not read
// exactly as json.Unmarshal would (escapes, invalid UTF-8, a fraction for
// an integer, a type mismatch), which then goes to json.Unmarshal for the
// value or the error. raw is one valid JSON value (the body was
// validated whole), so a quoted run without a backslash is the string.
func scalar(raw json.RawMessage, v any) bool {
	switch p := v.(type) {
	case *string:
		s, ok := plainString(raw)
		if ok {
			*p = s
		}
		return ok
	case *bool:
		switch string(raw) {
		case "true":
			*p = true
		case "false":
			*p = false
		default:
			return false
		}
		return true
	case **int:
		n, err := strconv.Atoi(string(raw))
		if err != nil {
			return false
		}
		*p = &n
		return true
	case **int64:
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return false
		}
		*p = &n
		return true
	case **float64:
		if len(raw) == 0 || raw[0] == '"' {
			return false
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			return false
		}
		*p = &f
		return true
	}
	return false
}

// plainString returns the JSON string raw holds when it has no escape and
// is valid UTF-8 (json.Unmarshal would replace invalid bytes).
func plainString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') >= 0 || !utf8.Valid(in) {
		return "", false
	}
	return string(in), true
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// wireMessage is one OpenAI chat message, as far as the driver models it.
type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

var errContent = errors.New("content: want a string, a list of content parts, or null")

// text returns the message's text: the string, or its text parts joined
// (other parts, such as images, reach OpenAI-compatible upstreams raw).
func (m *wireMessage) text() (string, error) {
	if len(m.Content) == 0 || isNull(m.Content) {
		return "", nil
	}
	if s, ok := plainString(m.Content); ok {
		return s, nil
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", errContent
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

func (m *wireMessage) driver() (driver.Message, error) {
	text, err := m.text()
	if err != nil {
		return driver.Message{}, err
	}
	switch m.Role {
	case "system", "developer":
		return driver.Message{Role: driver.RoleSystem, Content: []driver.Content{{Text: text}}}, nil
	case "user":
		return driver.Message{Role: driver.RoleUser, Content: []driver.Content{{Text: text}}}, nil
	case "assistant":
		msg := driver.Message{Role: driver.RoleAssistant}
		if text != "" {
			msg.Content = append(msg.Content, driver.Content{Text: text})
		}
		for _, tc := range m.ToolCalls {
			msg.Content = append(msg.Content, driver.Content{ToolCallID: tc.ID, ToolName: tc.Function.Name,
				ToolInput: tc.Function.Arguments})
		}
		return msg, nil
	case "tool":
		if m.ToolCallID == "" {
			return driver.Message{}, errors.New("a tool message needs tool_call_id")
		}
		return driver.Message{Role: driver.RoleTool, Content: []driver.Content{{ToolCallID: m.ToolCallID, ToolResult: text}}}, nil
	case "":
		return driver.Message{}, errors.New("role is required")
	}
	return driver.Message{}, fmt.Errorf("unknown role %q", m.Role)
}

// usageOptions is the stream_options the upstreams get of a client that
// sent raw (an object; asked says whether it asked for usage): the
// client's, asking for usage, which the gateway counts whether or not
// the client gets it (includeUsage). A client that did not send
// stream_options sends none upstream: some OpenAI-compatible servers
// refuse it, and the adapter sends it unasked only to servers known to
// take it (openai.WithStreamUsage).
func usageOptions(raw json.RawMessage, asked bool) json.RawMessage {
	if asked && bytes.Equal(raw, []byte(`{"include_usage":true}`)) {
		return raw
	}
	var so map[string]json.RawMessage
	if json.Unmarshal(raw, &so) != nil || so == nil {
		so = map[string]json.RawMessage{}
	}
	so["include_usage"] = json.RawMessage("true")
	b, err := json.Marshal(so)
	if err != nil {
		return json.RawMessage(`{"include_usage":true}`)
	}
	return b
}
