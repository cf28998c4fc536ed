package openai

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

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
	usage     bool // WithStreamUsage's, else whether the server is known to accept stream_options
	sdkChunks bool // decode every chunk with the SDK (tests compare both paths)
	sdkBody   bool // encode every body with the SDK (tests compare both paths)
	client    oai.Client
	direct    directPath // sends what the SDK would, without its per-request work (direct.go)
	host      string     // the server it calls, for telemetry
	port      int
	scope     string // RateLimitScope's
	account   string // Account's
}

// New returns the chat model id (such as "gpt-4o-mini"), configured by opts.
// It fails on an empty id or a base URL that is not an absolute http(s) URL.
func New(id string, opts ...Option) (*Model, error) {
	c := config{}
	for _, o := range opts {
		o(&c)
	}
	if err := c.resolve(id); err != nil {
		return nil, err
	}
	sdk, err := c.clientOptions()
	if err != nil {
		return nil, err
	}
	params, paramSet, err := c.requestParams()
	if err != nil {
		return nil, err
	}
	key, err := adapter.ModelKey("openai", c.provider, id, c.key, c.keySet)
	if err != nil {
		return nil, err
	}
	host, port, scope := c.server(id)
	account := c.account()
	usage := c.azure != nil || host == "api.openai.com" || strings.HasSuffix(host, ".openai.azure.com")
	if c.streamUsage != nil {
		usage = *c.streamUsage
	}
	return &Model{
		usage:     usage,
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
		account:   account,
	}, nil
}

// resolve names the provider (openai, azure, or WithProvider's) and checks
// the id and the options that exclude each other.
func (c *config) resolve(id string) error {
	switch {
	case c.providerSet && c.provider == "":
		return errors.New("openai: empty provider name")
	case c.providerSet:
	case c.azure != nil:
		c.provider = "azure"
	default:
		c.provider = "openai"
	}
	if strings.TrimSpace(id) == "" {
		return errors.New("openai: empty model id")
	}
	if c.upstreamJSON && c.responsesAPI {
		return errors.New("openai: WithUpstreamJSON is for Chat Completions; it cannot be used with WithResponsesAPI (the Responses API is always streamed)")
	}
	if c.upstreamJSON && c.rawChunks {
		return errors.New("openai: WithUpstreamJSON cannot be used with WithRawChunks: a non-streamed answer has no chat.completion.chunk to emit (WithChunkFields works with both)")
	}
	if c.maxRetries < 0 {
		return fmt.Errorf("openai: negative max retries %d", c.maxRetries)
	}
	return nil
}

// clientOptions returns the SDK client's options: retries, the endpoint
// (Azure's deployment path and api-version), the key, the HTTP client and
// the headers, then WithRequestOptions'.
func (c *config) clientOptions() ([]option.RequestOption, error) {
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
	if c.noAuth {
		sdk = append(sdk, option.WithHeaderDel("authorization"))
	}
	return append(sdk, c.sdkOpts...), nil
}

// requestParams returns WithParam's fields as request options, applied
// after each request's own fields, and their names.
func (c *config) requestParams() ([]option.RequestOption, map[string]bool, error) {
	var params []option.RequestOption
	paramSet := map[string]bool{}
	for _, p := range c.params {
		paramSet[p.name] = true
		if err := adapter.CheckParam("openai", p.name); err != nil {
			return nil, nil, err
		}
		params = append(params, option.WithJSONSet(p.name, p.value))
	}
	return params, paramSet, nil
}

// server returns the address the model calls, for telemetry, and its rate
// limit scope: WithRateLimitScope's, or the provider, endpoint, key and
// model (Azure's deployment) it counts against.
func (c *config) server(id string) (string, int, string) {
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
	return host, port, scope
}

// account names the upstream account the model calls: the provider, the
// base URL, a hash of the API key and of the headers (an OpenAI-Project
// or OpenAI-Organization header picks a project); "" on Azure, whose
// deployment path serves no stored responses.
func (c *config) account() string {
	if c.azure != nil {
		return ""
	}
	base := cmp.Or(c.baseURL, os.Getenv("OPENAI_BASE_URL"), "https://api.openai.com/v1")
	h := sha256.New()
	h.Write([]byte(cmp.Or(c.apiKey, os.Getenv("OPENAI_API_KEY"))))
	hs := slices.Clone(c.headers)
	slices.SortFunc(hs, func(a, b [2]string) int { return cmp.Compare(strings.ToLower(a[0]), strings.ToLower(b[0])) })
	for _, kv := range hs {
		h.Write([]byte{0})
		h.Write([]byte(strings.ToLower(kv[0]) + ":" + kv[1]))
	}
	return c.provider + " " + strings.TrimRight(base, "/") + " " + hex.EncodeToString(h.Sum(nil)[:8])
}

// Account names the upstream account the model calls: the provider, the
// base URL, and a hash of the API key and the headers, never the key
// itself. Two models with one Account reach the same stored responses
// (the Responses API's store, previous_response_id, background mode),
// so a gateway may fail over between them a request that refers to one.
// It is "" on Azure (WithAzure), whose deployment path serves none.
func (m *Model) Account() string { return m.account }

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

// newSource is a chat stream's state before its first event. Its tool-call
// map is made on the first tool call: most streams have none, and a held
// stream would keep an empty map for nothing (TestNewSourceAllocs).
func (m *Model) newSource() *source {
	return &source{provider: m.provider, raw: m.raw, fields: m.fields}
}
