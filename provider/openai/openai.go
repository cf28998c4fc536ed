package openai

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// Option configures a Model.
type Option func(*config)

type config struct {
	scope           string
	scopeSet        bool
	apiKey          string
	baseURL         string
	provider        string
	providerSet     bool
	key             string
	keySet          bool
	headers         [][2]string
	params          []param2
	azure           *azureConfig
	httpClient      *http.Client
	maxRetries      int
	legacyMaxTokens bool
	prefix          bool // WithAssistantPrefix
	responsesAPI    bool
	rawChunks       bool
	chunkFields     bool
	upstreamJSON    bool
	noAuth          bool // withoutAuthorization
	sdkOpts         []option.RequestOption
}

// withoutAuthorization sends no Authorization header (the SDK's default
// reads OPENAI_API_KEY): a policy's model without a key. Unlike the same
// option through WithRequestOptions, it leaves the model on the direct
// path (direct.go), as the header it removes is removed from the template.
func withoutAuthorization() Option { return func(c *config) { c.noAuth = true } }

// WithAPIKey sets the API key. Default: the SDK's, the OPENAI_API_KEY
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

// WithBaseURL points the model at an OpenAI-compatible server, such as
// "http://localhost:11434/v1". Default: the SDK's, https://api.openai.com/v1
// or the OPENAI_BASE_URL environment variable.
func WithBaseURL(u string) Option { return func(c *config) { c.baseURL = u } }

// WithProvider names the provider, for the model's key ("<provider>/<model>"),
// ProviderError.Provider and the Request.ProviderOptions entry the model
// reads. Default: "openai". Set it for compatible servers ("groq", "vllm"…).
func WithProvider(name string) Option {
	return func(c *config) { c.provider, c.providerSet = name, true }
}

// WithKey sets the model's key: its identity in the driver (rules, attempt
// budgets, stickiness, cooldown and telemetry tell models apart by key).
// Give each deployment its own key to declare two of one model, such as
// gpt-4o in two regions or on Azure and OpenAI directly. Default:
// "<provider>/<model id>".
func WithKey(key string) Option { return func(c *config) { c.key, c.keySet = key, true } }

// WithHeader sends a header with every request of the model (an
// OpenRouter "HTTP-Referer", a gateway's routing header…); calling it
// again for the same name replaces the value. Default: none.
func WithHeader(name, value string) Option {
	return func(c *config) { c.headers = append(c.headers, [2]string{name, value}) }
}

type param2 struct {
	name  string
	value any
}

// WithParam sets a top-level field of every request body to value (any
// JSON-encodable value), overriding what the Request says: "temperature",
// "max_completion_tokens", "reasoning_effort", a compatible server's own
// extension… name must be a plain field name (letters, digits, '_', '-').
// Default: none.
func WithParam(name string, value any) Option {
	return func(c *config) { c.params = append(c.params, param2{name, value}) }
}

type azureConfig struct{ endpoint, deployment, apiVersion string }

// WithAzure speaks to an Azure OpenAI deployment: requests go to
// {endpoint}/openai/deployments/{deployment}/chat/completions?api-version={apiVersion}
// with the key (WithAPIKey) in the api-key header rather than as a bearer
// token. The model id given to New is what telemetry reports as the model;
// the deployment decides what answers. It replaces WithBaseURL and sets the
// provider to "azure" unless WithProvider says otherwise. For Azure's v1
// API ({endpoint}/openai/v1/, no api-version) use WithBaseURL instead.
func WithAzure(endpoint, deployment, apiVersion string) Option {
	return func(c *config) { c.azure = &azureConfig{endpoint, deployment, apiVersion} }
}

// WithHTTPClient sets the HTTP client. Default: the SDK's.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.httpClient = hc } }

// WithMaxRetries turns the SDK's own retries on. Default: 0, because the
// retryhost driver owns retries and fail-over; SDK retries underneath it
// would multiply attempts and hide errors from conditions.
func WithMaxRetries(n int) Option { return func(c *config) { c.maxRetries = n } }

// WithLegacyMaxTokens sends Request.MaxOutputTokens as "max_tokens" instead of
// "max_completion_tokens", for compatible servers that only know the old
// name. Default: false.
func WithLegacyMaxTokens() Option { return func(c *config) { c.legacyMaxTokens = true } }

// WithResponsesAPI makes the model call the Responses API (POST
// /responses), where new OpenAI features ship first, instead of Chat
// Completions. Requests, parts, errors and error classes map as for Chat
// Completions, so rules and fail-over work the same: text, reasoning
// (summaries and reasoning text), function calls, url citations as
// sources, declared refusals, usage, and in-stream "error",
// "response.failed" and "response.incomplete" events. Seed and stop
// sequences do not exist there and come back as warnings;
// WithLegacyMaxTokens does not apply (MaxOutputTokens is sent as
// max_output_tokens), nor does WithAzure (on Azure, point WithBaseURL at
// {endpoint}/openai/v1/). With WithRawChunks the raw parts hold
// responses.ResponseStreamEventUnion. Default: Chat Completions.
func WithResponsesAPI() Option { return func(c *config) { c.responsesAPI = true } }

// WithRawChunks makes streams also emit every chat.completion.chunk as it
// arrived: a KindRaw part whose Raw is the SDK's oai.ChatCompletionChunk,
// before the parts mapped from it. For fields this adapter does not map
// (logprobs, provider extensions). Raw parts never commit a stream under
// the default commit rule. Default: off.
func WithRawChunks() Option { return func(c *config) { c.rawChunks = true } }

// WithChunkFields makes Chat Completions streams also emit, before the
// parts mapped from each chat.completion.chunk, a KindRaw part whose Raw
// is a ChunkFields: the fields this adapter does not map (the system
// fingerprint, the service tier, choice 0's logprobs), read without the
// SDK's decoding of the whole chunk, which WithRawChunks pays for. Raw
// parts never commit a stream under the default commit rule. Default: off.
func WithChunkFields() Option { return func(c *config) { c.chunkFields = true } }

// WithUpstreamJSON makes a stream whose request commits at its end
// (driver.CommitsAtEnd: the caller shows nothing before the whole answer,
// as a gateway's non-streaming client) ask the upstream for a
// non-streamed chat completion ("stream": false) and replay it as the
// parts a one-chunk stream of the same answer gives, in the same order:
// stream start, the ChunkFields with WithChunkFields, the metadata,
// reasoning, text, a refusal, tool calls, the finish with its usage. It
// costs the upstream and this adapter a third less CPU than a stream of
// the same answer. A request that commits at its first content is
// streamed as before.
//
// What it changes for the driver: the upstream sends nothing before the
// whole answer, so the first-content deadline bounds the whole answer,
// the gap deadline has nothing to watch, a hedge's delay counts to the
// whole answer, and transforms see each block as one delta. The body is
// read through a cap, MaxAnswer. It cannot be used with WithResponsesAPI
// or WithRawChunks (there is no SDK chunk to emit): New refuses both.
// Default: off.
func WithUpstreamJSON() Option { return func(c *config) { c.upstreamJSON = true } }

// MaxAnswer caps the body of a non-streamed answer (WithUpstreamJSON),
// which is read whole before anything is decoded: past it the stream fails
// with a ProviderError of Type adapter.LimitType, class server, not
// retryable (a fail-over rule can still move on). 32 MiB, the driver's
// default bound on what a stream that commits at its end holds
// (driver.DefaultMaxAnswerBytes).
const MaxAnswer = 32 << 20

// ChunkFields are the fields of one chat.completion.chunk that the adapter
// does not map to parts (WithChunkFields), as the upstream sent them.
type ChunkFields struct {
	SystemFingerprint string // "" when absent or null
	ServiceTier       string // "" when absent or null
	// Choice 0's delta text, which its logprobs describe.
	Content, Refusal string
	// Choice 0's logprobs object, and that object's content and refusal
	// arrays, as raw JSON; "" when absent or null.
	Logprobs, LogprobsContent, LogprobsRefusal string
}

// WithRequestOptions passes SDK request options through, after the
// model's own (so they win): headers, middleware, timeouts…
func WithRequestOptions(opts ...option.RequestOption) Option {
	return func(c *config) { c.sdkOpts = append(c.sdkOpts, opts...) }
}

// Model is a driver.Model over the Chat Completions API, or the Responses
// API with WithResponsesAPI. It is safe for concurrent use.
type Model struct {
	prefix    bool // WithAssistantPrefix: continuations as a prefix message
	id        string
	provider  string
	key       string
	params2   []option.RequestOption // WithParam's, after the request's own
	paramSet  map[string]bool        // WithParam's names
	legacy    bool
	responses bool // WithResponsesAPI
	raw       bool
	fields    bool // WithChunkFields
	upJSON    bool // WithUpstreamJSON
	sdkChunks bool // decode every chunk with the SDK (tests compare both paths)
	sdkBody   bool // encode every body with the SDK (tests compare both paths)
	client    oai.Client
	direct    directPath // sends what the SDK would, without its per-request work (direct.go)
	host      string     // the server it calls, for telemetry
	port      int
	scope     string // RateLimitScope's
}

// New returns the chat model id (such as "gpt-4o-mini"), configured by opts.
// It fails on an empty id or a base URL that is not an absolute http(s) URL.
func New(id string, opts ...Option) (*Model, error) {
	c := config{}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.providerSet && c.provider == "":
		return nil, errors.New("openai: empty provider name")
	case c.providerSet:
	case c.azure != nil:
		c.provider = "azure"
	default:
		c.provider = "openai"
	}
	if strings.TrimSpace(id) == "" {
		return nil, errors.New("openai: empty model id")
	}
	if c.upstreamJSON && c.responsesAPI {
		return nil, errors.New("openai: WithUpstreamJSON is for Chat Completions; it cannot be used with WithResponsesAPI (the Responses API is always streamed)")
	}
	if c.upstreamJSON && c.rawChunks {
		return nil, errors.New("openai: WithUpstreamJSON cannot be used with WithRawChunks: a non-streamed answer has no chat.completion.chunk to emit (WithChunkFields works with both)")
	}
	if c.maxRetries < 0 {
		return nil, fmt.Errorf("openai: negative max retries %d", c.maxRetries)
	}
	sdk := []option.RequestOption{option.WithMaxRetries(c.maxRetries)}
	if c.baseURL != "" {
		if err := adapter.CheckBaseURL("openai", c.baseURL); err != nil {
			return nil, err
		}
		sdk = append(sdk, option.WithBaseURL(c.baseURL))
	}
	if az := c.azure; az != nil {
		if c.responsesAPI {
			// Azure serves the Responses API outside the deployments path.
			return nil, errors.New("openai: WithAzure is for Chat Completions; for the Responses API on Azure use WithBaseURL(endpoint + \"/openai/v1/\") with the deployment as the model id")
		}
		if c.baseURL != "" {
			return nil, errors.New("openai: WithAzure and WithBaseURL both set the endpoint")
		}
		if err := adapter.CheckBaseURL("openai", az.endpoint); err != nil {
			return nil, err
		}
		if strings.TrimSpace(az.deployment) == "" || strings.TrimSpace(az.apiVersion) == "" {
			return nil, errors.New("openai: WithAzure needs a deployment and an api-version")
		}
		sdk = append(sdk,
			option.WithBaseURL(strings.TrimSuffix(az.endpoint, "/")+"/openai/deployments/"+url.PathEscape(az.deployment)+"/"),
			option.WithQuery("api-version", az.apiVersion))
		if c.apiKey != "" {
			// Azure reads the key from api-key; a bearer token would send
			// an OpenAI key (the SDK's environment default) to Azure.
			sdk = append(sdk, option.WithAPIKey(""), option.WithHeader("api-key", c.apiKey))
		}
		sdk = append(sdk, option.WithHeaderDel("authorization"))
	} else if c.apiKey != "" {
		sdk = append(sdk, option.WithAPIKey(c.apiKey))
	}
	if c.httpClient != nil {
		sdk = append(sdk, option.WithHTTPClient(c.httpClient))
	}
	for _, h := range c.headers {
		if err := adapter.CheckHeader("openai", h[0]); err != nil {
			return nil, err
		}
		sdk = append(sdk, option.WithHeader(h[0], h[1]))
	}
	var params []option.RequestOption // applied after each request's own fields
	paramSet := map[string]bool{}
	for _, p := range c.params {
		paramSet[p.name] = true
		if err := adapter.CheckParam("openai", p.name); err != nil {
			return nil, err
		}
		params = append(params, option.WithJSONSet(p.name, p.value))
	}
	if c.noAuth {
		sdk = append(sdk, option.WithHeaderDel("authorization"))
	}
	sdk = append(sdk, c.sdkOpts...)
	key := c.provider + "/" + id
	if c.keySet {
		if err := adapter.CheckKey("openai", c.key); err != nil {
			return nil, err
		}
		key = c.key
	}
	base := cmp.Or(c.baseURL, os.Getenv("OPENAI_BASE_URL"), "https://api.openai.com/v1") // as the SDK resolves it
	if c.azure != nil {
		base = c.azure.endpoint
	}
	host, port := adapter.ServerAddress(base)
	scope := c.scope
	if !c.scopeSet {
		id := id
		if c.azure != nil {
			id = c.azure.deployment // Azure counts per deployment
		}
		scope = adapter.RateLimitScope(c.provider, base, cmp.Or(c.apiKey, os.Getenv("OPENAI_API_KEY")), id)
	}
	return &Model{
		scope:     scope,
		id:        id,
		provider:  c.provider,
		key:       key,
		params2:   params,
		paramSet:  paramSet,
		legacy:    c.legacyMaxTokens,
		prefix:    c.prefix,
		responses: c.responsesAPI,
		raw:       c.rawChunks,
		fields:    c.chunkFields,
		upJSON:    c.upstreamJSON,
		client:    oai.NewClient(sdk...),
		direct:    directPath{ok: len(c.sdkOpts) == 0 && c.maxRetries == 0 && len(params) == 0 && !c.responsesAPI, hc: c.httpClient},
		host:      host,
		port:      port,
	}, nil
}

// RateLimitScope returns the rate limits the model's calls count against
// (driver.RateLimitScoper; see WithRateLimitScope).
func (m *Model) RateLimitScope() string { return m.scope }

// Key returns the model's key: WithKey's, else "<provider>/<model id>",
// such as "openai/gpt-4o-mini".
func (m *Model) Key() string { return m.key }

// ServerAddress returns the host and port of the server the model calls
// (its base URL's), which provider/otel records as server.address and
// server.port.
func (m *Model) ServerAddress() (host string, port int) { return m.host, m.port }

// Provider returns the provider's name ("openai", WithProvider's, "azure"
// with WithAzure): the Request.ProviderOptions entry the model reads, and
// what telemetry reports whatever the key.
func (m *Model) Provider() string { return m.provider }

// ModelID returns the model id given to New.
func (m *Model) ModelID() string { return m.id }

// ResponsesAPI reports whether the model calls the Responses API
// (WithResponsesAPI) rather than Chat Completions: a caller forwarding a
// Chat Completions body's fields through ProviderOptions must not hand them
// to it.
func (m *Model) ResponsesAPI() bool { return m.responses }

// Generate makes one non-streaming call.
func (m *Model) Generate(ctx context.Context, req *driver.Request) (*driver.Response, error) {
	if m.responses {
		return m.generateResponses(ctx, req)
	}
	params, opts, err := m.params(req, false)
	if err != nil {
		return nil, err
	}
	var raw *http.Response
	cc, err := m.client.Chat.Completions.New(ctx, params, append(opts, option.WithResponseInto(&raw))...)
	if err != nil {
		return nil, m.openError(ctx, err, raw)
	}
	resp := &driver.Response{
		Meta: abi.ResponseMeta{ID: cc.ID, ModelID: cc.Model, Timestamp: unix(cc.Created)},
	}
	if raw != nil {
		resp.Headers = raw.Header
	}
	if cc.JSON.Usage.Valid() {
		resp.Usage = usage(&cc.Usage)
	}
	if len(cc.Choices) == 0 {
		return nil, adapter.EventError(m.provider, "server_error", "", "response has no choices", []byte(cc.RawJSON()), nil)
	}
	ch := &cc.Choices[0]
	msg := &ch.Message
	if r := reasoningText(msg.JSON.ExtraFields); r != "" {
		resp.Content = append(resp.Content, abi.Part{Kind: abi.KindReasoningDelta, ID: reasoningID, Delta: r})
	}
	if msg.Content != "" {
		resp.Content = append(resp.Content, abi.Part{Kind: abi.KindTextDelta, ID: textID, Delta: msg.Content})
	}
	ids := make(map[string]bool, len(msg.ToolCalls)) // a set, not a scan of the parts: an answer's calls are not capped here
	for i, tc := range msg.ToolCalls {
		id := toolCallID(tc.ID, int64(i), func(id string) bool { return ids[id] })
		ids[id] = true
		resp.Content = append(resp.Content, abi.Part{Kind: abi.KindToolCall, ID: id,
			Tool: &abi.ToolInfo{Name: tc.Function.Name, Input: orEmptyObject(tc.Function.Arguments)}})
	}
	resp.Finish = finishReason(ch.FinishReason)
	if msg.Refusal != "" {
		if len(resp.Content) == 0 {
			return nil, adapter.Refusal(m.provider, ch.FinishReason, msg.Refusal)
		}
		resp.Content = append(resp.Content, abi.Part{Kind: abi.KindTextDelta, ID: refusalID, Delta: msg.Refusal})
		resp.Finish = abi.FinishReason{Unified: abi.ReasonRefusal, Raw: "refusal"}
	}
	return resp, nil
}

// Stream opens one streaming call. An HTTP error is returned here, as a
// *driver.ProviderError; errors after the response started come from Recv.
func (m *Model) Stream(ctx context.Context, req *driver.Request) (driver.Stream, error) {
	if m.responses {
		return m.streamResponses(ctx, req)
	}
	if m.upJSON && driver.CommitsAtEnd(ctx) {
		return m.streamJSON(ctx, req)
	}
	if !m.raw && !m.sdkChunks {
		if body, t, err := m.directBody(req, true); err != nil {
			return nil, err
		} else if t != nil {
			return m.streamDirect(ctx, t, req, body)
		}
	}
	params, opts, err := m.params(req, true)
	if err != nil {
		return nil, err
	}
	var raw *http.Response
	st := m.client.Chat.Completions.NewStreaming(ctx, params, append(opts, option.WithResponseInto(&raw), normalizeSSE)...)
	if err := st.Err(); err != nil {
		_ = st.Close()
		return nil, m.openError(ctx, err, raw)
	}
	if err := adapter.JSONError(m.provider, raw); err != nil {
		// A 200 with a JSON error object in place of the events.
		_ = st.Close()
		return nil, err
	}
	src := m.newSource()
	if !m.raw && !m.sdkChunks && raw != nil && raw.Body != nil {
		// The SDK built and sent the request; the events are read here,
		// leanly, and only the chunks the lean decoder declines go
		// through the SDK's decoding. Its stream is not kept: its
		// decoder reads and closes raw.Body, which the source closes.
		src.ev = &events{body: raw.Body}
	} else {
		src.st = st
	}
	s := adapter.NewStream(ctx, m.provider, src, abi.Part{Kind: abi.KindStreamStart})
	if raw != nil {
		s.SetHeader(raw.Header)
		s.SetBody(raw.Body) // a body that opens with a JSON error in place of events fails with it
	}
	return s, nil
}

// openError maps the error of a call that got no usable response.
func (m *Model) openError(ctx context.Context, err error, raw *http.Response) error {
	if ctx.Err() != nil {
		return adapter.CtxError(ctx)
	}
	var api *oai.Error
	if errors.As(err, &api) && api.Response != nil {
		body := adapter.ReadBody(api.Response)
		return adapter.HTTPError(m.provider, api.StatusCode, api.Response.Header, body, api.Type, api.Code, api.Message, err)
	}
	if raw != nil && raw.StatusCode >= 400 {
		// An error body the SDK could not parse (a proxy's HTML page, a
		// compatible server's own JSON shape): keep the status and body.
		body := adapter.ReadBody(raw)
		return adapter.HTTPError(m.provider, raw.StatusCode, raw.Header, body, "", "", strings.TrimSpace(string(body)), err)
	}
	return adapter.TransportError(ctx, m.provider, false, err)
}

const (
	textID      = "text-0"
	reasoningID = "reasoning-0"
	refusalID   = "refusal-0"
)

// params translates a driver request (a streaming one asks for the usage
// chunk).
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

// prepare translates what of a driver request is not raw JSON into params,
// and returns its ProviderOptions entry and whether the body can be
// written by leanBody: when the entry carries the messages (and the
// tools, if the request has any), all raw, as a gateway forwards them.
func (m *Model) prepare(req *driver.Request, stream bool) (oai.ChatCompletionNewParams, map[string]any, bool, error) {
	p := oai.ChatCompletionNewParams{Model: m.id}
	if req == nil {
		return p, nil, false, errors.New("openai: nil request")
	}
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
	if req.System != "" && !rawMessages {
		p.Messages = append(p.Messages, oai.SystemMessage(req.System))
	}
	for i := range req.Messages {
		if rawMessages {
			break
		}
		msgs, err := messages(&req.Messages[i])
		if err != nil {
			return p, nil, false, fmt.Errorf("openai: message %d: %w", i, err)
		}
		p.Messages = append(p.Messages, msgs...)
	}
	if req.Continue != nil && !rawMessages {
		p.Messages = append(p.Messages, m.continuation(req.Continue)...)
	}
	for _, t := range req.Tools {
		if rawTools {
			break
		}
		def := oai.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			def.Description = param.NewOpt(t.Description)
		}
		if t.Schema != "" {
			var schema map[string]any
			if err := json.Unmarshal([]byte(t.Schema), &schema); err != nil {
				return p, nil, false, fmt.Errorf("openai: tool %q: schema: %w", t.Name, err)
			}
			def.Parameters = schema
		}
		p.Tools = append(p.Tools, oai.ChatCompletionFunctionTool(def))
	}
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
	if _, ok := fields["max_tokens"]; (ok || m.paramSet["max_tokens"]) && !m.legacy {
		// The caller's own max_tokens replaces MaxOutputTokens: never both.
		p.MaxCompletionTokens = param.Opt[int64]{}
	}
	if stream {
		p.StreamOptions.IncludeUsage = param.NewOpt(true)
	}
	return p, fields, lean, nil
}

// leanable reports whether leanBody can write req's body, whose
// ProviderOptions entry is fields: the entry carries the messages (and the
// tools, if the request has any), all raw, as a gateway forwards them.
func (m *Model) leanable(req *driver.Request, fields map[string]any) bool {
	_, rawMessages := fields["messages"]
	_, rawTools := fields["tools"]
	return !m.sdkBody && rawMessages && (rawTools || len(req.Tools) == 0) && allRaw(fields)
}

// rawParams returns chat params that the SDK encodes as body.
// param.Override would do it, but it allocates the params (1.2 KiB) to set
// them: a pooled one is set and copied out instead.
func rawParams(body []byte) oai.ChatCompletionNewParams {
	pp := paramsPool.Get().(*oai.ChatCompletionNewParams)
	param.SetJSON(body, pp)
	p := *pp
	*pp = oai.ChatCompletionNewParams{}
	paramsPool.Put(pp)
	return p
}

var paramsPool = sync.Pool{New: func() any { return new(oai.ChatCompletionNewParams) }}

// allRaw reports whether every value of a ProviderOptions entry is raw
// JSON.
func allRaw(fields map[string]any) bool {
	for _, v := range fields {
		if _, ok := v.(json.RawMessage); !ok {
			return false
		}
	}
	return true
}

// leanBody writes the chat request body of p, whose messages and tools are
// in fields: p's own fields that fields does not name (the ones params
// sets: model, the token cap, sampling, seed, stop, stream_options), then
// every field of fields, in key order, with its raw value. The object is
// the one the SDK would encode p into and then merge fields into, member
// for member; only the order of its members differs.
//
// stream, when not empty, is the raw value of a "stream" member written in
// place of any the fields have (as the SDK's option sets it).
func leanBody(p *oai.ChatCompletionNewParams, stop []string, fields map[string]any, stream string) ([]byte, error) {
	n := 128
	for k, v := range fields {
		n += len(k) + len(v.(json.RawMessage)) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	member := func(k string) bool {
		if _, ok := fields[k]; ok {
			return false
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendKey(b, k)
		return true
	}
	if member("model") {
		b = appendString(b, p.Model)
	}
	for _, f := range [...]struct {
		k string
		v param.Opt[int64]
	}{{"max_tokens", p.MaxTokens}, {"max_completion_tokens", p.MaxCompletionTokens}, {"seed", p.Seed}} {
		if f.v.Valid() && member(f.k) {
			b = strconv.AppendInt(b, f.v.Value, 10)
		}
	}
	for _, f := range [...]struct {
		k string
		v param.Opt[float64]
	}{{"temperature", p.Temperature}, {"top_p", p.TopP}} {
		if f.v.Valid() && member(f.k) {
			var err error
			if b, err = appendFloat(b, f.v.Value); err != nil {
				return nil, fmt.Errorf("%s: %w", f.k, err)
			}
		}
	}
	if len(stop) > 0 && member("stop") {
		s, err := json.Marshal(stop)
		if err != nil {
			return nil, fmt.Errorf("stop: %w", err)
		}
		b = append(b, s...)
	}
	if p.StreamOptions.IncludeUsage.Valid() && member("stream_options") {
		b = append(b, `{"include_usage":`...)
		b = strconv.AppendBool(b, p.StreamOptions.IncludeUsage.Value)
		b = append(b, '}')
	}
	if stream != "" {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, `"stream":`...)
		b = append(b, stream...)
	}
	var buf [16]string // a request's forwarded fields are seldom more
	keys := buf[:0]
	for k := range fields {
		if stream == "" || k != "stream" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendKey(b, k)
		if v := fields[k].(json.RawMessage); len(v) > 0 {
			b = append(b, v...)
		} else {
			b = append(b, "null"...) // as json.Marshal writes an empty RawMessage
		}
	}
	return append(b, '}'), nil
}

// appendKey appends k as a JSON string and a colon.
func appendKey(b []byte, k string) []byte { return append(appendString(b, k), ':') }

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 0x20 && c < 0x80 && c != '"' && c != '\\'
	}
	if plain {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}

// appendFloat appends f as encoding/json writes a float64.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, fmt.Errorf("unsupported value %v", f)
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' { // 1e-07 → 1e-7
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
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

func unix(sec int64) time.Time {
	if sec == 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0).UTC()
}

func usage(u *oai.CompletionUsage) abi.Usage {
	return abi.Usage{
		InputTokens:      u.PromptTokens,
		OutputTokens:     u.CompletionTokens,
		CacheReadTokens:  u.PromptTokensDetails.CachedTokens,
		CacheWriteTokens: u.PromptTokensDetails.CacheWriteTokens,
		ReasoningTokens:  u.CompletionTokensDetails.ReasoningTokens,
	}
}

func finishReason(raw string) abi.FinishReason {
	r := abi.FinishReason{Raw: raw}
	switch raw {
	case "stop":
		r.Unified = abi.ReasonStop
	case "length":
		r.Unified = abi.ReasonLength
	case "content_filter":
		r.Unified = abi.ReasonContentFilter
	case "tool_calls", "function_call":
		r.Unified = abi.ReasonToolCalls
	case "":
		r.Unified = abi.ReasonUnknown
	default:
		r.Unified = abi.ReasonOther
	}
	return r
}

// reasoningText reads the "reasoning_content" (DeepSeek, vLLM) or
// "reasoning" (OpenRouter, Ollama) field that compatible servers add.
func reasoningText[F interface{ Raw() string }](extra map[string]F) string {
	for _, k := range [...]string{"reasoning_content", "reasoning"} {
		if f, ok := extra[k]; ok {
			var s string
			if json.Unmarshal([]byte(f.Raw()), &s) == nil && s != "" {
				return s
			}
		}
	}
	return ""
}

// streamError maps an error event inside the stream ({"error": {…}}).
func streamError(provider string, err error) error {
	var se *ssestream.StreamError
	if !errors.As(err, &se) {
		return err
	}
	var body struct {
		Error struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(se.Event.Data, &body)
	code := adapter.RawCode(body.Error.Code)
	msg := body.Error.Message
	if msg == "" {
		msg = se.Message
	}
	return adapter.EventError(provider, body.Error.Type, code, msg, bytes.TrimSpace(se.Event.Data), err)
}

// newSource is a chat stream's state before its first event. Its tool-call
// map is made on the first tool call: most streams have none, and a held
// stream would keep an empty map for nothing (TestNewSourceAllocs).
func (m *Model) newSource() *source {
	return &source{provider: m.provider, raw: m.raw, fields: m.fields}
}
