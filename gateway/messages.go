package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/retryhost/retryhost/driver"
)

// messages serves POST /v1/messages, Anthropic's Messages API, with the
// chat door's rules: the same routing, commit gate, limits, logs and
// metrics, answers and errors in Anthropic's format.
func (g *Gateway) messages(w http.ResponseWriter, r *http.Request) { g.serve(w, r, messagesDoor{}) }

// messagesDoor is Anthropic's Messages API: POST /v1/messages.
type messagesDoor struct{}

func (messagesDoor) newID() string { return newID("msg_rh") }

// parse reads a Messages body; the client's anthropic-beta header (the
// beta features its fields may need) goes to the upstreams too.
func (messagesDoor) parse(body []byte, h http.Header, gen *generation) (*chatRequest, error) {
	cr, err := parseMessages(body, gen.upstreams)
	if err == nil {
		if beta := h.Values("Anthropic-Beta"); len(beta) > 0 {
			cr.req.Headers = http.Header{"Anthropic-Beta": beta}
		}
	}
	return cr, err
}

func (messagesDoor) encoder(id, model string, _ *chatRequest) encoder {
	return &messagesEncoder{id: id, model: model}
}

// appendError appends {"type":"error","error":{"type":…,"message":…}}.
func (messagesDoor) appendError(b []byte, e *apiError) []byte {
	b = append(b, `{"type":"error","error":{"type":`...)
	b = appendJSONString(b, anthropicErrorType(e))
	b = append(b, `,"message":`...)
	b = appendJSONString(b, e.msg)
	if e.code == threadUnsupported {
		b = append(b, `,"details":{"error_code":"`+threadUnsupported+`","unsupported":[`...)
		b = appendJSONString(b, e.param)
		b = append(b, "]}"...)
	}
	return append(b, "}}"...)
}

// threadUnsupported is the error code of a request in a message thread
// (Anthropic's beta: the conversation held by the server between turns),
// which the gateway refuses: the thread is held by the Anthropic account
// that answered its last turn, which a fail-over to another model would
// not reach, and the gateway holds no conversations of its own. Anthropic's
// SDKs read the code in the error's details and send the turn again with
// its whole history, unthreaded (their tool runners do so by default).
const threadUnsupported = "thread_unsupported_request"

// passthrough: an upstream body that is an Anthropic error object.
func (messagesDoor) passthrough(body []byte) bool {
	var v struct {
		Type  string `json:"type"`
		Error *struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	return json.Valid(body) && json.Unmarshal(body, &v) == nil && v.Type == "error" && v.Error != nil && v.Error.Type != ""
}

// anthropicErrorType names e in Anthropic's vocabulary: by the upstream
// failure's class where it tells more than the status, else by the status
// as Anthropic's API uses them.
func anthropicErrorType(e *apiError) string {
	switch {
	case e.class == "overloaded" || e.code == "shutting_down":
		return "overloaded_error"
	case e.class == "rate_limit" || e.status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case e.class == "timeout" || e.status == http.StatusRequestTimeout || e.status == http.StatusGatewayTimeout:
		return "timeout_error"
	}
	switch e.status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if e.status >= 400 && e.status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

// parseMessages reads a Messages API body into the driver's request (the
// fields it models, for every provider). Every field but the gateway's own
// (model, stream, fallbacks) goes, as the client sent it, to Anthropic
// upstreams (anthropic: their ProviderOptions names), so that system
// blocks, images, cache_control, thinking, tool_choice, metadata, top_k
// and fields newer than this code reach them unchanged. The
// OpenAI-compatible, Gemini and Bedrock upstreams of to get the driver's
// fields, and the others that have a translation there
// (toOpenAIFields, toGeminiMessages, toBedrockMessages).
func parseMessages(body []byte, to upstreams) (*chatRequest, error) {
	fields, c, err := parseCommon(body)
	if err != nil {
		return nil, err
	}
	if raw, ok := fields["thread"]; ok && !isNull(raw) {
		return nil, &requestError{param: "thread", code: threadUnsupported, msg: "thread: message threads are not supported by the gateway: " +
			"a thread is held by the one Anthropic account that answered its last turn, which a fail-over to another model would not reach, " +
			"and the gateway holds no conversations of its own; send the turn with its whole history and no thread"}
	}
	r := &c.req
	if raw, ok := fields["system"]; ok && !isNull(raw) {
		text, err := blocksText(raw)
		if err != nil {
			return nil, badRequest("system", "system: want a string or a list of text blocks")
		}
		r.System = text
	}
	type wireMsg struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	var msgs []wireMsg
	if err := field(fields, "messages", &msgs); err != nil {
		return nil, listError[wireMsg]("messages", fields["messages"], err)
	}
	if len(msgs) == 0 {
		return nil, badRequest("messages", "messages: at least one message is required")
	}
	for i := range msgs {
		ms, err := anthropicMessage(msgs[i].Role, msgs[i].Content)
		if err != nil {
			return nil, badRequest(fmt.Sprintf("messages[%d]", i), "messages[%d]: %v", i, err)
		}
		r.Messages = append(r.Messages, ms...)
	}
	type wireTool struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	var tools []wireTool
	if err := field(fields, "tools", &tools); err != nil {
		return nil, listError[wireTool]("tools", fields["tools"], err)
	}
	for _, t := range tools {
		if (t.Type != "" && t.Type != "custom") || t.Name == "" {
			continue // a server tool (web_search, bash…): Anthropic upstreams get it raw
		}
		r.Tools = append(r.Tools, driver.Tool{Name: t.Name, Description: t.Description, Schema: string(t.InputSchema)})
	}
	if r.MaxOutputTokens, err = maxTokens(fields["max_tokens"]); err != nil {
		return nil, err
	}
	if err := sampling(fields, r); err != nil {
		return nil, err
	}
	if err := field(fields, "stop_sequences", &r.StopSequences); err != nil {
		return nil, badRequest("stop_sequences", "stop_sequences: want a list of strings")
	}
	if len(to.anthropic) > 0 {
		if m, ok := unsignedThinkingDropped(fields["messages"]); ok {
			fields["messages"] = m // what Anthropic upstreams get; the driver's messages are read already
		}
	}
	forward(r, fields, to.anthropic)
	if len(to.providers)+len(to.gemini)+len(to.bedrock) == 0 {
		return c, nil
	}
	x, err := readMessagesExtras(fields)
	if err != nil {
		return nil, err
	}
	if len(to.providers) > 0 {
		c.unhonour(to.providers, toOpenAIFields(r, x, to.providers))
	}
	if len(to.gemini) > 0 {
		c.unhonour(to.gemini, toGeminiMessages(r, x, to.gemini))
	}
	if len(to.bedrock) > 0 {
		claude, others := toBedrockMessages(r, x, to.bedrock)
		c.unhonour(to.bedrock, claude)
		c.unhonour(bedrockOthersOf(to.bedrock), others)
	}
	return c, nil
}

// maxTokens reads a Messages request's max_tokens, which Anthropic's API
// requires: a positive integer. The gateway refuses what Anthropic would,
// in its words, before any upstream is reached, so that a request which
// would fail on an Anthropic upstream does not succeed on an OpenAI one
// (and an unbounded answer is never asked for by omission).
func maxTokens(raw json.RawMessage) (int, error) {
	if len(raw) == 0 || isNull(raw) {
		return 0, badRequest("max_tokens", "max_tokens: Field required")
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, badRequest("max_tokens", "max_tokens: Input should be a valid integer")
	}
	if n < 1 {
		return 0, badRequest("max_tokens", "max_tokens: Input should be greater than or equal to 1")
	}
	return n, nil
}

// contentBlock is one block of a message's content, as far as the driver
// models it.
type contentBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// blocks decodes content: a string (one text block) or a list of blocks.
func blocks(raw json.RawMessage) ([]contentBlock, error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []contentBlock{{Type: "text", Text: s}}, nil
	}
	var bs []contentBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, errContentBlocks
	}
	return bs, nil
}

var errContentBlocks = fmt.Errorf("content: want a string or a list of content blocks")

// blocksText returns the text of a string or of a list's text blocks
// (joined by blank lines).
func blocksText(raw json.RawMessage) (string, error) {
	bs, err := blocks(raw)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range bs {
		if c.Type != "text" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(c.Text)
	}
	return b.String(), nil
}

// anthropicMessage maps one Messages API message to the driver's: a user
// message's tool_result blocks become tool messages (before its text), an
// assistant's tool_use blocks tool calls. Images, documents and thinking
// blocks have no place in the driver's request: Anthropic upstreams get
// them raw.
func anthropicMessage(role string, content json.RawMessage) ([]driver.Message, error) {
	bs, err := blocks(content)
	if err != nil {
		return nil, err
	}
	switch role {
	case "user":
		var out []driver.Message
		user := driver.Message{Role: driver.RoleUser}
		for _, c := range bs {
			switch c.Type {
			case "text":
				user.Content = append(user.Content, driver.Content{Text: c.Text})
			case "tool_result":
				if c.ToolUseID == "" {
					return nil, fmt.Errorf("a tool_result block needs tool_use_id")
				}
				res, err := blocksText(c.Content)
				if err != nil {
					return nil, fmt.Errorf("tool_result: %w", err)
				}
				out = append(out, driver.Message{Role: driver.RoleTool,
					Content: []driver.Content{{ToolCallID: c.ToolUseID, ToolResult: res}}})
			}
		}
		if len(user.Content) > 0 || len(out) == 0 {
			out = append(out, user)
		}
		return out, nil
	case "assistant":
		msg := driver.Message{Role: driver.RoleAssistant}
		for _, c := range bs {
			switch c.Type {
			case "text":
				msg.Content = append(msg.Content, driver.Content{Text: c.Text})
			case "tool_use":
				if c.ID == "" || c.Name == "" {
					return nil, fmt.Errorf("a tool_use block needs id and name")
				}
				input := "{}"
				var buf bytes.Buffer
				if len(c.Input) > 0 && json.Compact(&buf, c.Input) == nil {
					input = buf.String()
				}
				msg.Content = append(msg.Content, driver.Content{ToolCallID: c.ID, ToolName: c.Name, ToolInput: input})
			}
		}
		return []driver.Message{msg}, nil
	case "":
		return nil, fmt.Errorf("role is required")
	}
	return nil, fmt.Errorf("unknown role %q (want user or assistant; the system prompt is the system field)", role)
}

// appendAnthropicModels appends the routes in the shape of Anthropic's
// GET /v1/models (one page, has_more false); created (Unix seconds) is
// the policy's load time, as the OpenAI shape's created.
func appendAnthropicModels(b []byte, names []string, created int64) []byte {
	b = append(b, `{"data":[`...)
	for i, n := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendAnthropicModel(b, n, created)
	}
	b = append(b, `],"has_more":false,"first_id":`...)
	if len(names) == 0 {
		b = append(b, `null,"last_id":null}`...)
		return append(b, '\n')
	}
	b = appendJSONString(b, names[0])
	b = append(b, `,"last_id":`...)
	b = appendJSONString(b, names[len(names)-1])
	return append(b, "}\n"...)
}

// appendAnthropicModel appends one route as Anthropic's model object (GET
// /v1/models/{id}, and each entry of the list).
func appendAnthropicModel(b []byte, name string, created int64) []byte {
	b = append(b, `{"type":"model","id":`...)
	b = appendJSONString(b, name)
	b = append(b, `,"display_name":`...)
	b = appendJSONString(b, name)
	b = append(b, `,"created_at":"`...)
	b = time.Unix(created, 0).UTC().AppendFormat(b, time.RFC3339)
	return append(b, `"}`...)
}

// unsignedThinkingDropped returns messages without the thinking blocks
// that carry no signature, and without an assistant message left empty by
// that; ok is false when there is none (messages go as they came).
// Such a block is what an OpenAI-compatible model's reasoning becomes on
// /v1/messages (it has no signature to give); an Anthropic upstream
// refuses a whole request whose history holds one, with a 400 that is
// never failed over, so a conversation that once fell over to such a
// model could not go back to Anthropic. Signed and redacted thinking
// are kept: Anthropic checks them itself.
func unsignedThinkingDropped(messages json.RawMessage) (json.RawMessage, bool) {
	if !bytes.Contains(messages, []byte(`"thinking"`)) {
		return nil, false
	}
	var msgs []map[string]json.RawMessage
	if json.Unmarshal(messages, &msgs) != nil {
		return nil, false
	}
	dropped := false
	out := msgs[:0]
	for _, m := range msgs {
		var bs []json.RawMessage
		if json.Unmarshal(m["content"], &bs) != nil {
			out = append(out, m)
			continue
		}
		kept := bs[:0]
		for _, b := range bs {
			var blk struct {
				Type      string  `json:"type"`
				Signature *string `json:"signature"`
			}
			if json.Unmarshal(b, &blk) == nil && blk.Type == "thinking" && (blk.Signature == nil || *blk.Signature == "") {
				continue
			}
			kept = append(kept, b)
		}
		if len(kept) == len(bs) {
			out = append(out, m)
			continue
		}
		dropped = true
		if len(kept) == 0 && string(m["role"]) == `"assistant"` {
			continue
		}
		c, err := json.Marshal(kept)
		if err != nil {
			return nil, false
		}
		m["content"] = c
		out = append(out, m)
	}
	if !dropped {
		return nil, false
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, false
	}
	return b, true
}
