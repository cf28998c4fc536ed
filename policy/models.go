package policy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strings"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/link/providers"
)

var (
	namePattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	envPattern    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	headerPattern = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	paramPattern  = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	regionPattern = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	// A Google Cloud project id (or a legacy domain-scoped one,
	// example.com:name) and a Vertex AI location (us-central1, global):
	// both are segments of the request's path.
	projectPattern  = regexp.MustCompile(`^[a-z][a-z0-9.:-]*[a-z0-9]$`)
	locationPattern = regexp.MustCompile(`^(global|[a-z]+(-[a-z]+)+[0-9]+)$`)
)

// providerKind is what the file requires of a provider's models, known
// without the adapter (Validate links none).
type providerKind struct {
	adapter    string // the package that registers it
	needsModel bool
	needsKey   bool
	needsURL   bool
	defaultURL string
	azure      bool
	aws        bool // Amazon Bedrock: a region, and credentials from the AWS chain
	vertex     bool // Vertex AI: a project and a location, and Google's credentials
}

const (
	openaiPkg    = "github.com/retryhost/retryhost/provider/openai"
	anthropicPkg = "github.com/retryhost/retryhost/provider/anthropic"
	geminiPkg    = "github.com/retryhost/retryhost/provider/gemini"
	bedrockPkg   = "github.com/retryhost/retryhost/provider/bedrock"
	providerList = "openai, azure, openrouter, vllm, ollama, anthropic, gemini, vertex, bedrock or scripted"
)

var providerKinds = map[string]providerKind{
	"openai":     {adapter: openaiPkg, needsModel: true, needsKey: true},
	"azure":      {adapter: openaiPkg, needsKey: true, needsURL: true, azure: true},
	"openrouter": {adapter: openaiPkg, needsModel: true, needsKey: true, defaultURL: "https://openrouter.ai/api/v1"},
	"vllm":       {adapter: openaiPkg, needsModel: true, needsURL: true},
	"ollama":     {adapter: openaiPkg, needsModel: true, defaultURL: "http://localhost:11434/v1"},
	"anthropic":  {adapter: anthropicPkg, needsModel: true, needsKey: true},
	"gemini":     {adapter: geminiPkg, needsModel: true, needsKey: true},
	"vertex":     {adapter: geminiPkg, needsModel: true, vertex: true},
	"bedrock":    {adapter: bedrockPkg, needsModel: true, aws: true},
}

func (b *builder) model(i int, m *ModelSpec) error {
	at := fmt.Sprintf("models[%d]", i)
	switch {
	case m.Name == "":
		return b.errf(at+".name", "required: the model's key, which rules refer to")
	case !namePattern.MatchString(m.Name):
		return b.errf(at+".name", "%q is not a valid name (letters, digits, '.', '_', '-')", m.Name)
	case b.p.Models[m.Name] != nil:
		return b.errf(at+".name", "duplicate model name %q (models[%d] has it): the name is the model's key, so give each deployment its own", m.Name, b.index[m.Name])
	}
	b.index[m.Name] = i
	if err := b.price(at, m); err != nil {
		return err
	}
	switch m.UnsupportedParams {
	case "", "drop":
	case "skip":
		if b.p.skips == nil {
			b.p.skips = map[string]bool{}
		}
		b.p.skips[m.Name] = true
	default:
		return b.errf(at+".unsupported_params", "%q is not a choice (want drop, the default, or skip)", m.UnsupportedParams)
	}
	if bound, ok := b.opts.Models[m.Name]; ok && bound != nil {
		if _, known := providerKinds[m.Provider]; !known && m.Provider != "scripted" {
			return b.errf(at+".provider", "unknown provider %q (want %s)", m.Provider, providerList)
		}
		b.p.Models[m.Name] = withKey(bound, m.Name)
		return nil
	}
	kind, known := providerKinds[m.Provider]
	if err := b.checkProvider(at, m, kind, known); err != nil {
		return err
	}
	baseURL, err := b.baseURL(at, m, kind)
	if err != nil {
		return err
	}
	if err := b.checkModelFields(at, m, kind); err != nil {
		return err
	}
	if b.opts.validate {
		id := m.Model
		if id == "" {
			id = m.Deployment
		}
		b.p.Models[m.Name] = &unbuilt{key: m.Name, provider: m.Provider, id: id}
		return nil
	}
	var key string
	if m.APIKeyEnv != "" {
		if key = b.opts.Getenv(m.APIKeyEnv); key == "" {
			return b.errf(at+".api_key_env", "environment variable %s is not set", m.APIKeyEnv)
		}
	}
	region := m.Region
	if kind.aws && region == "" {
		if region = b.opts.Getenv("AWS_REGION"); region == "" {
			return b.errf(at+".region", "required for provider bedrock: set the model's region (such as us-east-1) or the environment variable AWS_REGION")
		}
	}
	factory := lookupProvider(m.Provider)
	if factory == nil {
		return b.errf(at+".provider", "provider %s is not linked into this program: import _ %q", m.Provider, kind.adapter)
	}
	model, err := factory(providers.Spec{
		Key: m.Name, Provider: m.Provider, Model: m.Model, BaseURL: baseURL, APIKey: key,
		Headers: m.Headers, Params: m.Params, Deployment: m.Deployment, APIVersion: m.APIVersion, Region: region,
		Project: m.Project, Location: m.Location,
		Responses: m.API == "responses", HTTPClient: b.opts.HTTPClient, RawChunks: b.raw,
		UpstreamJSON: m.UpstreamJSON || b.defaultUpstreamJSON(at, m, kind),
	})
	if err != nil {
		return b.errf(at, "%v", err)
	}
	b.p.Models[m.Name] = model
	return nil
}

// checkProvider checks what a model's provider requires and allows: a
// model id, Azure's deployment and API version, the Responses API, an
// upstream asked for JSON.
func (b *builder) checkProvider(at string, m *ModelSpec, kind providerKind, known bool) error {
	switch {
	case m.Provider == "scripted":
		return b.errf(at+".provider", "scripted model %q has no script bound (scripted models exist only in scenarios)", m.Name)
	case m.Provider == "":
		return b.errf(at+".provider", "required (%s)", providerList)
	case !known:
		return b.errf(at+".provider", "unknown provider %q (want %s)", m.Provider, providerList)
	case kind.needsModel && m.Model == "":
		return b.errf(at+".model", "required for provider %s", m.Provider)
	case kind.azure && m.Model == driver.AnyModelID:
		return b.errf(at+".model", `"*" is not for provider azure: the deployment names the model`)
	}
	for _, f := range [...]struct {
		name, val string
	}{{"deployment", m.Deployment}, {"api_version", m.APIVersion}} {
		if kind.azure && f.val == "" {
			return b.errf(at+"."+f.name, "required for provider azure")
		}
		if !kind.azure && b.doc.Has(b.path(at+"."+f.name)) {
			return b.errf(at+"."+f.name, "only for provider azure")
		}
	}
	switch {
	case m.Region != "" && !kind.aws:
		return b.errf(at+".region", "only for provider bedrock")
	case m.Region != "" && !regionPattern.MatchString(m.Region):
		return b.errf(at+".region", "%q is not an AWS region (such as us-east-1)", m.Region)
	}
	if err := b.checkVertex(at, m, kind); err != nil {
		return err
	}
	switch {
	case m.API == "" || m.API == "chat":
	case m.API != "responses":
		return b.errf(at+".api", "%q is not an API (want chat or responses)", m.API)
	case kind.adapter != openaiPkg || kind.azure:
		return b.errf(at+".api", "responses is only for providers openai, openrouter, vllm and ollama")
	}
	switch {
	case !m.UpstreamJSON:
	case kind.adapter != openaiPkg:
		return b.errf(at+".upstream_json", "only for the OpenAI-compatible providers (openai, azure, openrouter, vllm, ollama): provider %s is always streamed", m.Provider)
	case m.API == "responses":
		return b.errf(at+".upstream_json", "only for api chat: the Responses API is always streamed")
	}
	return nil
}

// checkVertex checks a model's project and location: a vertex model's,
// unless it has an express-mode key (which names the project), and no
// other provider's.
func (b *builder) checkVertex(at string, m *ModelSpec, kind providerKind) error {
	for _, f := range [...]struct {
		name, val, what string
		re              *regexp.Regexp
	}{
		{"project", m.Project, "a Google Cloud project id (such as my-project)", projectPattern},
		{"location", m.Location, "a Vertex AI location (such as us-central1, or global)", locationPattern},
	} {
		switch {
		case !kind.vertex && b.doc.Has(b.path(at+"."+f.name)):
			return b.errf(at+"."+f.name, "only for provider vertex")
		case !kind.vertex:
		case f.val == "" && m.APIKeyEnv == "":
			return b.errf(at+"."+f.name, "required for provider vertex: %s, which the request's path names (or an express-mode key in api_key_env)", f.what)
		case f.val != "" && !f.re.MatchString(f.val):
			return b.errf(at+"."+f.name, "%q is not %s", f.val, f.what)
		}
	}
	return nil
}

// baseURL returns a model's base URL: the file's, checked, or its
// provider's default.
func (b *builder) baseURL(at string, m *ModelSpec, kind providerKind) (string, error) {
	baseURL := m.BaseURL
	if baseURL == "" {
		if kind.needsURL {
			what := "the server's URL, such as http://localhost:8000/v1"
			if kind.azure {
				what = "the resource's endpoint, such as https://NAME.openai.azure.com"
			}
			return "", b.errf(at+".base_url", "required for provider %s: %s", m.Provider, what)
		}
		baseURL = kind.defaultURL
	} else if u, err := url.Parse(baseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", b.errf(at+".base_url", "%q is not an absolute http(s) URL", baseURL)
	}
	return baseURL, nil
}

// checkModelFields checks the name of a model's key variable, its headers
// and its params.
func (b *builder) checkModelFields(at string, m *ModelSpec, kind providerKind) error {
	switch {
	case m.APIKeyEnv != "" && (!envPattern.MatchString(m.APIKeyEnv) || looksLikeSecret(m.APIKeyEnv)):
		// The value is never quoted: a key pasted here would otherwise
		// reach logs and CI output through this very error.
		return b.errf(at+".api_key_env", "not an environment variable name (letters, digits, '_'); it holds the NAME of the variable with the key, never the key (the value is not shown)")
	case m.APIKeyEnv == "" && kind.needsKey:
		return b.errf(at+".api_key_env", "required: the name of the environment variable holding the API key")
	}
	for h := range m.Headers {
		if !headerPattern.MatchString(h) {
			return b.errf(at+".headers."+h, "not a valid header name")
		}
	}
	for p := range m.Params {
		if !paramPattern.MatchString(p) {
			return b.errf(at+".params."+p, "not a top-level field name (letters, digits, '_', '-')")
		}
	}
	return nil
}

// lookupProvider finds a linked adapter's factory (a variable for tests:
// every test binary of this package links both adapters).
var lookupProvider = providers.Lookup

// looksLikeSecret tells a key pasted into api_key_env from a variable's
// name even when the key is made of name characters (sk_live_51Hx…):
// names are words; a long mix of lower case, upper case and digits is not.
func looksLikeSecret(s string) bool {
	return len(s) >= 24 && strings.ContainsAny(s, "abcdefghijklmnopqrstuvwxyz") &&
		strings.ContainsAny(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") && strings.ContainsAny(s, "0123456789")
}

// withKey makes name the key of a model the caller bound, so that the
// file's names are the keys whatever the model says.
func withKey(m driver.Model, name string) driver.Model {
	if m.Key() == name {
		return m
	}
	return &keyed{Model: m, key: name}
}

type keyed struct {
	driver.Model
	key string
}

func (k *keyed) Key() string      { return k.key }
func (k *keyed) Provider() string { p, _ := driver.Describe(k.Model); return p }
func (k *keyed) ModelID() string  { _, id := driver.Describe(k.Model); return id }

// Unwrap returns the model the caller bound, so a program that needs its
// concrete type (the gateway asks an OpenAI model which API it speaks) can
// reach it.
func (k *keyed) Unwrap() driver.Model { return k.Model }

// errUnbuilt is what a model of a validated policy answers: Validate
// builds no provider.
var errUnbuilt = errors.New("policy: a model of a validated policy cannot be called")

// unbuilt stands for a provider's model in Validate.
type unbuilt struct{ key, provider, id string }

func (u *unbuilt) Key() string      { return u.key }
func (u *unbuilt) Provider() string { return u.provider }
func (u *unbuilt) ModelID() string  { return u.id }
func (u *unbuilt) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	return nil, errUnbuilt
}
func (u *unbuilt) Stream(context.Context, *driver.Request) (driver.Stream, error) {
	return nil, errUnbuilt
}

func (b *builder) group(i int, gs *GroupSpec) (driver.Model, error) {
	at := fmt.Sprintf("groups[%d]", i)
	switch {
	case gs.Name == "":
		return nil, b.errf(at+".name", "required: the group's key, which rules and requests refer to")
	case !namePattern.MatchString(gs.Name):
		return nil, b.errf(at+".name", "%q is not a valid name (letters, digits, '.', '_', '-')", gs.Name)
	case b.p.Models[gs.Name] != nil:
		return nil, b.errf(at+".name", "%q is already the name of a model or group: names are keys, so they must be unique", gs.Name)
	}
	strategy := driver.WeightedRandom
	if gs.Strategy != "" {
		s, err := driver.ParseStrategy(gs.Strategy)
		if err != nil {
			return nil, b.errf(at+".strategy", "unknown strategy %q (want weighted, least-in-flight or latency)", gs.Strategy)
		}
		strategy = s
	}
	if len(gs.Models) == 0 {
		return nil, b.errf(at+".models", "at least one model is required")
	}
	if len(gs.Models) > driver.MaxGroupSize {
		return nil, b.errf(at+".models", "%d models (at most %d)", len(gs.Models), driver.MaxGroupSize)
	}
	deps := make([]driver.Model, len(gs.Models))
	seen := map[string]bool{}
	for j, name := range gs.Models {
		mat := fmt.Sprintf("%s.models[%d]", at, j)
		if seen[name] {
			return nil, b.errf(mat, "%q is listed twice", name)
		}
		seen[name] = true
		if _, ok := b.index[name]; !ok {
			if b.p.Models[name] != nil {
				return nil, b.errf(mat, "%q is a group: a group's members are models", name)
			}
			return nil, b.errf(mat, "unknown model %q (declare it under models)", name)
		}
		deps[j] = b.p.Models[name]
	}
	g := driver.Group(gs.Name, strategy, deps...)
	if gs.Weights != nil {
		if strategy != driver.WeightedRandom {
			return nil, b.errf(at+".weights", "only for the weighted strategy (this group's is %s)", strategy)
		}
		if len(gs.Weights) != len(gs.Models) {
			return nil, b.errf(at+".weights", "%d weights for %d models: give one per model, in order", len(gs.Weights), len(gs.Models))
		}
		for j, w := range gs.Weights {
			if w < 1 || w > math.MaxInt32 {
				return nil, b.errf(fmt.Sprintf("%s.weights[%d]", at, j), "must be a positive integer, got %d", w)
			}
		}
		g = g.WithWeights(gs.Weights...)
	}
	if err := g.Err(); err != nil {
		return nil, b.errf(at, "%v", err)
	}
	b.p.Models[gs.Name] = g
	return g, nil
}
