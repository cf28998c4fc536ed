package bedrock

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go/auth/bearer"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// provider is the adapter's default provider name: the prefix of Key,
// ProviderError.Provider and the Request.ProviderOptions entry it reads.
const provider = "bedrock"

// MaxTemperature is the highest temperature Converse's models take (Claude,
// Nova, Llama, Mistral and Cohere alike): a request's Temperature above
// it is sent as it, with a Warning.
const MaxTemperature = 1.0

// MaxStopSequences is the most stop sequences Converse takes: a request
// with more is sent with none, and a Warning.
const MaxStopSequences = 2500

// thinkingAnswerTokens is the room for the answer a thinking budget gets
// on top of it as maxTokens, when the request sets no MaxOutputTokens.
const thinkingAnswerTokens = 4096

// ErrNoRegion is New's error when neither WithRegion nor the AWS
// configuration (AWS_REGION, the profile's region) names a region.
var ErrNoRegion = errors.New("bedrock: no AWS region: set one with WithRegion, AWS_REGION or the profile's region")

// Option configures a Model.
type Option func(*config)

type config struct {
	region      string
	baseURL     string
	apiKey      string
	creds       aws.CredentialsProvider
	provider    string
	providerSet bool
	key         string
	keySet      bool
	headers     [][2]string
	params      map[string]any
	guardrail   *types.GuardrailStreamConfiguration
	httpClient  *http.Client
}

// WithRegion sets the AWS region ("us-east-1"). Default: the AWS
// configuration's (AWS_REGION, AWS_DEFAULT_REGION, the profile's); New
// fails with ErrNoRegion when there is none.
func WithRegion(region string) Option { return func(c *config) { c.region = region } }

// WithBaseURL points the model at another endpoint (a VPC endpoint, a
// proxy, a test server). Default: the region's bedrock-runtime endpoint.
func WithBaseURL(u string) Option { return func(c *config) { c.baseURL = u } }

// WithCredentials sets the credentials the SDK signs requests with
// (SigV4), such as credentials.NewStaticCredentialsProvider's. Default:
// the AWS default chain (environment, shared profile, web identity,
// container and instance roles), read once by New.
func WithCredentials(p aws.CredentialsProvider) Option { return func(c *config) { c.creds = p } }

// WithAPIKey authorises the calls with an Amazon Bedrock API key (a
// bearer token) instead of SigV4 credentials. Default: none (SigV4).
func WithAPIKey(key string) Option { return func(c *config) { c.apiKey = key } }

// WithProvider names the provider in keys, errors and ProviderOptions.
// Default: "bedrock".
func WithProvider(name string) Option {
	return func(c *config) { c.provider, c.providerSet = name, true }
}

// WithKey sets the model's key. Default: "<provider>/<model id>".
func WithKey(key string) Option { return func(c *config) { c.key, c.keySet = key, true } }

// WithHeader adds a header to every request. It is signed with the rest.
func WithHeader(name, value string) Option {
	return func(c *config) { c.headers = append(c.headers, [2]string{name, value}) }
}

// WithParam sets a field of every request's additionalModelRequestFields
// (the model's own parameters, such as "top_k" or Claude's "thinking"),
// over the request's own. Default: none.
func WithParam(name string, value any) Option {
	return func(c *config) {
		if c.params == nil {
			c.params = map[string]any{}
		}
		c.params[name] = value
	}
}

// WithGuardrail applies a Bedrock guardrail (its identifier or ARN, and
// version, such as "1" or "DRAFT") to every call. Default: none.
func WithGuardrail(id, version string) Option {
	return func(c *config) {
		c.guardrail = &types.GuardrailStreamConfiguration{GuardrailIdentifier: aws.String(id), GuardrailVersion: aws.String(version)}
	}
}

// WithHTTPClient sets the HTTP client. Default: a new one over
// http.DefaultTransport.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.httpClient = hc } }

// Options are the Converse settings of one request that the driver's
// Request does not model. A Request.ProviderOptions entry for the model's
// provider may be an Options (or *Options) instead of a map[string]any
// (which is Fields alone); the retryhost gateway sets one on a request
// that reaches a Bedrock model from another API's door. The zero value
// sends nothing more.
type Options struct {
	// Fields are merged into additionalModelRequestFields, under
	// WithParam's, as a map entry is.
	Fields map[string]any
	// ToolChoice is toolConfig.toolChoice, sent when the request has
	// tools: "any" (the model must call a tool) or "tool" (it must call
	// ToolName). "" and "auto" send none: the model's default, auto.
	// Converse takes it on the models that support it (Claude, Mistral
	// Large, Nova); others refuse the call.
	ToolChoice, ToolName string
	// JSONSchema, when not nil, asks for an answer that is JSON matching
	// it (outputConfig.textFormat, type json_schema), named SchemaName.
	JSONSchema map[string]any
	SchemaName string
	// ThinkingBudget, when positive, turns a Claude model's extended
	// thinking on with that budget in tokens
	// (additionalModelRequestFields.thinking); with no MaxOutputTokens,
	// maxTokens is the budget plus 4096 for the answer. A model that is not
	// Claude ([Model.Claude]) is sent none, with a Warning.
	ThinkingBudget int
	// TopK, when positive, is a Claude model's top_k
	// (additionalModelRequestFields.top_k). A model that is not Claude is
	// sent none, with a Warning.
	TopK int
}

// Model is a model of Amazon Bedrock's Converse API. It is safe for
// concurrent use.
type Model struct {
	id, key, provider, scope string
	client                   *bedrockruntime.Client
	params                   map[string]any
	headers                  http.Header
	guardrail                *types.GuardrailStreamConfiguration
}

var (
	_ driver.Model           = (*Model)(nil)
	_ driver.Described       = (*Model)(nil)
	_ driver.RateLimitScoper = (*Model)(nil)
)

// New returns the Bedrock model id: a foundation model
// ("anthropic.claude-sonnet-4-20250514-v1:0"), an inference profile
// ("us.anthropic.claude-sonnet-4-20250514-v1:0") or an ARN. Without
// WithCredentials or WithAPIKey it reads the AWS default configuration,
// which may read the shared config files; it makes no network call.
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
		if err := adapter.CheckBaseURL("bedrock", c.baseURL); err != nil {
			return nil, err
		}
	}
	hdr, err := adapter.Headers("bedrock", c.headers)
	if err != nil {
		return nil, err
	}
	if c.guardrail != nil && (aws.ToString(c.guardrail.GuardrailIdentifier) == "" || aws.ToString(c.guardrail.GuardrailVersion) == "") {
		return nil, errors.New("bedrock: a guardrail needs an identifier and a version")
	}
	var cfg aws.Config
	if c.creds == nil && c.apiKey == "" {
		var err error
		if cfg, err = awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRegion(c.region)); err != nil {
			return nil, fmt.Errorf("bedrock: the AWS configuration: %w", err)
		}
	}
	region := cmp.Or(c.region, cfg.Region)
	if region == "" {
		return nil, ErrNoRegion
	}
	hc := adapter.Recording(ownBody(adapter.SameOriginRedirects("bedrock", c.httpClient)))
	client := bedrockruntime.NewFromConfig(cfg, func(o *bedrockruntime.Options) {
		o.Region = region
		o.HTTPClient = hc
		o.Retryer = aws.NopRetryer{} // the driver owns retries and fail-over
		o.RetryMaxAttempts = 0
		if c.creds != nil {
			o.Credentials = c.creds
		}
		if c.apiKey != "" {
			tok := bearer.Token{Value: c.apiKey}
			o.BearerAuthTokenProvider = bearer.TokenProviderFunc(func(context.Context) (bearer.Token, error) { return tok, nil })
			o.AuthSchemePreference = []string{"httpBearerAuth"}
		}
		if c.baseURL != "" {
			o.BaseEndpoint = aws.String(strings.TrimRight(c.baseURL, "/"))
		}
	})
	base := cmp.Or(c.baseURL, "https://bedrock-runtime."+region+".amazonaws.com")
	return &Model{id: id, key: key, provider: c.provider, client: client, params: c.params, headers: hdr,
		guardrail: c.guardrail, scope: adapter.RateLimitScope(c.provider, base, c.apiKey, id)}, nil
}

// Key returns the model's key.
func (m *Model) Key() string { return m.key }

// Provider returns the provider's name ("bedrock" unless WithProvider
// says otherwise).
func (m *Model) Provider() string { return m.provider }

// ModelID returns the model id given to New.
func (m *Model) ModelID() string { return m.id }

// Claude reports whether the model's id names one of Anthropic's Claude
// models ("anthropic.claude" in it, also in an inference profile's id):
// the models that take Options.ThinkingBudget and Options.TopK.
func (m *Model) Claude() bool { return strings.Contains(m.id, "anthropic.claude") }

// RateLimitScope names the quota the model's calls count against: the
// provider, endpoint (which names the region), API key and model id
// (SigV4 credentials are resolved at call time, so they are not in it).
func (m *Model) RateLimitScope() string { return m.scope }

// Generate makes one Converse call.
func (m *Model) Generate(ctx context.Context, req *driver.Request) (*driver.Response, error) {
	in, warnings, err := m.request(req)
	if err != nil {
		return nil, err
	}
	var guard *types.GuardrailConfiguration
	if g := m.guardrail; g != nil {
		guard = &types.GuardrailConfiguration{GuardrailIdentifier: g.GuardrailIdentifier, GuardrailVersion: g.GuardrailVersion}
	}
	ctx, rec := adapter.WithRecord(ctx)
	out, err := m.client.Converse(ctx, &bedrockruntime.ConverseInput{
		ModelId: in.ModelId, Messages: in.Messages, System: in.System, InferenceConfig: in.InferenceConfig,
		ToolConfig: in.ToolConfig, AdditionalModelRequestFields: in.AdditionalModelRequestFields, GuardrailConfig: guard,
		OutputConfig: in.OutputConfig,
	}, m.callOptions(req))
	if err != nil {
		return nil, m.callError(ctx, rec, err)
	}
	d := decoder{provider: m.provider}
	var parts []abi.Part
	if msg, ok := out.Output.(*types.ConverseOutputMemberMessage); ok {
		if parts, err = d.message(msg.Value); err != nil {
			return nil, err
		}
	}
	d.setUsage(out.Usage)
	// A guardrail's answer is its blocked message, written as the model's
	// text: the whole answer is here, so it fails over as a refusal.
	if err := d.stop(out.StopReason, true); err != nil {
		return nil, err
	}
	return &driver.Response{Content: adapter.Collect(parts), Finish: d.finish, Usage: d.usage, Headers: rec.Header, Warnings: warnings,
		Meta: abi.ResponseMeta{ID: rec.Header.Get("X-Amzn-Requestid"), ModelID: m.id}}, nil
}

// Stream opens one ConverseStream call (an AWS event stream). The HTTP
// response is read before Stream returns, so an HTTP error is Stream's
// error.
func (m *Model) Stream(ctx context.Context, req *driver.Request) (driver.Stream, error) {
	in, warnings, err := m.request(req)
	if err != nil {
		return nil, err
	}
	in.GuardrailConfig = m.guardrail
	sctx, cancel := context.WithCancel(ctx)
	sctx, rec := adapter.WithRecord(sctx)
	out, err := m.client.ConverseStream(sctx, in, m.callOptions(req))
	if err != nil {
		cancel()
		return nil, m.callError(ctx, rec, err)
	}
	src := newSource(cancel, m.provider, out.GetStream())
	s := adapter.NewStream(ctx, m.provider, src, abi.Part{Kind: abi.KindStreamStart, Warnings: warnings})
	s.SetHeader(rec.Header)
	return s, nil
}

// callOptions adds the model's and the request's headers to one call.
func (m *Model) callOptions(req *driver.Request) func(*bedrockruntime.Options) {
	hdr := m.headers.Clone()
	for k, v := range req.Headers {
		hdr[http.CanonicalHeaderKey(k)] = v
	}
	return func(o *bedrockruntime.Options) {
		if len(hdr) == 0 {
			return
		}
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Build.Add(middleware.BuildMiddlewareFunc("retryhostHeaders", func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
				if r, ok := in.Request.(*smithyhttp.Request); ok {
					for k, vs := range hdr {
						r.Header[k] = append([]string(nil), vs...)
					}
				}
				return next.HandleBuild(ctx, in)
			}), middleware.After)
		})
	}
}

// request translates a driver request into ConverseStream's input (whose
// fields Converse's share), with the warnings of what it did not send as
// asked.
func (m *Model) request(req *driver.Request) (*bedrockruntime.ConverseStreamInput, []abi.Warning, error) {
	id := m.id
	if id == driver.AnyModelID {
		if id = req.ModelID; id == "" {
			return nil, nil, errors.New("bedrock: the model is \"*\" and the request names no model")
		}
	}
	opts, err := m.options(req)
	if err != nil {
		return nil, nil, err
	}
	in := &bedrockruntime.ConverseStreamInput{ModelId: aws.String(id)}
	if req.System != "" {
		in.System = append(in.System, &types.SystemContentBlockMemberText{Value: req.System})
	}
	var warnings []abi.Warning
	in.InferenceConfig, warnings = inferenceConfig(req)
	if len(req.Tools) > 0 {
		tc, err := toolConfig(req.Tools, opts)
		if err != nil {
			return nil, nil, err
		}
		in.ToolConfig = tc
	}
	if opts.JSONSchema != nil {
		b, err := json.Marshal(opts.JSONSchema)
		if err != nil {
			return nil, nil, fmt.Errorf("bedrock: the JSON schema: %w", err)
		}
		def := types.JsonSchemaDefinition{Schema: aws.String(string(b))}
		if opts.SchemaName != "" {
			def.Name = aws.String(opts.SchemaName)
		}
		in.OutputConfig = &types.OutputConfig{TextFormat: &types.OutputFormat{Type: types.OutputFormatTypeJsonSchema,
			Structure: &types.OutputFormatStructureMemberJsonSchema{Value: def}}}
	}
	extra, ws := m.extraFields(opts)
	warnings = append(warnings, ws...)
	if _, own := m.params["thinking"]; !own && opts.ThinkingBudget > 0 && m.Claude() && req.MaxOutputTokens <= 0 {
		if in.InferenceConfig == nil {
			in.InferenceConfig = &types.InferenceConfiguration{}
		}
		in.InferenceConfig.MaxTokens = aws.Int32(int32(min(opts.ThinkingBudget+thinkingAnswerTokens, 1<<31-1)))
	}
	if len(extra) > 0 {
		in.AdditionalModelRequestFields = document.NewLazyDocument(extra)
	}
	for _, msg := range req.Messages {
		if err := addMessage(in, &msg); err != nil {
			return nil, nil, err
		}
	}
	return in, warnings, nil
}

// options returns the request's ProviderOptions entry for the model's
// provider as Options: a map[string]any is Fields alone.
func (m *Model) options(req *driver.Request) (Options, error) {
	switch po := req.ProviderOptions[m.provider].(type) {
	case nil:
		return Options{}, nil
	case map[string]any:
		return Options{Fields: po}, nil
	case Options:
		return po, nil
	case *Options:
		if po == nil {
			return Options{}, nil
		}
		return *po, nil
	default:
		return Options{}, fmt.Errorf("bedrock: ProviderOptions[%q] is %T, want map[string]any or bedrock.Options", m.provider, po)
	}
}

// inferenceConfig is the request's sampling settings (nil with none set),
// and the warnings of those it did not send as asked: a temperature above
// MaxTemperature (sent as it), more stop sequences than MaxStopSequences
// (none sent).
func inferenceConfig(req *driver.Request) (*types.InferenceConfiguration, []abi.Warning) {
	var warnings []abi.Warning
	ic := &types.InferenceConfiguration{StopSequences: req.StopSequences}
	if n := len(req.StopSequences); n > MaxStopSequences {
		// Converse refuses the call (ValidationException) with more: an
		// answer that runs past a stop beats none.
		ic.StopSequences = nil
		warnings = append(warnings, abi.Warning{Type: "unsupported", Feature: "stop",
			Message: fmt.Sprintf("%d stop sequences are more than Converse's %d; none were sent", n, MaxStopSequences)})
	}
	if req.MaxOutputTokens > 0 {
		ic.MaxTokens = aws.Int32(int32(min(req.MaxOutputTokens, 1<<31-1)))
	}
	if t := req.Temperature; t != nil {
		ic.Temperature = aws.Float32(float32(min(*t, MaxTemperature)))
		if *t > MaxTemperature {
			warnings = append(warnings, abi.Warning{Type: "compatibility", Feature: "temperature",
				Message: fmt.Sprintf("temperature %g is above Converse's maximum of 1; 1 was sent", *t)})
		}
	}
	if req.TopP != nil {
		ic.TopP = aws.Float32(float32(*req.TopP))
	}
	if ic.MaxTokens != nil || ic.Temperature != nil || ic.TopP != nil || len(ic.StopSequences) > 0 {
		return ic, warnings
	}
	return nil, warnings
}

// toolConfig is the tools' specifications, a tool with no schema taking
// any object, and the tool choice of opts.
func toolConfig(tools []driver.Tool, opts Options) (*types.ToolConfiguration, error) {
	tc := &types.ToolConfiguration{}
	for _, t := range tools {
		schema := map[string]any{"type": "object", "properties": map[string]any{}}
		if t.Schema != "" {
			schema = nil
			if err := json.Unmarshal([]byte(t.Schema), &schema); err != nil || schema == nil {
				return nil, fmt.Errorf("bedrock: tool %q: schema is not a JSON object", t.Name)
			}
		}
		spec := types.ToolSpecification{Name: aws.String(t.Name),
			InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(schema)}}
		if t.Description != "" {
			spec.Description = aws.String(t.Description)
		}
		tc.Tools = append(tc.Tools, &types.ToolMemberToolSpec{Value: spec})
	}
	switch opts.ToolChoice {
	case "", "auto":
	case "any":
		tc.ToolChoice = &types.ToolChoiceMemberAny{}
	case "tool":
		if opts.ToolName == "" {
			return nil, errors.New("bedrock: tool choice \"tool\" names no tool")
		}
		tc.ToolChoice = &types.ToolChoiceMemberTool{Value: types.SpecificToolChoice{Name: aws.String(opts.ToolName)}}
	default:
		return nil, fmt.Errorf("bedrock: unknown tool choice %q", opts.ToolChoice)
	}
	return tc, nil
}

// extraFields are the model's own request fields, then opts' for what
// they leave unset: its Fields, and a Claude model's thinking and top_k.
// A model that is not Claude gets neither, and a warning for each asked.
func (m *Model) extraFields(opts Options) (map[string]any, []abi.Warning) {
	extra := maps.Clone(m.params)
	add := func(k string, v any) {
		if _, set := m.params[k]; set {
			return
		}
		if extra == nil {
			extra = map[string]any{}
		}
		extra[k] = v
	}
	for k, v := range opts.Fields {
		add(k, v)
	}
	var warnings []abi.Warning
	if opts.ThinkingBudget > 0 {
		if m.Claude() {
			add("thinking", map[string]any{"type": "enabled", "budget_tokens": opts.ThinkingBudget})
		} else {
			warnings = append(warnings, abi.Warning{Type: "unsupported", Feature: "thinking",
				Message: "a thinking budget is sent to Claude models only; none was sent"})
		}
	}
	if opts.TopK > 0 {
		if m.Claude() {
			add("top_k", opts.TopK)
		} else {
			warnings = append(warnings, abi.Warning{Type: "unsupported", Feature: "top_k",
				Message: "top_k is sent to Claude models only; none was sent"})
		}
	}
	return extra, warnings
}

// addMessage adds msg to in: a system message's text to the system
// prompt, the others as turns, a turn of the last one's role joining it.
func addMessage(in *bedrockruntime.ConverseStreamInput, msg *driver.Message) error {
	var role types.ConversationRole
	switch msg.Role {
	case driver.RoleUser, driver.RoleTool:
		role = types.ConversationRoleUser
	case driver.RoleAssistant:
		role = types.ConversationRoleAssistant
	case driver.RoleSystem:
		for _, x := range msg.Content {
			if x.Text != "" {
				in.System = append(in.System, &types.SystemContentBlockMemberText{Value: x.Text})
			}
		}
		return nil
	default:
		return fmt.Errorf("bedrock: unknown role %q", msg.Role)
	}
	blocks, err := contentBlocks(msg)
	if err != nil {
		return err
	}
	if len(blocks) == 0 {
		return nil
	}
	// Converse wants the roles to alternate: a tool result and the
	// user's next words are one user turn.
	if n := len(in.Messages); n > 0 && in.Messages[n-1].Role == role {
		in.Messages[n-1].Content = append(in.Messages[n-1].Content, blocks...)
		return nil
	}
	in.Messages = append(in.Messages, types.Message{Role: role, Content: blocks})
	return nil
}

// contentBlocks are msg's contents as Converse's blocks: tool calls, tool
// results and text.
func contentBlocks(msg *driver.Message) ([]types.ContentBlock, error) {
	var blocks []types.ContentBlock
	for _, x := range msg.Content {
		switch {
		case msg.Role == driver.RoleAssistant && x.ToolName != "":
			args := map[string]any{}
			if x.ToolInput != "" {
				if err := json.Unmarshal([]byte(x.ToolInput), &args); err != nil {
					return nil, fmt.Errorf("bedrock: tool call %q: input is not a JSON object: %w", x.ToolCallID, err)
				}
			}
			blocks = append(blocks, &types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{
				ToolUseId: aws.String(x.ToolCallID), Name: aws.String(x.ToolName), Input: document.NewLazyDocument(args)}})
		case msg.Role == driver.RoleTool:
			blocks = append(blocks, &types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{
				ToolUseId: aws.String(x.ToolCallID), Content: []types.ToolResultContentBlock{toolResult(x.ToolResult)}}})
		case x.Text != "":
			blocks = append(blocks, &types.ContentBlockMemberText{Value: x.Text})
		}
	}
	return blocks, nil
}

// toolResult is a tool's result as Converse takes it: a JSON object as
// json, anything else as text.
func toolResult(s string) types.ToolResultContentBlock {
	var obj map[string]any
	if json.Unmarshal([]byte(s), &obj) == nil && obj != nil {
		return &types.ToolResultContentBlockMemberJson{Value: document.NewLazyDocument(obj)}
	}
	return &types.ToolResultContentBlockMemberText{Value: s}
}
