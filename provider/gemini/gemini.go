package gemini

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"

	"cloud.google.com/go/auth/credentials"
	"cloud.google.com/go/auth/httptransport"
	"google.golang.org/genai"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// provider is the adapter's default provider name: the prefix of Key,
// ProviderError.Provider and the Request.ProviderOptions entry it reads.
const provider = "gemini"

// The default endpoints, as the SDK resolves them.
const (
	googleAIBase = "https://generativelanguage.googleapis.com/"
	vertexBase   = "https://aiplatform.googleapis.com/"
)

// MaxStopSequences is the most stop sequences the Gemini API takes: a
// request with more is sent with none, and a Warning.
const MaxStopSequences = 5

// Option configures a Model.
type Option func(*config)

type config struct {
	apiKey            string
	baseURL           string
	provider          string
	providerSet       bool
	key               string
	keySet            bool
	vertex            bool
	project, location string
	headers           [][2]string
	params            map[string]any
	httpClient        *http.Client
	adcOver           bool // withCredentials
}

// WithAPIKey sets the API key, sent in the x-goog-api-key header (Google
// AI; Vertex AI's express mode). Default: none; a Google AI model needs
// one.
func WithAPIKey(key string) Option { return func(c *config) { c.apiKey = key } }

// WithBaseURL points the model at another endpoint (a proxy, a test
// server). Default: Google AI's, or Vertex AI's with WithVertex.
func WithBaseURL(u string) Option { return func(c *config) { c.baseURL = u } }

// WithProvider names the provider in keys, errors and ProviderOptions.
// Default: "gemini".
func WithProvider(name string) Option {
	return func(c *config) { c.provider, c.providerSet = name, true }
}

// WithKey sets the model's key. Default: "<provider>/<model id>".
func WithKey(key string) Option { return func(c *config) { c.key, c.keySet = key, true } }

// WithVertex calls Vertex AI instead of Google AI: the model is
// projects/PROJECT/locations/LOCATION/publishers/google/models/ID. Without
// an API key (express mode) the calls are authorised by the Application
// Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's, the
// metadata server), or by the client given with WithHTTPClient, which
// must then carry them.
func WithVertex(project, location string) Option {
	return func(c *config) { c.vertex, c.project, c.location = true, project, location }
}

// withCredentials makes a Vertex AI model without an API key add the
// Application Default Credentials over WithHTTPClient's client, which
// carries none: a policy's models share the program's client.
func withCredentials() Option { return func(c *config) { c.adcOver = true } }

// WithHeader adds a header to every request.
func WithHeader(name, value string) Option {
	return func(c *config) { c.headers = append(c.headers, [2]string{name, value}) }
}

// WithParam sets a top-level field of every request body (such as
// "generationConfig" or "safetySettings"), over the request's own. An
// object is merged into the request's object of that name.
func WithParam(name string, value any) Option {
	return func(c *config) {
		if c.params == nil {
			c.params = map[string]any{}
		}
		c.params[name] = value
	}
}

// WithHTTPClient sets the HTTP client. Default: a new one over
// http.DefaultTransport (with WithVertex and no API key: one that adds the
// Application Default Credentials).
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.httpClient = hc } }

// Model is a Gemini model over Google AI or Vertex AI. It is safe for
// concurrent use.
type Model struct {
	id, key, provider, scope string
	path                     string // the model as the SDK names it
	client                   *genai.Client
	params                   map[string]any
}

var (
	_ driver.Model           = (*Model)(nil)
	_ driver.Described       = (*Model)(nil)
	_ driver.RateLimitScoper = (*Model)(nil)
)

// New returns the model id ("gemini-2.5-flash") of Google AI, or with
// WithVertex of Vertex AI.
func New(id string, opts ...Option) (*Model, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	var key string
	var err error
	if c.provider, key, err = adapter.Names(provider, id, c.provider, c.providerSet, c.key, c.keySet); err != nil {
		return nil, err
	}
	if c.baseURL != "" {
		if err := adapter.CheckBaseURL("gemini", c.baseURL); err != nil {
			return nil, err
		}
		if !strings.HasSuffix(c.baseURL, "/") {
			c.baseURL += "/"
		}
	}
	hdr, err := adapter.Headers("gemini", c.headers)
	if err != nil {
		return nil, err
	}
	for name := range c.params {
		if err := adapter.CheckParam("gemini", name); err != nil {
			return nil, err
		}
	}
	cc := &genai.ClientConfig{APIKey: c.apiKey, Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: c.baseURL, Headers: hdr}}
	base := cmp.Or(c.baseURL, googleAIBase)
	hc := c.httpClient
	if c.vertex {
		if c.apiKey == "" && (c.project == "" || c.location == "") {
			return nil, errors.New("gemini: Vertex AI needs a project and a location, or an API key")
		}
		cc.Backend, cc.Project, cc.Location = genai.BackendVertexAI, c.project, c.location
		if c.apiKey != "" { // express mode: the key names the project
			cc.Project, cc.Location = "", ""
		}
		if c.baseURL == "" {
			base = vertexBase
			if c.apiKey == "" && c.location != "global" {
				base = "https://" + c.location + "-aiplatform.googleapis.com/"
			}
		}
		if c.apiKey == "" && (hc == nil || c.adcOver) {
			var err error
			if hc, err = adcClient(hc); err != nil {
				return nil, err
			}
		}
	} else if c.apiKey == "" {
		return nil, errors.New("gemini: Google AI needs an API key (WithAPIKey)")
	}
	cc.HTTPOptions.BaseURL = base
	cc.HTTPClient = adapter.Recording(adapter.SameOriginRedirects("gemini", hc))
	client, err := genai.NewClient(context.Background(), cc)
	if err != nil {
		return nil, fmt.Errorf("gemini: %w", err)
	}
	return &Model{id: id, key: key, provider: c.provider, path: id, client: client, params: c.params,
		scope: adapter.RateLimitScope(c.provider, base, c.apiKey+c.project, id)}, nil
}

// adcClient is an HTTP client that authorises Vertex AI calls with the
// Application Default Credentials: as the SDK builds it, or over base's
// transport (base itself is left as it is).
func adcClient(base *http.Client) (*http.Client, error) {
	creds, err := credentials.DetectDefault(&credentials.DetectOptions{
		Scopes: []string{"https://www.googleapis.com/auth/cloud-platform"}})
	if err != nil {
		return nil, fmt.Errorf("gemini: Vertex AI without an API key needs Application Default Credentials: %w", err)
	}
	if base != nil {
		hc := *base
		if err := httptransport.AddAuthorizationMiddleware(&hc, creds); err != nil {
			return nil, fmt.Errorf("gemini: %w", err)
		}
		return &hc, nil
	}
	hc, err := httptransport.NewClient(&httptransport.Options{Credentials: creds})
	if err != nil {
		return nil, fmt.Errorf("gemini: %w", err)
	}
	return hc, nil
}

// Key returns the model's key.
func (m *Model) Key() string { return m.key }

// Provider returns the provider's name ("gemini" unless WithProvider says
// otherwise).
func (m *Model) Provider() string { return m.provider }

// ModelID returns the model id given to New.
func (m *Model) ModelID() string { return m.id }

// RateLimitScope names the quota the model's calls count against: the
// provider, endpoint, key or project, and model id.
func (m *Model) RateLimitScope() string { return m.scope }

// Generate makes one generateContent call.
func (m *Model) Generate(ctx context.Context, req *driver.Request) (*driver.Response, error) {
	contents, cfg, warnings, err := m.request(req)
	if err != nil {
		return nil, err
	}
	ctx, rec := adapter.WithRecord(ctx)
	resp, err := m.client.Models.GenerateContent(ctx, m.path, contents, cfg)
	if err != nil {
		return nil, m.callError(ctx, rec, err)
	}
	var d decoder
	d.provider = m.provider
	parts, err := d.chunk(nil, resp)
	if err == nil {
		err = d.end()
	}
	if err != nil {
		return nil, err
	}
	out := &driver.Response{Warnings: warnings, Headers: rec.Header, Finish: d.finish, Usage: d.usage,
		Meta: abi.ResponseMeta{ID: resp.ResponseID, ModelID: resp.ModelVersion}}
	out.Content = adapter.Collect(parts)
	return out, nil
}

// Stream opens one streamGenerateContent call (server-sent events,
// alt=sse). The first chunk is read before Stream returns, so an HTTP
// error is Stream's error.
func (m *Model) Stream(ctx context.Context, req *driver.Request) (driver.Stream, error) {
	contents, cfg, warnings, err := m.request(req)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	sctx, rec := adapter.WithRecord(sctx)
	src := newSource(sctx, cancel, m.provider, m.client.Models.GenerateContentStream(sctx, m.path, contents, cfg))
	first := []abi.Part{{Kind: abi.KindStreamStart, Warnings: warnings}}
	q, _ := src.Next(first)
	if err := src.callFailed(); err != nil {
		_ = src.Close()
		return nil, m.callError(ctx, rec, err)
	}
	s := adapter.NewStream(ctx, m.provider, src, q...)
	s.SetHeader(rec.Header)
	return s, nil
}

// callError turns the SDK's error for a call into the driver's.
func (m *Model) callError(ctx context.Context, rec *adapter.Record, err error) error {
	if ctx.Err() != nil {
		return adapter.CtxError(ctx)
	}
	var ae genai.APIError
	if errors.As(err, &ae) {
		return apiError(m.provider, rec.Status, rec.Header, rec.Body, ae)
	}
	var pe *driver.ProviderError
	if errors.As(err, &pe) {
		return pe
	}
	return adapter.TransportError(ctx, m.provider, false, err)
}

// request translates a driver request into the SDK's contents and config.
func (m *Model) request(req *driver.Request) ([]*genai.Content, *genai.GenerateContentConfig, []abi.Warning, error) {
	cfg := &genai.GenerateContentConfig{StopSequences: req.StopSequences}
	var warnings []abi.Warning
	if n := len(req.StopSequences); n > MaxStopSequences {
		// The API refuses the request (400) with more: an answer that
		// runs past a stop beats none.
		cfg.StopSequences = nil
		warnings = append(warnings, abi.Warning{Type: "unsupported", Feature: "stop",
			Message: fmt.Sprintf("%d stop sequences are more than the Gemini API's %d; none were sent", n, MaxStopSequences)})
	}
	if req.System != "" {
		cfg.SystemInstruction = &genai.Content{Parts: []*genai.Part{{Text: req.System}}}
	}
	sampling(cfg, req)
	if len(req.Tools) > 0 {
		tools, err := functionTools(req.Tools)
		if err != nil {
			return nil, nil, nil, err
		}
		cfg.Tools = tools
	}
	opts := http.Header{}
	maps.Copy(opts, req.Headers)
	if extra := m.extraBody(req); len(opts) > 0 || len(extra) > 0 {
		cfg.HTTPOptions = &genai.HTTPOptions{Headers: opts, ExtraBody: extra}
	}
	names := map[string]string{} // call id → function name, for the results
	contents := make([]*genai.Content, 0, len(req.Messages))
	for _, msg := range req.Messages {
		c, err := content(cfg, &msg, names)
		if err != nil {
			return nil, nil, nil, err
		}
		if c != nil && len(c.Parts) > 0 {
			contents = append(contents, c)
		}
	}
	return contents, cfg, warnings, nil
}

// sampling sets the request's output limit and sampling settings.
func sampling(cfg *genai.GenerateContentConfig, req *driver.Request) {
	if req.MaxOutputTokens > 0 {
		cfg.MaxOutputTokens = int32(min(req.MaxOutputTokens, 1<<31-1))
	}
	if req.Temperature != nil {
		t := float32(*req.Temperature)
		cfg.Temperature = &t
	}
	if req.TopP != nil {
		p := float32(*req.TopP)
		cfg.TopP = &p
	}
	if req.Seed != nil {
		s := int32(*req.Seed)
		cfg.Seed = &s
	}
}

// functionTools declares the tools, each schema as JSON.
func functionTools(tools []driver.Tool) ([]*genai.Tool, error) {
	decls := make([]*genai.FunctionDeclaration, 0, len(tools))
	for _, t := range tools {
		d := &genai.FunctionDeclaration{Name: t.Name, Description: t.Description}
		if t.Schema != "" {
			var schema any
			if err := json.Unmarshal([]byte(t.Schema), &schema); err != nil {
				return nil, fmt.Errorf("gemini: tool %q: schema is not JSON: %w", t.Name, err)
			}
			d.ParametersJsonSchema = schema
		}
		decls = append(decls, d)
	}
	return []*genai.Tool{{FunctionDeclarations: decls}}, nil
}

// extraBody is the model's own body fields, then the request's
// ProviderOptions for what they leave unset.
func (m *Model) extraBody(req *driver.Request) map[string]any {
	extra := maps.Clone(m.params)
	if po, ok := req.ProviderOptions[m.provider].(map[string]any); ok {
		if extra == nil {
			extra = map[string]any{}
		}
		for k, v := range po {
			if _, set := m.params[k]; !set {
				extra[k] = v
			}
		}
	}
	return extra
}

// content translates a message: nil for a system message, whose text
// joins cfg's system instruction. names maps the calls seen so far to
// their functions, for the results that name none.
func content(cfg *genai.GenerateContentConfig, msg *driver.Message, names map[string]string) (*genai.Content, error) {
	var c *genai.Content
	switch msg.Role {
	case driver.RoleUser:
		c = &genai.Content{Role: genai.RoleUser}
	case driver.RoleAssistant:
		c = &genai.Content{Role: genai.RoleModel}
	case driver.RoleTool:
		c = &genai.Content{Role: genai.RoleUser}
	case driver.RoleSystem:
		for _, x := range msg.Content {
			if cfg.SystemInstruction == nil {
				cfg.SystemInstruction = &genai.Content{}
			}
			cfg.SystemInstruction.Parts = append(cfg.SystemInstruction.Parts, &genai.Part{Text: x.Text})
		}
		return nil, nil
	default:
		return nil, fmt.Errorf("gemini: unknown role %q", msg.Role)
	}
	for _, x := range msg.Content {
		switch {
		case msg.Role == driver.RoleAssistant && x.ToolName != "":
			args := map[string]any{}
			if x.ToolInput != "" {
				if err := json.Unmarshal([]byte(x.ToolInput), &args); err != nil {
					return nil, fmt.Errorf("gemini: tool call %q: input is not a JSON object: %w", x.ToolCallID, err)
				}
			}
			names[x.ToolCallID] = x.ToolName
			c.Parts = append(c.Parts, &genai.Part{FunctionCall: &genai.FunctionCall{ID: callID(x.ToolCallID), Name: x.ToolName, Args: args}})
		case msg.Role == driver.RoleTool:
			name := cmp.Or(x.ToolName, names[x.ToolCallID])
			c.Parts = append(c.Parts, &genai.Part{FunctionResponse: &genai.FunctionResponse{
				ID: callID(x.ToolCallID), Name: name, Response: toolResult(x.ToolResult)}})
		case x.Text != "":
			c.Parts = append(c.Parts, &genai.Part{Text: x.Text})
		}
	}
	return c, nil
}

// callID is the id a call is sent back with: the ones this adapter made
// up for calls the API gave none were never the API's.
func callID(id string) string {
	if strings.HasPrefix(id, syntheticCall) {
		return ""
	}
	return id
}

// toolResult is a tool's result as the API takes it: an object as is,
// anything else under "output".
func toolResult(s string) map[string]any {
	var obj map[string]any
	if json.Unmarshal([]byte(s), &obj) == nil && obj != nil {
		return obj
	}
	var v any
	if json.Unmarshal([]byte(s), &v) == nil {
		return map[string]any{"output": v}
	}
	return map[string]any{"output": s}
}

// syntheticCall prefixes the ids of calls the API sent without one.
const syntheticCall = "gemini-call-"

func syntheticID(n int) string { return syntheticCall + strconv.Itoa(n) }
