package policy

import (
	"bytes"
	_ "embed"
	"encoding/json"
)

//go:embed schema.json
var schemaJSON []byte

// Schema returns the JSON Schema of a policy file (policy/schema.json,
// generated from File and the types under it), for an editor's completion
// and validation. Each call returns a new copy, safe to modify.
func Schema() []byte { return bytes.Clone(schemaJSON) }

// File is the policy file's schema, in JSON or YAML alike. The field tags
// are the names in the file; every field is optional unless said
// otherwise. A duration is a Go duration string ("250ms", "1m30s"). The
// same schema, for editors, is policy/schema.json (generated from these
// types by go generate).
type File struct {
	// Models, in order; the first is the base model every request starts on
	// (unless a sticky fallback says otherwise). Required, at least one.
	Models []ModelSpec `json:"models"`
	// Rules are asked in order after each failed attempt.
	Rules []RuleSpec `json:"rules"`
	// Groups name several models (deployments of one logical model) under
	// one name, balanced by a strategy; rules and requests may target a
	// group's name as they target a model's.
	Groups []GroupSpec `json:"groups"`
	// Start is the model or group every request starts on (unless a
	// sticky fallback says otherwise). Default: the first model.
	Start string `json:"start"`
	// Transforms run, in order, on every part before the commit gate.
	Transforms []TransformSpec `json:"transforms"`
	Deadlines  Deadlines       `json:"deadlines"`
	Backoff    BackoffSpec     `json:"backoff"`
	// MaxAttempts caps the attempts of one request. Default 10.
	MaxAttempts int `json:"max_attempts"`
	// RetryAfterCap caps a server's Retry-After. Default 60s.
	RetryAfterCap *Duration `json:"retry_after_cap"`
	// Sticky is "after-request" (default), "after-N-requests" or "after-N-seconds".
	Sticky string `json:"sticky"`
	// Commit is the commit rule: "output" (default) or "legacy".
	Commit string `json:"commit"`
	// Cooldown takes a model that keeps failing out of rotation (absent:
	// off, unless Options.DefaultCooldown says otherwise; null: off).
	Cooldown *CooldownSpec `json:"cooldown"`
	// RetryBudget bounds the retries in flight to a share of the requests
	// in flight (absent: off; {} is 20 % with a minimum of 3).
	RetryBudget *RetryBudgetSpec `json:"retry_budget"`
	// Hedge starts the next candidate beside an attempt that has no first
	// content after a while; the first to commit wins (absent: off).
	Hedge   *HedgeSpec  `json:"hedge"`
	Sandbox SandboxSpec `json:"sandbox"`
	// State shares the fail-over state (cooldowns, probes, Retry-After,
	// sticky fallbacks, retry budget) between the replicas that load this
	// policy (absent: each process keeps its own).
	State *StateSpec `json:"state"`
	// AfterCommit is what a stream does when it fails after its first
	// content reached the caller: "error" (default: it ends with an
	// in-band error, nothing sent twice) or "continue" (the rules choose a
	// new attempt, asked to continue the answer already sent, spliced on:
	// the caller reads one answer). A model or group's own after_commit
	// wins for the requests that start on it.
	AfterCommit string `json:"after_commit"`
	// EmptyAnswer is what an answer that finishes (for stop, or a reason
	// the provider does not name) with no content is: "accept" (default:
	// an answer, empty) or "fail" (a failure of class server before
	// commit, which the rules fail over; a gateway's default).
	EmptyAnswer string `json:"empty_answer"`
	// MaxContinuations caps the continuations of one request. Default 2.
	MaxContinuations *int `json:"max_continuations"`
	// ContinuationPrompt is the instruction a continuation sends to a
	// Chat Completions model after the partial answer. Default: the
	// driver's (driver.DefaultContinuationPrompt).
	ContinuationPrompt string `json:"continuation_prompt"`
	// ThroughputFloor fails a committed stream that trickles below a rate
	// (absent: off).
	ThroughputFloor *ThroughputFloorSpec `json:"throughput_floor"`
}

// ThroughputFloorSpec is driver.WithThroughputFloor: a committed stream
// that delivers fewer than CharsPerSecond characters per second of waiting
// on the provider, over each Window of such waiting, fails (after_commit
// then says what follows). Both fields are required.
type ThroughputFloorSpec struct {
	// CharsPerSecond is the floor: characters (Unicode code points of
	// text, reasoning and tool input) per second. Positive.
	CharsPerSecond float64 `json:"chars_per_second"`
	// Window is how much waiting on the provider each measure spans.
	Window *Duration `json:"window"`
}

// StateSpec names the store the replicas share their fail-over state in.
type StateSpec struct {
	// Redis shares it on a Redis server; the program must link package
	// github.com/retryhost/retryhost/state/redis (retryhost serve does).
	Redis *RedisStateSpec `json:"redis"`
}

// RedisStateSpec is state/redis's Options: the server, the key prefix and
// the deadline of one operation, past which the replica uses its local
// state until Redis answers again.
type RedisStateSpec struct {
	// URL is the server, required, in one of three forms (go-redis's own
	// URLs, whose scheme picks the client):
	//   - one server: redis://[user@]host:port/db, rediss:// for TLS, or
	//     unix:///path;
	//   - Sentinel: redis+sentinel://[user@]sentinel:port/db?master_name=NAME&addr=sentinel2:port…
	//     (rediss+sentinel:// for TLS), the primary the Sentinels call
	//     NAME, followed through failovers (the user is the Sentinels');
	//   - Cluster: redis+cluster://[user@]node:port?addr=node2:port…
	//     (rediss+cluster:// for TLS), from these seed nodes.
	// go-redis's other query parameters are accepted. Put no password in
	// it: name its variable in password_env (sentinel_password_env).
	URL string `json:"url"`
	// PasswordEnv is the NAME of the environment variable holding the
	// password (every node's, the primary's and replicas' for Sentinel),
	// never the password. Optional.
	PasswordEnv string `json:"password_env"`
	// SentinelPasswordEnv is the NAME of the environment variable holding
	// the Sentinels' own password (requirepass in sentinel.conf), for a
	// redis+sentinel:// url. Optional.
	SentinelPasswordEnv string `json:"sentinel_password_env"`
	// Prefix starts every key, so that fleets sharing a server do not
	// share state. Default "retryhost:". Without a hash tag it is put in
	// braces ({retryhost:}c:model), so that all of a fleet's keys are in
	// one Redis Cluster slot.
	Prefix string `json:"prefix"`
	// OpTimeout bounds one operation on the server. Default 50ms.
	OpTimeout *Duration `json:"op_timeout"`
}

// HedgeSpec is driver.WithHedge: After (required, positive) into an
// attempt without first content, start what a first-content timeout would
// start, beside it; at most Max hedges per request (default 1).
type HedgeSpec struct {
	After *Duration `json:"after"`
	Max   *int      `json:"max"`
}

// ModelSpec declares one model, or one deployment of a model: two entries
// may name the same provider and model id under different names.
type ModelSpec struct {
	// Name is the model's key, required and unique: rules, Wasm
	// conditions, stickiness, cooldown and telemetry refer to the model by
	// it. Letters, digits, '.', '_', '-'.
	Name string `json:"name"`
	// Provider is required: openai, azure (Azure OpenAI), openrouter, vllm,
	// ollama (all through the OpenAI adapter), anthropic, gemini (Google
	// AI's Gemini API), vertex (Gemini on Google Cloud's Vertex AI: calls
	// authorised by the Application Default Credentials, or an express-mode
	// key in api_key_env; a project and a location), bedrock (Amazon
	// Bedrock's Converse API: credentials from the AWS default chain, or a
	// Bedrock API key in api_key_env; a region), or scripted (bound in
	// code; scenarios).
	Provider string `json:"provider"`
	// Model is the provider's model id, required except for azure (where
	// it defaults to the deployment) and scripted. "*" sends the id each
	// request names (driver.Request.ModelID): a gateway passes the model
	// its client asked for, and a request naming no route goes to a
	// policy that starts on a "*" model. Not for azure.
	Model string `json:"model"`
	// BaseURL is the server's URL: default the provider's (openrouter:
	// https://openrouter.ai/api/v1, ollama: http://localhost:11434/v1);
	// required for vllm, and for azure, where it is the resource's endpoint
	// (https://NAME.openai.azure.com).
	BaseURL string `json:"base_url"`
	// APIKeyEnv is the NAME of the environment variable holding the key,
	// never the key: required for openai, azure, openrouter, anthropic and gemini,
	// optional for vllm, ollama, bedrock (an Amazon Bedrock API key, sent
	// as a bearer token instead of signing with AWS credentials) and vertex
	// (an express-mode key, instead of the Application Default
	// Credentials).
	APIKeyEnv string `json:"api_key_env"`
	// Region is the AWS region of a bedrock model (such as us-east-1):
	// default the environment variable AWS_REGION, and one of the two is
	// required. Only for bedrock.
	Region string `json:"region"`
	// Project and Location are Vertex AI's: the Google Cloud project and
	// the location (such as us-central1, or global) a vertex model is
	// served from, both required for vertex unless api_key_env names an
	// express-mode key, and only for it. Requests go to
	// {base_url}/v1beta1/projects/{project}/locations/{location}/publishers/google/models/{model}:generateContent
	// (streamGenerateContent?alt=sse when streamed); base_url defaults to
	// https://{location}-aiplatform.googleapis.com.
	Project  string `json:"project"`
	Location string `json:"location"`
	// Deployment and APIVersion are Azure OpenAI's, both required for
	// azure and only for it: requests go to
	// {base_url}/openai/deployments/{deployment}/chat/completions?api-version={api_version}.
	Deployment string `json:"deployment"`
	APIVersion string `json:"api_version"`
	// API picks the OpenAI endpoint: chat (Chat Completions, the default)
	// or responses (the Responses API). Only for openai, openrouter, vllm
	// and ollama: Azure serves the Responses API outside the deployment
	// path, and anthropic has one API.
	API string `json:"api"`
	// UpstreamJSON, when true, asks the upstream for a non-streamed answer
	// ("stream": false) for the requests that commit at their end (a
	// gateway's non-streaming client); streaming requests stay streamed.
	// The upstream then sends nothing before the whole answer: the
	// first_content deadline bounds the whole answer, the gap deadline
	// does not apply, the attempt and budget deadlines do, and a hedge's
	// after counts to the whole answer; transforms see each block as one
	// delta. Only for the OpenAI adapter's providers with api chat (not
	// anthropic, not api responses). Default false.
	UpstreamJSON bool `json:"upstream_json"`
	// Headers are sent with every request of the model (OpenRouter's
	// HTTP-Referer and X-Title, a gateway's routing header). They are
	// plain text in the file: put no secret here.
	Headers map[string]string `json:"headers"`
	// Params set top-level fields of every request body, overriding the
	// request's own: temperature, max_completion_tokens (openai) or
	// max_tokens (anthropic), top_p, reasoning_effort, a server's
	// extension; for bedrock, fields of additionalModelRequestFields (the
	// model's own parameters, such as top_k). Any JSON value.
	Params map[string]any `json:"params"`
	// UnsupportedParams says what a gateway does when a request falls back
	// to this model with a parameter its provider cannot honour (Anthropic
	// has no response_format, a reasoning_effort its API would refuse
	// beside the request's temperature…): "drop" sends the request without
	// it, with a warning in the log and a count in
	// retryhost_gateway_params_dropped_total; "skip" makes the model
	// ineligible for that request, so a rule that would fall back to it is
	// passed over and the next rule decides. The model a request starts on
	// is never skipped (the client named it). Default "drop".
	UnsupportedParams string `json:"unsupported_params"`
	// AfterCommit is the policy's after_commit for the requests that
	// start on this model: "error" or "continue". Default: the policy's.
	AfterCommit string `json:"after_commit"`
	// Embedding declares the model an embedding model and its vector
	// space (see EmbeddingSpec): a group's models must declare the same
	// one, or none. Absent: not declared (a gateway forwards embeddings to
	// the model alone, never to a group of such models).
	Embedding *EmbeddingSpec `json:"embedding"`
	// Price is what the model's tokens cost, per million, in the currency
	// all the file's prices share: a gateway counts the cost of every
	// attempt the upstream billed (a failed one that reported tokens too)
	// in its metrics and request log. Absent: not priced (cost 0).
	Price *PriceSpec `json:"price"`
}

// PriceSpec is a model's price per million tokens, each a number from 0
// to 1,000,000. Input and output are required; the cache's prices default
// to input's.
type PriceSpec struct {
	// Input is the price of a million input tokens that no cache served.
	Input *float64 `json:"input"`
	// Output is the price of a million output tokens (reasoning included).
	Output *float64 `json:"output"`
	// CachedInput is the price of a million input tokens read from the
	// provider's prompt cache (OpenAI's cached_tokens, Anthropic's
	// cache_read_input_tokens).
	CachedInput *float64 `json:"cached_input"`
	// CacheWrite is the price of a million input tokens written to the
	// provider's prompt cache (Anthropic's cache_creation_input_tokens).
	CacheWrite *float64 `json:"cache_write"`
}

// GroupSpec is driver.Group: a deployment group. An attempt on the group
// runs on one of its models chosen by the strategy, skipping models that
// cool down; a health failure fails over to another model of the group
// before the rules are asked.
type GroupSpec struct {
	// Name is the group's key, required, unique among models and groups.
	Name string `json:"name"`
	// Strategy is "weighted" (default: weighted random), "least-in-flight"
	// or "latency" (EWMA of time to first content, with exploration).
	Strategy string `json:"strategy"`
	// Models are the names of the group's deployments, declared under
	// models: at least one, each once.
	Models []string `json:"models"`
	// Weights, for the weighted strategy only, one positive integer per
	// model in order. Default: all 1.
	Weights []int `json:"weights"`
	// AfterCommit is the policy's after_commit for the requests that
	// start on this group: "error" or "continue". Default: the policy's.
	AfterCommit string `json:"after_commit"`
}

// RuleSpec is one retry rule: a native match (when) or a Wasm condition
// (plugin). A native rule needs an action; a plugin rule decides its own
// action unless one is given, in which case any opinion of the plugin counts
// as a match for the rule's action.
type RuleSpec struct {
	When       *MatchSpec  `json:"when"`
	Plugin     *PluginSpec `json:"plugin"`
	Action     string      `json:"action"` // switch | retry | give-up
	Model      string      `json:"model"`  // switch: the target model's name
	Attempts   int         `json:"attempts"`
	Delay      *Duration   `json:"delay"`
	Backoff    float64     `json:"backoff"`
	Timeout    *Duration   `json:"timeout"`
	RetryAfter *bool       `json:"retry_after"`
}

// MatchSpec is a native condition: every criterion given must hold; the
// values inside one list are alternatives.
type MatchSpec struct {
	Any         bool     `json:"any"`
	Status      []int    `json:"status"`
	StatusRange []int    `json:"status_range"` // [lo, hi], inclusive
	Class       []string `json:"class"`
	Message     []string `json:"message"` // substrings, case-insensitive
	Timeout     *bool    `json:"timeout"`
	Canceled    *bool    `json:"canceled"`
	Retryable   *bool    `json:"retryable"`
	Finish      []string `json:"finish"`
}

// PluginSpec names a Wasm plugin: by path (relative to the policy file), by
// built-in name, or by OCI reference pinned by digest
// (registry.example.com/team/refusal@sha256:…, resolved through
// Options.OCI).
type PluginSpec struct {
	Path    string `json:"path"`
	Builtin string `json:"builtin"`
	OCI     string `json:"oci"`
	// FollowTag accepts an "oci" reference naming a tag
	// (registry.example.com/team/refusal:stable) instead of a digest: the
	// tag is resolved once per load (the digest is logged), and a server
	// (a gateway) reloads the policy when a new digest appears behind it.
	// Default false: a tag is refused, as it can move under a fleet.
	FollowTag bool   `json:"follow_tag"`
	SHA256    string `json:"sha256"`
	// Config is handed to the plugin at load: a JSON string is passed as its
	// text, any other JSON value as its JSON text.
	Config json.RawMessage `json:"config"`
	// Fail overrides the plugin's declared fail policy: "open" or "closed".
	Fail      string `json:"fail"`
	Instances int    `json:"instances"`
}

// TransformSpec is one transform: exactly one of its fields.
type TransformSpec struct {
	Refusal *RefusalSpec `json:"refusal"`
	Plugin  *PluginSpec  `json:"plugin"`
}

// RefusalSpec configures the native refusal detector.
type RefusalSpec struct {
	Phrases []string `json:"phrases"` // default: the built-in list
	// Reasoning is "detach" (default: judging ends at the first reasoning
	// or citation part) or "hold" (reasoning and citation parts are held
	// and the text after them is judged, so a refusal after thinking fails
	// over; the client's first byte waits for the whole thinking):
	// driver.RefusalConfig.Reasoning, the refusal plugin's "reasoning".
	Reasoning string `json:"reasoning"`
}

// CooldownSpec is driver.Cooldown: after Failures consecutive counted
// failures a model cools down For; When (a native match) says which count,
// default the health failures (timeouts, rate limits, overloads, 5xx,
// network).
type CooldownSpec struct {
	Failures int       `json:"failures"`
	For      *Duration `json:"for"`
	// Max, at least For, makes the cooldown adapt: one that a failed probe
	// starts lasts twice the one before it, up to Max (driver.Cooldown.Max).
	Max  *Duration  `json:"max"`
	When *MatchSpec `json:"when"`
}

// RetryBudgetSpec is driver.RetryBudget: at most Percent per cent of the
// requests in flight may be retries in flight (1-100, default 20), and
// never fewer than MinRetries (at least 1, default 3).
type RetryBudgetSpec struct {
	Percent    *int `json:"percent"`
	MinRetries *int `json:"min_retries"`
}

// Deadlines are the driver's deadlines; absent means none.
type Deadlines struct {
	Attempt      *Duration `json:"attempt"`
	Budget       *Duration `json:"budget"`
	FirstContent *Duration `json:"first_content"`
	Gap          *Duration `json:"gap"`
}

// BackoffSpec is the request-wide backoff.
type BackoffSpec struct {
	Delay    *Duration `json:"delay"`
	Factor   float64   `json:"factor"`
	MaxDelay *Duration `json:"max_delay"`
	Jitter   string    `json:"jitter"` // none | full | equal
	Seed     uint64    `json:"seed"`
}

// SandboxSpec configures the Wasm host.
type SandboxSpec struct {
	// Memory caps each instance's linear memory in bytes (an integer) or
	// with a unit ("16MiB", "512KiB"). Default 64MiB.
	Memory      json.RawMessage `json:"memory"`
	CallTimeout *Duration       `json:"call_timeout"` // default 50ms
	Trusted     bool            `json:"trusted"`      // no per-call guard
	Interpreter bool            `json:"interpreter"`
	Breaker     *BreakerSpec    `json:"breaker"`
}

// BreakerSpec is the crash-loop breaker: disable after Failures within Span.
type BreakerSpec struct {
	Failures int      `json:"failures"`
	Span     Duration `json:"span"`
}
