package openai

import (
	"net/http"

	"github.com/openai/openai-go/v3/option"
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
	streamUsage     *bool // WithStreamUsage; nil: by the server
	noAuth          bool  // withoutAuthorization
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
// parts mapped from a chat.completion.chunk, a KindRaw part whose Raw is a
// ChunkFields: the fields this adapter does not map (the system
// fingerprint, the service tier, choice 0's logprobs), read without the
// SDK's decoding of the whole chunk, which WithRawChunks pays for. It
// comes for the first chunk, for a chunk whose system fingerprint or
// service tier differ from the last ChunkFields', and for every chunk
// from the first with logprobs on; a chunk that would only repeat the
// last ChunkFields (a server's fingerprint, sent with every chunk) has
// none. Raw parts never commit a stream under the default commit rule.
// Default: off.
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

// WithStreamUsage says whether a stream asks the server for its usage
// chunk ("stream_options": {"include_usage": true}). Some compatible
// servers refuse a request that carries stream_options (a 400, which no
// rule fails over, as it reads as the request's own fault), so by default
// only the servers known to accept it get it: OpenAI's own API (host
// api.openai.com) and Azure OpenAI (WithAzure, or a host under
// openai.azure.com). Elsewhere a stream asks for usage only when its
// request's ProviderOptions entry carries "stream_options" (what a gateway
// forwards from a client that sent it), and a stream without the usage
// chunk finishes with zero usage. WithParam("stream_options", …) also
// sets it on every request.
func WithStreamUsage(on bool) Option { return func(c *config) { c.streamUsage = &on } }

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
