package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// params translates a driver request (a streaming one asks for the usage
// chunk where the server is known to take stream_options: WithStreamUsage).
//
// A request whose ProviderOptions entry carries the messages (and the
// tools, if it has any) as raw JSON, which is what a gateway forwards, is
// sent as one body written here: the request's own fields, then the entry's
// as they came, in key order (see leanBody). The SDK's reflective encoding
// of the params and its per-field merge (an SJSON pass over the whole body
// for every forwarded field) would build the same object.
func (m *Model) params(req *driver.Request, stream bool) (oai.ChatCompletionNewParams, []option.RequestOption, error) {
	p, fields, lean, err := m.prepare(req, stream)
	if err != nil {
		return p, nil, err
	}
	if lean {
		body, err := leanBody(&p, req.StopSequences, fields, "")
		if err != nil {
			return p, nil, fmt.Errorf("openai: %w", err)
		}
		// The SDK sends params set to raw JSON as they are (compacted and
		// checked); the options (WithParam's fields, "stream") still apply
		// after it.
		return rawParams(body), m.options(req, nil), nil
	}
	return p, m.options(req, fields), nil
}

// modelID is the model id req is sent with: the model's own, or, for a
// model built with driver.AnyModelID, the request's.
func (m *Model) modelID(req *driver.Request) (string, error) {
	if m.id != driver.AnyModelID {
		return m.id, nil
	}
	if req.ModelID == "" {
		return "", errors.New(`openai: the model's id is "*" and the request names none (driver.Request.ModelID)`)
	}
	return req.ModelID, nil
}

// prepare translates what of a driver request is not raw JSON into params,
// and returns its ProviderOptions entry and whether the body can be
// written by leanBody: when the entry carries the messages (and the
// tools, if the request has any), all raw, as a gateway forwards them.
func (m *Model) prepare(req *driver.Request, stream bool) (oai.ChatCompletionNewParams, map[string]any, bool, error) {
	p := oai.ChatCompletionNewParams{}
	if req == nil {
		return p, nil, false, errors.New("openai: nil request")
	}
	id, err := m.modelID(req)
	if err != nil {
		return p, nil, false, err
	}
	p.Model = id
	fields, err := m.entry(req)
	if err != nil {
		return p, nil, false, err
	}
	if req.Continue != nil {
		if fields, err = m.continueFields(fields, req.Continue); err != nil {
			return p, nil, false, err
		}
	}
	// A ProviderOptions entry's messages or tools replace the request's in
	// the body (a gateway forwards a client's own): not built for nothing.
	_, rawMessages := fields["messages"]
	_, rawTools := fields["tools"]
	lean := m.leanable(req, fields)
	if !rawMessages {
		if err := m.addMessages(&p, req); err != nil {
			return p, nil, false, err
		}
	}
	if !rawTools {
		if err := addTools(&p, req.Tools); err != nil {
			return p, nil, false, err
		}
	}
	m.sampling(&p, req)
	if _, ok := fields["max_tokens"]; (ok || m.paramSet["max_tokens"]) && !m.legacy {
		// The caller's own max_tokens replaces MaxOutputTokens: never both.
		p.MaxCompletionTokens = param.Opt[int64]{}
	}
	if stream && m.usage {
		p.StreamOptions.IncludeUsage = param.NewOpt(true)
	}
	return p, fields, lean, nil
}

// addMessages adds the system prompt, the messages and a continuation's
// prefill to p.
func (m *Model) addMessages(p *oai.ChatCompletionNewParams, req *driver.Request) error {
	if req.System != "" {
		p.Messages = append(p.Messages, oai.SystemMessage(req.System))
	}
	for i := range req.Messages {
		msgs, err := messages(&req.Messages[i])
		if err != nil {
			return fmt.Errorf("openai: message %d: %w", i, err)
		}
		p.Messages = append(p.Messages, msgs...)
	}
	if req.Continue != nil {
		p.Messages = append(p.Messages, m.continuation(req.Continue)...)
	}
	return nil
}

// addTools adds the tools as function tools, each schema as JSON.
func addTools(p *oai.ChatCompletionNewParams, tools []driver.Tool) error {
	for _, t := range tools {
		def := oai.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			def.Description = param.NewOpt(t.Description)
		}
		if t.Schema != "" {
			var schema map[string]any
			if err := json.Unmarshal([]byte(t.Schema), &schema); err != nil {
				return fmt.Errorf("openai: tool %q: schema: %w", t.Name, err)
			}
			def.Parameters = schema
		}
		p.Tools = append(p.Tools, oai.ChatCompletionFunctionTool(def))
	}
	return nil
}

// sampling sets the output limit (max_tokens for a legacy server), the
// sampling settings and the stop sequences.
func (m *Model) sampling(p *oai.ChatCompletionNewParams, req *driver.Request) {
	if req.MaxOutputTokens > 0 {
		if m.legacy {
			p.MaxTokens = param.NewOpt(int64(req.MaxOutputTokens))
		} else {
			p.MaxCompletionTokens = param.NewOpt(int64(req.MaxOutputTokens))
		}
	}
	if req.Temperature != nil {
		p.Temperature = param.NewOpt(*req.Temperature)
	}
	if req.TopP != nil {
		p.TopP = param.NewOpt(*req.TopP)
	}
	if req.Seed != nil {
		p.Seed = param.NewOpt(*req.Seed)
	}
	if len(req.StopSequences) > 0 {
		p.Stop.OfStringArray = req.StopSequences
	}
}

// passThrough returns the request options for req's Headers and its
// ProviderOptions entry (top-level body fields, set in key order), then
// the model's WithParam fields (last, so they win), and that entry. The
// options' slice has room for extraOpts more, which the caller appends.
func (m *Model) passThrough(req *driver.Request) ([]option.RequestOption, map[string]any, error) {
	fields, err := m.entry(req)
	if err != nil {
		return nil, nil, err
	}
	return m.options(req, fields), fields, nil
}

// entry returns req's ProviderOptions entry for the model's provider.
func (m *Model) entry(req *driver.Request) (map[string]any, error) {
	po, ok := req.ProviderOptions[m.provider]
	if !ok {
		return nil, nil
	}
	fields, ok := po.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("openai: ProviderOptions[%q] is %T, want map[string]any", m.provider, po)
	}
	return fields, nil
}

// options returns the request options for req's Headers and fields (top-
// level body fields, set in key order; nil when the body carries them
// already), then the model's WithParam fields (last, so they win), with
// room for extraOpts more.
func (m *Model) options(req *driver.Request, fields map[string]any) []option.RequestOption {
	n := len(fields) + len(m.params2) + extraOpts
	for _, vs := range req.Headers {
		n += len(vs)
	}
	opts := make([]option.RequestOption, 0, n)
	for k, vs := range req.Headers {
		for _, v := range vs {
			opts = append(opts, option.WithHeaderAdd(k, v))
		}
	}
	if len(fields) > 0 {
		var buf [16]string // a request's forwarded fields are seldom more
		keys := buf[:0]
		for k := range fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			opts = append(opts, option.WithJSONSet(adapter.JSONKey(k), fields[k]))
		}
	}
	return append(opts, m.params2...)
}

// extraOpts is how many request options the calls append to passThrough's
// (Stream: the response's address and the SSE middleware).
const extraOpts = 2

// normalizeSSE is the SSE middleware every stream installs, made once.
var normalizeSSE = option.WithMiddleware(adapter.NormalizeSSE)

func messages(msg *driver.Message) ([]oai.ChatCompletionMessageParamUnion, error) {
	switch msg.Role {
	case driver.RoleSystem:
		return []oai.ChatCompletionMessageParamUnion{oai.SystemMessage(joinText(msg.Content))}, nil
	case driver.RoleUser:
		return []oai.ChatCompletionMessageParamUnion{oai.UserMessage(joinText(msg.Content))}, nil
	case driver.RoleAssistant:
		a := oai.ChatCompletionAssistantMessageParam{}
		if t := joinText(msg.Content); t != "" {
			a.Content.OfString = param.NewOpt(t)
		}
		for _, c := range msg.Content {
			if c.ToolName == "" {
				continue
			}
			a.ToolCalls = append(a.ToolCalls, oai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{
					ID: c.ToolCallID,
					Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name: c.ToolName, Arguments: orEmptyObject(c.ToolInput),
					},
				},
			})
		}
		return []oai.ChatCompletionMessageParamUnion{{OfAssistant: &a}}, nil
	case driver.RoleTool:
		var out []oai.ChatCompletionMessageParamUnion
		for _, c := range msg.Content {
			if c.ToolCallID == "" {
				return nil, errors.New("tool result without ToolCallID")
			}
			out = append(out, oai.ToolMessage(c.ToolResult, c.ToolCallID))
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown role %q", msg.Role)
}

func joinText(cs []driver.Content) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(c.Text)
	}
	return b.String()
}

func orEmptyObject(s string) string {
	if strings.TrimSpace(s) == "" {
		return "{}"
	}
	return s
}
