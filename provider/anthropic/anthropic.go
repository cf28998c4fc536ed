package anthropic

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// provider is the adapter's provider name: the prefix of Key, ProviderError.Provider
// and the Request.ProviderOptions entry it reads.
const provider = "anthropic"

// MaxTemperature is the Messages API's highest temperature: a request's
// Temperature above it is sent as it, with a Warning.
const MaxTemperature = 1.0

// DefaultMaxTokens is sent as max_tokens when the request sets no
// MaxOutputTokens: the Messages API requires one.
const DefaultMaxTokens = 4096

// Option configures a Model.
type Option func(*config)

type config struct {
	scope       string
	scopeSet    bool
	apiKey      string
	baseURL     string
	provider    string
	providerSet bool
	key         string
	keySet      bool
	headers     [][2]string
	params      []param2
	httpClient  *http.Client
	maxRetries  int
	maxTokens   int
	rawChunks   bool
	unmapped    bool // WithUnmappedEvents
	sdkTraces   bool
	sdkOpts     []option.RequestOption
}

// WithSDKTracing lets anthropic-sdk-go emit its own OpenTelemetry spans:
// one client span per API call, through the global TracerProvider (or
// the one given with option.WithTracerProvider in [WithRequestOptions]),
// with trace-context headers on the requests. Default: off. retryhost's
// provider/otel already records each attempt as a client span with the
// GenAI attributes, so the SDK's span would duplicate it, and with
// ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE=content in the environment
// the SDK's span carries the prompt and the output, which retryhost
// promises never to record. Turn it on only for the SDK's own view of a
// call, knowing that the environment decides what it records.
func WithSDKTracing() Option { return func(c *config) { c.sdkTraces = true } }

// WithAPIKey sets the API key. Default: the SDK's, the ANTHROPIC_API_KEY
// environment variable.
func WithAPIKey(key string) Option { return func(c *config) { c.apiKey = key } }

// WithRateLimitScope names the rate limits the model's calls count
// against (driver.RateLimitScoper): with a driver.Cooldown, a Retry-After
// on one model keeps every model of its scope out until then. Default:
// the provider, the base URL, a hash of the API key and the model id, so
// that two declarations of one upstream model on one account share it.
// Set one name on models whose provider counts per key rather than per
// model; "" turns it off.
func WithRateLimitScope(s string) Option {
	return func(c *config) { c.scope, c.scopeSet = s, true }
}

// WithBaseURL points the model at another server (a proxy, a gateway).
// Default: the SDK's, https://api.anthropic.com or ANTHROPIC_BASE_URL.
func WithBaseURL(u string) Option { return func(c *config) { c.baseURL = u } }

// WithProvider names the provider, for the model's key
// ("<provider>/<model>") and Provider: a second Anthropic account or a
// gateway speaking the Messages API. Default: "anthropic".
func WithProvider(name string) Option {
	return func(c *config) { c.provider, c.providerSet = name, true }
}

// WithKey sets the model's key: its identity in the driver (rules, attempt
// budgets, stickiness, cooldown and telemetry tell models apart by key).
// Give each deployment its own key to declare two of one model, such as
// one model on two Anthropic accounts. Default: "<provider>/<model id>".
func WithKey(key string) Option { return func(c *config) { c.key, c.keySet = key, true } }

// WithHeader sends a header with every request of the model (a beta flag,
// a gateway's routing header…); calling it again for the same name
// replaces the value. Default: none.
func WithHeader(name, value string) Option {
	return func(c *config) { c.headers = append(c.headers, [2]string{name, value}) }
}

type param2 struct {
	name  string
	value any
}

// WithParam sets a top-level field of every request body to value (any
// JSON-encodable value), overriding what the Request says: "temperature",
// "max_tokens", "top_k", a field this adapter does not map… name must be a
// plain field name (letters, digits, '_', '-'). Default: none.
func WithParam(name string, value any) Option {
	return func(c *config) { c.params = append(c.params, param2{name, value}) }
}

// WithHTTPClient sets the HTTP client. Default: the SDK's (http.DefaultClient).
// Either way the adapter follows a redirect only within the base URL's
// origin (scheme, host and port): elsewhere it would carry the prompt and
// the x-api-key header.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.httpClient = hc } }

// WithMaxRetries turns the SDK's own retries on. Default: 0, because the
// retryhost driver owns retries and fail-over.
func WithMaxRetries(n int) Option { return func(c *config) { c.maxRetries = n } }

// WithDefaultMaxTokens sets max_tokens for requests without
// MaxOutputTokens. Default: DefaultMaxTokens.
func WithDefaultMaxTokens(n int) Option { return func(c *config) { c.maxTokens = n } }

// WithRawChunks makes streams also emit every stream event the SDK decodes
// (it drops pings):
// a KindRaw part whose Raw is the SDK's ant.MessageStreamEventUnion, before
// the parts mapped from it. For fields this adapter does not map (signature
// deltas, newer block types). Raw parts never commit a stream under the
// default commit rule. Default: off.
func WithRawChunks() Option { return func(c *config) { c.rawChunks = true } }

// WithUnmappedEvents is WithRawChunks without the events whose whole
// content the parts carry: a text block's text_delta, a thinking block's
// thinking_delta and a tool_use block's input_json_delta, most of a
// stream, are not emitted as raw parts; every other event is (message and
// block starts and stops, signature_delta, citations_delta, the blocks
// and deltas this adapter does not map, message_delta). It is what
// retryhost serve's Messages door relays from (policy.Options.RawChunks
// turns it on), at a fraction of the cost: the SDK's event is large, and
// boxed for every raw part. With WithRawChunks too, it wins. Default: off.
func WithUnmappedEvents() Option {
	return func(c *config) { c.rawChunks, c.unmapped = true, true }
}

// WithRequestOptions passes SDK request options through, after the
// model's own (so they win): headers, beta flags, middleware, timeouts…
func WithRequestOptions(opts ...option.RequestOption) Option {
	return func(c *config) { c.sdkOpts = append(c.sdkOpts, opts...) }
}

// Model is a driver.Model over the Messages API. It is safe for concurrent
// use.
type Model struct {
	id        string
	provider  string
	key       string
	params2   []option.RequestOption // WithParam's, after the request's own
	maxTokens int64
	raw       bool
	unmapped  bool
	sdkEvents bool // read events through the SDK's decoder (tests compare both paths)
	client    ant.Client
	host      string // the server it calls, for telemetry
	port      int
	scope     string // RateLimitScope's
}

// New returns the model id (such as "claude-sonnet-4-5"), configured by
// opts. It fails on an empty id, a base URL that is not an absolute http(s)
// URL, or a negative setting.
func New(id string, opts ...Option) (*Model, error) {
	c := config{maxTokens: DefaultMaxTokens}
	for _, o := range opts {
		o(&c)
	}
	if strings.TrimSpace(id) == "" {
		return nil, errors.New("anthropic: empty model id")
	}
	if c.maxRetries < 0 {
		return nil, fmt.Errorf("anthropic: negative max retries %d", c.maxRetries)
	}
	var err error
	if c.provider, err = adapter.ProviderName(provider, provider, c.provider, c.providerSet); err != nil {
		return nil, err
	}
	key, err := adapter.ModelKey(provider, c.provider, id, c.key, c.keySet)
	if err != nil {
		return nil, err
	}
	if c.maxTokens <= 0 {
		return nil, fmt.Errorf("anthropic: default max tokens %d must be positive", c.maxTokens)
	}
	sdk := []option.RequestOption{option.WithMaxRetries(c.maxRetries)}
	if !c.sdkTraces {
		sdk = append(sdk, option.WithoutOpenTelemetry()) // see WithSDKTracing
	}
	if c.baseURL != "" {
		if err := adapter.CheckBaseURL("anthropic", c.baseURL); err != nil {
			return nil, err
		}
		sdk = append(sdk, option.WithBaseURL(c.baseURL))
	}
	if c.apiKey != "" {
		sdk = append(sdk, option.WithAPIKey(c.apiKey))
	}
	// anthropic-sdk-go follows any redirect, and net/http keeps the
	// x-api-key header across hosts: redirects stay in the base URL's
	// origin (an SDK client given through WithRequestOptions is the
	// caller's).
	sdk = append(sdk, option.WithHTTPClient(adapter.SameOriginRedirects("anthropic", c.httpClient)))
	for _, h := range c.headers {
		if err := adapter.CheckHeader("anthropic", h[0]); err != nil {
			return nil, err
		}
		sdk = append(sdk, option.WithHeader(h[0], h[1]))
	}
	var params []option.RequestOption // applied after each request's own fields
	for _, p := range c.params {
		if err := adapter.CheckParam("anthropic", p.name); err != nil {
			return nil, err
		}
		params = append(params, option.WithJSONSet(p.name, p.value))
	}
	sdk = append(sdk, c.sdkOpts...)
	base := cmp.Or(c.baseURL, os.Getenv("ANTHROPIC_BASE_URL"), "https://api.anthropic.com") // as the SDK resolves it
	host, port := adapter.ServerAddress(base)
	scope := c.scope
	if !c.scopeSet {
		scope = adapter.RateLimitScope(c.provider, base, cmp.Or(c.apiKey, os.Getenv("ANTHROPIC_API_KEY")), id)
	}
	return &Model{scope: scope, id: id, provider: c.provider, key: key, params2: params, maxTokens: int64(c.maxTokens), raw: c.rawChunks, unmapped: c.unmapped,
		client: ant.NewClient(sdk...), host: host, port: port}, nil
}

// ServerAddress returns the host and port of the server the model calls
// (its base URL's), which provider/otel records as server.address and
// server.port.
func (m *Model) ServerAddress() (host string, port int) { return m.host, m.port }

// RateLimitScope returns the rate limits the model's calls count against
// (driver.RateLimitScoper; see WithRateLimitScope).
func (m *Model) RateLimitScope() string { return m.scope }

// Key returns the model's key: WithKey's, else "<provider>/<model id>",
// such as "anthropic/claude-sonnet-4-5".
func (m *Model) Key() string { return m.key }

// Provider returns the provider's name ("anthropic" unless WithProvider
// says otherwise), for telemetry whatever the key.
func (m *Model) Provider() string { return m.provider }

// ModelID returns the model id given to New.
func (m *Model) ModelID() string { return m.id }

// Generate makes one non-streaming call.
func (m *Model) Generate(ctx context.Context, req *driver.Request) (*driver.Response, error) {
	params, opts, warnings, err := m.params(req)
	if err != nil {
		return nil, err
	}
	var raw *http.Response
	msg, err := m.client.Messages.New(ctx, params, append(opts, option.WithResponseInto(&raw))...)
	if err != nil {
		return nil, openError(ctx, err, raw)
	}
	resp := &driver.Response{
		Meta:     abi.ResponseMeta{ID: msg.ID, ModelID: msg.Model},
		Usage:    usage(msg.Usage.InputTokens, msg.Usage.OutputTokens, msg.Usage.CacheReadInputTokens, msg.Usage.CacheCreationInputTokens, msg.Usage.OutputTokensDetails.ThinkingTokens),
		Finish:   stopReason(string(msg.StopReason)),
		Warnings: warnings,
	}
	if raw != nil {
		resp.Headers = raw.Header
	}
	for i, b := range msg.Content {
		id := strconv.Itoa(i)
		switch b.Type {
		case "text":
			resp.Content = append(resp.Content, abi.Part{Kind: abi.KindTextDelta, ID: id, Delta: b.Text})
			for _, c := range b.Citations {
				if src := citedSource(c.Type, c.URL, c.Title, c.Source, c.DocumentTitle); src != nil {
					resp.Content = append(resp.Content, abi.Part{Kind: abi.KindSource, ID: id, Source: src})
				}
			}
		case "web_search_tool_result":
			result := b.JSON.Content.Raw()
			if result == "" {
				result = "null"
			}
			resp.Content = append(resp.Content, abi.Part{Kind: abi.KindToolResult, ID: b.ToolUseID, Tool: &abi.ToolInfo{
				Name: "web_search", Result: result, ProviderExecuted: true, IsError: string(b.Content.Type) != ""}})
			for _, r := range b.Content.OfWebSearchResultBlockArray {
				resp.Content = append(resp.Content, abi.Part{Kind: abi.KindSource, ID: b.ToolUseID, Source: &abi.Source{URL: r.URL, Title: r.Title}})
			}
		case "thinking":
			resp.Content = append(resp.Content, abi.Part{Kind: abi.KindReasoningDelta, ID: id, Delta: b.Thinking})
		case "tool_use", "server_tool_use":
			resp.Content = append(resp.Content, abi.Part{Kind: abi.KindToolCall, ID: b.ID, Tool: &abi.ToolInfo{
				Name: b.Name, Input: compact(b.Input), ProviderExecuted: b.Type == "server_tool_use"}})
		}
	}
	if msg.StopReason == ant.StopReasonRefusal && !slices.ContainsFunc(resp.Content, func(p abi.Part) bool { return hasOutput(&p) }) {
		return nil, adapter.Refusal(provider, "refusal", msg.StopDetails.Explanation)
	}
	return resp, nil
}

// Stream opens one streaming call. An HTTP error is returned here, as a
// *driver.ProviderError; errors after the response started come from Recv.
func (m *Model) Stream(ctx context.Context, req *driver.Request) (driver.Stream, error) {
	params, opts, warnings, err := m.params(req)
	if err != nil {
		return nil, err
	}
	var raw *http.Response
	st := m.client.Messages.NewStreaming(ctx, params, append(opts, option.WithResponseInto(&raw), normalizeSSE)...)
	if err := st.Err(); err != nil {
		_ = st.Close()
		return nil, openError(ctx, err, raw)
	}
	if err := adapter.JSONError(provider, raw); err != nil {
		// A 200 with a JSON error object in place of the events.
		_ = st.Close()
		return nil, err
	}
	src := &source{st: st, blocks: map[int64]*block{}, raw: m.raw, unmapped: m.unmapped, resp: raw}
	if eb, ok := bodyOf(raw).(adapter.EventBody); ok && !m.sdkEvents {
		// The SDK built and sent the request and holds the body (its
		// Close closes it); the events are read here. A traced body is
		// no EventBody: its span follows the SDK's decoder.
		src.body = eb
		src.skip, _ = eb.(interface{ SkipMalformed([]byte) bool })
	}
	s := adapter.NewStream(ctx, provider, src, abi.Part{Kind: abi.KindStreamStart, Warnings: warnings})
	if raw != nil {
		s.SetHeader(raw.Header)
		s.SetBody(raw.Body) // a body that opens with a JSON error in place of events fails with it
	}
	return s, nil
}

// bodyOf is a response's body, nil without a response.
func bodyOf(r *http.Response) io.ReadCloser {
	if r == nil {
		return nil
	}
	return r.Body
}

// openError maps the error of a call that got no usable response.
func openError(ctx context.Context, err error, raw *http.Response) error {
	if ctx.Err() != nil {
		return adapter.CtxError(ctx)
	}
	var api *ant.Error
	if errors.As(err, &api) && api.Response != nil {
		body := adapter.ReadBody(api.Response)
		return adapter.HTTPError(provider, api.StatusCode, api.Response.Header, body, string(api.Type()), "", api.Message, err)
	}
	if raw != nil && raw.StatusCode >= 400 {
		body := adapter.ReadBody(raw)
		return adapter.HTTPError(provider, raw.StatusCode, raw.Header, body, "", "", strings.TrimSpace(string(body)), err)
	}
	return adapter.TransportError(ctx, provider, false, err)
}

// streamError maps an error that ended a stream: an "error" event becomes a
// ProviderError with Status 0.
func streamError(err error) error {
	var api *ant.Error
	if errors.As(err, &api) && api.StatusCode < 400 {
		raw := []byte(api.RawJSON())
		msg := api.Message
		if msg == "" && !json.Valid(raw) {
			msg = strings.ToValidUTF8(strings.TrimSpace(string(raw[:min(len(raw), 200)])), "") // a proxy's text
		}
		return adapter.EventError(provider, string(api.Type()), "", msg, raw, err)
	}
	return err
}

// params translates a driver request.
func (m *Model) params(req *driver.Request) (ant.MessageNewParams, []option.RequestOption, []abi.Warning, error) {
	p := ant.MessageNewParams{Model: ant.Model(m.id), MaxTokens: m.maxTokens}
	if req == nil {
		return p, nil, nil, errors.New("anthropic: nil request")
	}
	if m.id == driver.AnyModelID {
		if req.ModelID == "" {
			return p, nil, nil, errors.New(`anthropic: the model's id is "*" and the request names none (driver.Request.ModelID)`)
		}
		p.Model = ant.Model(req.ModelID)
	}
	if req.MaxOutputTokens > 0 {
		p.MaxTokens = int64(req.MaxOutputTokens)
	}
	if req.System != "" {
		p.System = []ant.TextBlockParam{{Text: req.System}}
	}
	if err := addMessages(&p, req); err != nil {
		return p, nil, nil, err
	}
	if req.Continue != nil {
		if err := prefill(&p, req, provider); err != nil { // the entry params reads below
			return p, nil, nil, err
		}
	}
	for _, t := range req.Tools {
		tp, err := toolParam(t)
		if err != nil {
			return p, nil, nil, err
		}
		p.Tools = append(p.Tools, ant.ToolUnionParam{OfTool: tp})
	}
	p.StopSequences = req.StopSequences
	var warnings []abi.Warning
	if req.Seed != nil {
		warnings = append(warnings, abi.Warning{Type: "unsupported", Feature: "seed", Message: "the Messages API has no seed; it was not sent"})
	}
	if t := req.Temperature; t != nil && *t > MaxTemperature {
		// OpenAI's and Gemini's range goes to 2: a request written for them
		// gets the Messages API's most random setting (requestOptions), not a 400.
		warnings = append(warnings, abi.Warning{Type: "compatibility", Feature: "temperature",
			Message: fmt.Sprintf("temperature %g is above the Messages API's maximum of 1; 1 was sent", *t)})
	}
	fields, err := forwardedFields(req)
	if err != nil {
		return p, nil, nil, err
	}
	return p, m.requestOptions(req, fields), warnings, nil
}

// addMessages adds req's messages to p: a system message's text to the
// system prompt, the others as turns.
func addMessages(p *ant.MessageNewParams, req *driver.Request) error {
	for i := range req.Messages {
		msg := &req.Messages[i]
		if msg.Role == driver.RoleSystem {
			for _, c := range msg.Content {
				p.System = append(p.System, ant.TextBlockParam{Text: c.Text})
			}
			continue
		}
		mp, err := message(msg)
		if err != nil {
			return fmt.Errorf("anthropic: message %d: %w", i, err)
		}
		// The results of parallel tool calls (one RoleTool message each, as
		// Chat Completions sends them) go in one user message, as the API
		// asks: results split over several turns teach the model to stop
		// calling tools in parallel.
		if msg.Role == driver.RoleTool && i > 0 && req.Messages[i-1].Role == driver.RoleTool && len(p.Messages) > 0 {
			if last := p.Messages[len(p.Messages)-1].OfUser; last != nil && mp.OfUser != nil {
				last.Content = append(last.Content, mp.OfUser.Content...)
				continue
			}
		}
		p.Messages = append(p.Messages, mp)
	}
	return nil
}

// toolParam translates a tool, its JSON schema split into the fields the
// SDK names and the rest.
func toolParam(t driver.Tool) (*ant.ToolParam, error) {
	tp := ant.ToolParam{Name: t.Name, InputSchema: ant.ToolInputSchemaParam{}}
	if t.Description != "" {
		tp.Description = param.NewOpt(t.Description)
	}
	if t.Schema == "" {
		return &tp, nil
	}
	var schema map[string]any
	if err := json.Unmarshal([]byte(t.Schema), &schema); err != nil {
		return nil, fmt.Errorf("anthropic: tool %q: schema: %w", t.Name, err)
	}
	tp.InputSchema.Properties = schema["properties"]
	if req, ok := schema["required"].([]any); ok {
		for _, r := range req {
			if s, ok := r.(string); ok {
				tp.InputSchema.Required = append(tp.InputSchema.Required, s)
			}
		}
	}
	for k, v := range schema {
		if k != "properties" && k != "required" && k != "type" {
			if tp.InputSchema.ExtraFields == nil {
				tp.InputSchema.ExtraFields = map[string]any{}
			}
			tp.InputSchema.ExtraFields[k] = v
		}
	}
	return &tp, nil
}

// forwardedFields are the request's ProviderOptions for this provider:
// the body fields a gateway forwards, with a continuation's prefill after
// the client's messages.
func forwardedFields(req *driver.Request) (map[string]any, error) {
	var fields map[string]any
	if po, ok := req.ProviderOptions[provider]; ok {
		if fields, ok = po.(map[string]any); !ok {
			return nil, fmt.Errorf("anthropic: ProviderOptions[%q] is %T, want map[string]any", provider, po)
		}
	}
	if req.Continue != nil && fields["messages"] != nil {
		// A gateway forwards the client's messages: the prefill goes after them.
		var err error
		if fields, err = prefillRaw(fields, req.Continue); err != nil {
			return nil, err
		}
	}
	return fields, nil
}

// requestOptions are the request's options beside its params: sampling
// settings the SDK has no field for, headers, forwarded fields (in key
// order), then the model's own.
func (m *Model) requestOptions(req *driver.Request, fields map[string]any) []option.RequestOption {
	// One allocation for every option of the request, with room for what
	// Generate and Stream append (the response's address, the SSE middleware).
	n := 2 + len(fields) + len(m.params2) + 2
	for _, vs := range req.Headers {
		n += len(vs)
	}
	opts := make([]option.RequestOption, 0, n)
	// SDK v2 has no fields for these sampling settings; the API still takes them.
	if req.Temperature != nil {
		opts = append(opts, option.WithJSONSet("temperature", min(*req.Temperature, MaxTemperature)))
	}
	if req.TopP != nil {
		opts = append(opts, option.WithJSONSet("top_p", *req.TopP))
	}
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

// normalizeSSE is the SSE middleware every stream installs, made once.
var normalizeSSE = option.WithMiddleware(adapter.NormalizeSSE)

func message(msg *driver.Message) (ant.MessageParam, error) {
	var blocks []ant.ContentBlockParamUnion
	switch msg.Role {
	case driver.RoleUser:
		for _, c := range msg.Content {
			if c.Text != "" {
				blocks = append(blocks, ant.NewTextBlock(c.Text))
			}
		}
		return ant.NewUserMessage(blocks...), nil
	case driver.RoleAssistant:
		for _, c := range msg.Content {
			if c.Text != "" {
				blocks = append(blocks, ant.NewTextBlock(c.Text))
			}
			if c.ToolName != "" {
				blocks = append(blocks, ant.NewToolUseBlock(c.ToolCallID, json.RawMessage(orEmptyObject(c.ToolInput)), c.ToolName))
			}
		}
		return ant.NewAssistantMessage(blocks...), nil
	case driver.RoleTool:
		for _, c := range msg.Content {
			if c.ToolCallID == "" {
				return ant.MessageParam{}, errors.New("tool result without ToolCallID")
			}
			blocks = append(blocks, ant.NewToolResultBlock(c.ToolCallID, c.ToolResult, false))
		}
		return ant.NewUserMessage(blocks...), nil
	}
	return ant.MessageParam{}, fmt.Errorf("unknown role %q", msg.Role)
}

// hasOutput reports whether p is output the caller would keep, by the
// driver's default commit rule: empty text and thinking blocks are not.
func hasOutput(p *abi.Part) bool { return driver.CommitOnOutput.IsContent(p) }

// compact returns a tool input as compact JSON text, "{}" when empty.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil || b.Len() == 0 {
		return orEmptyObject(string(raw))
	}
	return b.String()
}

func orEmptyObject(s string) string {
	if strings.TrimSpace(s) == "" {
		return "{}"
	}
	return s
}

// usage maps Anthropic's counts. InputTokens is the whole prompt: Anthropic's
// input_tokens counts only the uncached part, so the cache reads and writes
// are added back (they are also reported on their own).
func usage(input, output, cacheRead, cacheWrite, thinking int64) abi.Usage {
	return abi.Usage{
		InputTokens:      input + cacheRead + cacheWrite,
		OutputTokens:     output,
		CacheReadTokens:  cacheRead,
		CacheWriteTokens: cacheWrite,
		ReasoningTokens:  thinking,
	}
}

func stopReason(raw string) abi.FinishReason {
	r := abi.FinishReason{Raw: raw}
	switch raw {
	case "end_turn", "stop_sequence":
		r.Unified = abi.ReasonStop
	case "max_tokens", "model_context_window_exceeded":
		r.Unified = abi.ReasonLength
	case "tool_use":
		r.Unified = abi.ReasonToolCalls
	case "refusal":
		r.Unified = abi.ReasonRefusal
	case "":
		r.Unified = abi.ReasonUnknown
	default: // pause_turn, …
		r.Unified = abi.ReasonOther
	}
	return r
}
