package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/internal/leaf/strict"
	"github.com/retryhost/retryhost/internal/link/providers"
	"github.com/retryhost/retryhost/internal/link/stateplug"
)

type builder struct {
	index  map[string]int // model name → its index in models
	doc    *strict.Doc
	prefix string
	opts   Options
	p      *Policy
	sb     *SandboxSpec
	// retryDelay is Options.DefaultBackoff's delay when the file gives no
	// backoff.delay: the wait of a retry that names none.
	retryDelay time.Duration
	raw        bool // Options.RawChunks, in a file whose commit rule is not legacy
	// plugins counts the plugin names given so far: a name given twice
	// (two files of one base name, a built-in used twice) gets "#2", "#3"
	// …, so that its logs, errors and metric series are its own.
	plugins map[string]int
}

func (b *builder) errf(path, format string, args ...any) error {
	if b.prefix != "" {
		path = strings.TrimSuffix(b.prefix+"."+path, ".")
	}
	return b.doc.Errorf(path, format, args...)
}

func dur(d *Duration) time.Duration {
	if d == nil {
		return 0
	}
	return time.Duration(*d)
}

func (b *builder) build(ctx context.Context, f *File) error {
	if len(f.Models) == 0 {
		return b.errf("models", "at least one model is required (the first is the base model)")
	}
	b.raw = b.opts.RawChunks && f.Commit != "legacy" // see Options.RawChunks
	for i := range f.Models {
		if err := b.model(i, &f.Models[i]); err != nil {
			return err
		}
	}
	groups := make([]driver.Model, 0, len(f.Groups))
	for i := range f.Groups {
		g, err := b.group(i, &f.Groups[i])
		if err != nil {
			return err
		}
		groups = append(groups, g)
	}
	b.sb = &f.Sandbox
	if d := b.opts.DefaultBackoff; d != nil && !b.doc.Has(b.path("backoff.delay")) {
		b.retryDelay = d.Delay
	}
	var ropts []driver.Option
	for i := range f.Rules {
		c, err := b.rule(ctx, i, &f.Rules[i])
		if err != nil {
			return err
		}
		ropts = append(ropts, driver.WithRules(c))
	}
	var sopts []driver.StreamOption
	for i := range f.Transforms {
		t, err := b.transform(ctx, i, &f.Transforms[i])
		if err != nil {
			return err
		}
		sopts = append(sopts, driver.WithTransforms(t))
	}
	models := make([]driver.Model, 0, len(f.Models))
	for _, m := range f.Models {
		models = append(models, b.p.Models[m.Name])
	}
	start := models[0]
	if f.Start != "" {
		if start = b.p.Models[f.Start]; start == nil {
			return b.errf("start", "unknown model or group %q", f.Start)
		}
	}
	ropts = append(ropts, driver.WithModels(models...), driver.WithModels(groups...), driver.WithLogger(b.opts.Logger))

	dl := f.Deadlines
	for _, l := range [...]struct {
		path string
		d    *Duration
		none string
	}{
		{"deadlines.attempt", dl.Attempt, "no deadline"}, {"deadlines.budget", dl.Budget, "no budget"},
		{"deadlines.first_content", dl.FirstContent, "no deadline"}, {"deadlines.gap", dl.Gap, "no deadline"},
		{"backoff.max_delay", f.Backoff.MaxDelay, "no cap"},
	} {
		// In Go, a zero duration is the documented way to say "none"; in
		// a file, "0s" reads as "no time at all", so it is refused rather
		// than silently meaning the opposite.
		if l.d != nil && *l.d == 0 {
			return b.errf(l.path, "\"0s\" would mean %s: omit the field for %s, or give a positive duration", l.none, l.none)
		}
	}
	ropts = append(ropts, driver.WithAttemptTimeout(dur(dl.Attempt)), driver.WithBudget(dur(dl.Budget)))
	first, gap := dur(dl.FirstContent), dur(dl.Gap)
	if dl.FirstContent == nil {
		first = b.opts.DefaultFirstContent
	}
	if dl.Gap == nil {
		gap = b.opts.DefaultGap
	}
	sopts = append(sopts, driver.WithFirstContentTimeout(first), driver.WithGapTimeout(gap))

	if h := f.Hedge; h != nil {
		max := 1
		switch {
		case h.After == nil:
			return b.errf("hedge.after", "required: how long an attempt may go without first content before a hedge starts")
		case *h.After <= 0:
			return b.errf("hedge.after", "must be a positive duration")
		case h.Max != nil && *h.Max < 1:
			return b.errf("hedge.max", "must be at least 1 (omit hedge to turn it off), got %d", *h.Max)
		case h.Max != nil:
			max = *h.Max
		}
		sopts = append(sopts, driver.WithHedge(dur(h.After), max))
	}

	bo := driver.Backoff{Delay: dur(f.Backoff.Delay), Factor: f.Backoff.Factor, MaxDelay: dur(f.Backoff.MaxDelay), Seed: f.Backoff.Seed}
	if bo.Factor != 0 && bo.Factor < 1 {
		return b.errf("backoff.factor", "factor %v is below 1", bo.Factor)
	}
	switch f.Backoff.Jitter {
	case "", "none":
	case "full":
		bo.Jitter = driver.JitterFull
	case "equal":
		bo.Jitter = driver.JitterEqual
	default:
		return b.errf("backoff.jitter", "unknown jitter %q (want none, full or equal)", f.Backoff.Jitter)
	}
	if d := b.opts.DefaultBackoff; d != nil && !b.doc.Has(b.path("backoff.delay")) {
		// No delay in the file: retries wait the default's delay (set on
		// each retry rule, so that a switch to another model does not
		// wait), grown, capped and jittered as the file says, else as the
		// default does.
		if f.Backoff.Factor == 0 {
			bo.Factor = d.Factor
		}
		if f.Backoff.MaxDelay == nil {
			bo.MaxDelay = d.MaxDelay
		}
		if f.Backoff.Jitter == "" {
			bo.Jitter = d.Jitter
		}
	}
	ropts = append(ropts, driver.WithBackoff(bo))
	if b.doc.Has(b.path("max_attempts")) {
		if f.MaxAttempts < 1 {
			return b.errf("max_attempts", "must be at least 1, got %d", f.MaxAttempts)
		}
		ropts = append(ropts, driver.WithMaxAttempts(f.MaxAttempts))
	}
	if f.RetryAfterCap != nil {
		ropts = append(ropts, driver.WithRetryAfterCap(dur(f.RetryAfterCap)))
	}
	if f.Sticky != "" {
		s, err := driver.ParseSticky(f.Sticky)
		if err != nil {
			return b.errf("sticky", "unknown sticky policy %q (want after-request, after-N-requests or after-N-seconds)", f.Sticky)
		}
		ropts = append(ropts, driver.WithSticky(s))
	}
	if cs := f.Cooldown; cs != nil {
		if cs.Failures < 1 {
			return b.errf("cooldown.failures", "must be at least 1, got %d", cs.Failures)
		}
		if dur(cs.For) <= 0 {
			return b.errf("cooldown.for", "a positive duration is required")
		}
		c := driver.Cooldown{Failures: cs.Failures, For: dur(cs.For)}
		if cs.When != nil {
			m, err := b.match("cooldown.when", cs.When)
			if err != nil {
				return err
			}
			c.When = m
		}
		ropts = append(ropts, driver.WithCooldown(c))
	} else if d := b.opts.DefaultCooldown; d != nil && !b.doc.Has(b.path("cooldown")) && switchesModel(f.Rules) {
		ropts = append(ropts, driver.WithCooldown(*d))
	}
	if rb := f.RetryBudget; rb != nil {
		bud := driver.RetryBudget{Percent: driver.DefaultBudgetPercent, MinRetries: driver.DefaultBudgetMinRetries}
		if rb.Percent != nil {
			if *rb.Percent < 1 || *rb.Percent > 100 {
				return b.errf("retry_budget.percent", "must be 1-100, got %d", *rb.Percent)
			}
			bud.Percent = *rb.Percent
		}
		if rb.MinRetries != nil {
			if *rb.MinRetries < 1 {
				return b.errf("retry_budget.min_retries", "must be at least 1 (a lone request could never retry), got %d", *rb.MinRetries)
			}
			bud.MinRetries = *rb.MinRetries
		}
		ropts = append(ropts, driver.WithRetryBudget(bud))
	}
	if f.State != nil {
		o, err := b.state(f.State)
		if err != nil {
			return err
		}
		if o != nil {
			ropts = append(ropts, o)
		}
	}
	switch f.Commit {
	case "", "output":
	case "legacy":
		sopts = append(sopts, driver.WithCommitRule(driver.CommitLegacy))
	default:
		return b.errf("commit", "unknown commit rule %q (want output or legacy)", f.Commit)
	}
	cont, err := b.afterCommit(f)
	if err != nil {
		return err
	}
	sopts = append(sopts, cont...)
	if f.Sandbox.Breaker != nil && f.Sandbox.Breaker.Failures < 0 {
		return b.errf("sandbox.breaker.failures", "must not be negative")
	}
	if _, err := b.memory(); err != nil {
		return err
	}
	r, err := driver.New(start, append(ropts, b.opts.RunnerOptions...)...)
	if err != nil {
		return b.errf("", "%v", err)
	}
	m, err := driver.NewRetryableModel(r, append(sopts, b.opts.StreamOptions...)...)
	if err != nil {
		return b.errf("", "%v", err)
	}
	b.p.Runner, b.p.Model = r, m
	return nil
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

func (b *builder) path(p string) string {
	if b.prefix == "" {
		return p
	}
	return b.prefix + "." + p
}

var (
	namePattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	envPattern    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	headerPattern = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	paramPattern  = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
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
}

const (
	openaiPkg    = "github.com/retryhost/retryhost/provider/openai"
	anthropicPkg = "github.com/retryhost/retryhost/provider/anthropic"
	providerList = "openai, azure, openrouter, vllm, ollama, anthropic or scripted"
)

var providerKinds = map[string]providerKind{
	"openai":     {adapter: openaiPkg, needsModel: true, needsKey: true},
	"azure":      {adapter: openaiPkg, needsKey: true, needsURL: true, azure: true},
	"openrouter": {adapter: openaiPkg, needsModel: true, needsKey: true, defaultURL: "https://openrouter.ai/api/v1"},
	"vllm":       {adapter: openaiPkg, needsModel: true, needsURL: true},
	"ollama":     {adapter: openaiPkg, needsModel: true, defaultURL: "http://localhost:11434/v1"},
	"anthropic":  {adapter: anthropicPkg, needsModel: true, needsKey: true},
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
	if bound, ok := b.opts.Models[m.Name]; ok && bound != nil {
		if _, known := providerKinds[m.Provider]; !known && m.Provider != "scripted" {
			return b.errf(at+".provider", "unknown provider %q (want %s)", m.Provider, providerList)
		}
		b.p.Models[m.Name] = withKey(bound, m.Name)
		return nil
	}
	kind, known := providerKinds[m.Provider]
	switch {
	case m.Provider == "scripted":
		return b.errf(at+".provider", "scripted model %q has no script bound (scripted models exist only in scenarios)", m.Name)
	case m.Provider == "":
		return b.errf(at+".provider", "required (%s)", providerList)
	case !known:
		return b.errf(at+".provider", "unknown provider %q (want %s)", m.Provider, providerList)
	case kind.needsModel && m.Model == "":
		return b.errf(at+".model", "required for provider %s", m.Provider)
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
	baseURL := m.BaseURL
	if baseURL == "" {
		if kind.needsURL {
			what := "the server's URL, such as http://localhost:8000/v1"
			if kind.azure {
				what = "the resource's endpoint, such as https://NAME.openai.azure.com"
			}
			return b.errf(at+".base_url", "required for provider %s: %s", m.Provider, what)
		}
		baseURL = kind.defaultURL
	} else if u, err := url.Parse(baseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return b.errf(at+".base_url", "%q is not an absolute http(s) URL", baseURL)
	}
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
	factory := lookupProvider(m.Provider)
	if factory == nil {
		return b.errf(at+".provider", "provider %s is not linked into this program: import _ %q", m.Provider, kind.adapter)
	}
	model, err := factory(providers.Spec{
		Key: m.Name, Provider: m.Provider, Model: m.Model, BaseURL: baseURL, APIKey: key,
		Headers: m.Headers, Params: m.Params, Deployment: m.Deployment, APIVersion: m.APIVersion,
		Responses: m.API == "responses", HTTPClient: b.opts.HTTPClient, RawChunks: b.raw,
		UpstreamJSON: m.UpstreamJSON,
	})
	if err != nil {
		return b.errf(at, "%v", err)
	}
	b.p.Models[m.Name] = model
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

func (b *builder) rule(ctx context.Context, i int, rs *RuleSpec) (driver.Condition, error) {
	at := fmt.Sprintf("rules[%d]", i)
	if (rs.When == nil) == (rs.Plugin == nil) {
		return nil, b.errf(at, "give exactly one of when (a native condition) or plugin (a Wasm condition)")
	}
	if rs.Plugin != nil {
		if rs.Action == "" { // before the load: a config that cannot work costs no compile
			if err := b.checkTargets(at+".plugin", rs.Plugin); err != nil {
				return nil, err
			}
		}
		p, err := b.plugin(ctx, at+".plugin", rs.Plugin)
		if err != nil {
			return nil, err
		}
		if !p.IsCondition() {
			return nil, b.errf(at+".plugin", "plugin %q is not a condition (it exports no retryhost_decide)", p.Name())
		}
		if rs.Action == "" {
			if err := b.noActionFields(at, rs); err != nil {
				return nil, err
			}
			if b.retryDelay > 0 {
				return &retryFloor{plugin: p, delay: b.retryDelay}, nil
			}
			return p, nil
		}
		r, err := b.action(at, rs, driver.And()) // the plugin is the matcher
		if err != nil {
			return nil, err
		}
		return &gated{plugin: p, rule: r}, nil
	}
	m, err := b.match(at+".when", rs.When)
	if err != nil {
		return nil, err
	}
	if rs.Action == "" {
		return nil, b.errf(at+".action", "required (switch, retry or give-up)")
	}
	return b.action(at, rs, m)
}

func (b *builder) noActionFields(at string, rs *RuleSpec) error {
	for _, f := range []string{"model", "attempts", "delay", "backoff", "timeout", "retry_after"} {
		if b.doc.Has(b.path(at + "." + f)) {
			return b.errf(at+"."+f, "only with an action (a plugin rule without one decides for itself)")
		}
	}
	return nil
}

func (b *builder) action(at string, rs *RuleSpec, m driver.Match) (*driver.Rule, error) {
	var r *driver.Rule
	switch rs.Action {
	case "switch":
		if rs.Model == "" {
			return nil, b.errf(at+".model", "required for a switch")
		}
		target := b.p.Models[rs.Model]
		if target == nil {
			return nil, b.errf(at+".model", "unknown model %q (declare it under models)", rs.Model)
		}
		r = m.Switch(target)
	case "retry":
		if rs.Model != "" {
			return nil, b.errf(at+".model", "only for a switch (retry stays on the failed attempt's model)")
		}
		r = m.Retry()
	case "give-up":
		for _, f := range []string{"model", "attempts", "delay", "backoff", "timeout", "retry_after"} {
			if b.doc.Has(b.path(at + "." + f)) {
				return nil, b.errf(at+"."+f, "not allowed with give-up")
			}
		}
		return m.GiveUp(), nil
	default:
		return nil, b.errf(at+".action", "unknown action %q (want switch, retry or give-up)", rs.Action)
	}
	if b.doc.Has(b.path(at + ".attempts")) {
		min := 1
		if rs.Action == "retry" {
			min = 2
		}
		if rs.Attempts < min {
			return nil, b.errf(at+".attempts", "%s needs at least %d attempts (the first counts), got %d", rs.Action, min, rs.Attempts)
		}
		r = r.Attempts(rs.Attempts)
	}
	if rs.Delay != nil {
		r = r.Delay(dur(rs.Delay))
	} else if rs.Action == "retry" && b.retryDelay > 0 {
		r = r.Delay(b.retryDelay)
	}
	if b.doc.Has(b.path(at + ".backoff")) {
		if !(rs.Backoff >= 1) {
			return nil, b.errf(at+".backoff", "factor %v is below 1", rs.Backoff)
		}
		r = r.Backoff(rs.Backoff)
	}
	if rs.Timeout != nil {
		if dur(rs.Timeout) <= 0 {
			return nil, b.errf(at+".timeout", "must be positive")
		}
		r = r.Timeout(dur(rs.Timeout))
	}
	if rs.RetryAfter != nil {
		if *rs.RetryAfter {
			r = r.UseRetryAfter()
		} else {
			r = r.IgnoreRetryAfter()
		}
	}
	return r, nil
}

func (b *builder) match(at string, ms *MatchSpec) (driver.Match, error) {
	var ms2 []driver.Match
	if ms.Any {
		ms2 = append(ms2, driver.AnyError())
	}
	if ms.Status != nil {
		if len(ms.Status) == 0 {
			return driver.Match{}, b.errf(at+".status", "empty list")
		}
		for j, s := range ms.Status {
			if s < 100 || s > 599 {
				return driver.Match{}, b.errf(fmt.Sprintf("%s.status[%d]", at, j), "%d is not an HTTP status (100-599)", s)
			}
		}
		ms2 = append(ms2, driver.OnStatus(ms.Status...))
	}
	if ms.StatusRange != nil {
		r := ms.StatusRange
		if len(r) != 2 || r[0] < 100 || r[1] > 599 || r[0] > r[1] {
			return driver.Match{}, b.errf(at+".status_range", "want [lo, hi] with 100 <= lo <= hi <= 599, got %v", r)
		}
		ms2 = append(ms2, driver.OnStatusRange(r[0], r[1]))
	}
	if ms.Class != nil {
		if len(ms.Class) == 0 {
			return driver.Match{}, b.errf(at+".class", "empty list")
		}
		cs := make([]abi.ErrorClass, len(ms.Class))
		for j, s := range ms.Class {
			c, ok := abi.ParseErrorClass(s)
			if !ok || c == abi.ClassNone {
				return driver.Match{}, b.errf(fmt.Sprintf("%s.class[%d]", at, j), "unknown error class %q (want one of %s)", s, classList())
			}
			cs[j] = c
		}
		ms2 = append(ms2, driver.OnClass(cs...))
	}
	if ms.Message != nil {
		for j, s := range ms.Message {
			if s == "" {
				return driver.Match{}, b.errf(fmt.Sprintf("%s.message[%d]", at, j), "empty substring (it would match every message)")
			}
		}
		if len(ms.Message) == 0 {
			return driver.Match{}, b.errf(at+".message", "empty list")
		}
		ms2 = append(ms2, driver.OnMessage(ms.Message...))
	}
	flag := func(p *bool, m driver.Match) {
		if p == nil {
			return
		}
		if *p {
			ms2 = append(ms2, m)
		} else {
			ms2 = append(ms2, driver.Not(m))
		}
	}
	flag(ms.Timeout, driver.Timeout())
	flag(ms.Canceled, driver.Canceled())
	if ms.Retryable != nil {
		ms2 = append(ms2, driver.Retryable(*ms.Retryable))
	}
	if ms.Finish != nil {
		if len(ms.Finish) == 0 {
			return driver.Match{}, b.errf(at+".finish", "empty list")
		}
		rs := make([]abi.Reason, len(ms.Finish))
		for j, s := range ms.Finish {
			r, ok := abi.ParseReason(s)
			if !ok {
				return driver.Match{}, b.errf(fmt.Sprintf("%s.finish[%d]", at, j), "unknown finish reason %q", s)
			}
			rs[j] = r
		}
		ms2 = append(ms2, driver.OnFinish(rs...))
	}
	switch len(ms2) {
	case 0:
		return driver.Match{}, b.errf(at, "no criterion (use {\"any\": true} to match every error)")
	case 1:
		return ms2[0], nil
	}
	return driver.And(ms2...), nil
}

func classList() string {
	var names []string
	for c := abi.ClassUnknown; ; c++ {
		s := c.String()
		if _, ok := abi.ParseErrorClass(s); !ok || (s == "unknown" && c != abi.ClassUnknown) {
			break
		}
		names = append(names, s)
	}
	return strings.Join(names, ", ")
}

func (b *builder) transform(ctx context.Context, i int, ts *TransformSpec) (driver.Transformer, error) {
	at := fmt.Sprintf("transforms[%d]", i)
	if (ts.Refusal == nil) == (ts.Plugin == nil) {
		return nil, b.errf(at, "give exactly one of refusal (the native detector) or plugin (a Wasm transform)")
	}
	if ts.Refusal != nil {
		c := driver.RefusalConfig{Phrases: ts.Refusal.Phrases}
		switch ts.Refusal.Reasoning {
		case "", "detach":
		case "hold":
			c.Reasoning = driver.ReasoningHold
		default:
			return nil, b.errf(at+".refusal.reasoning", "unknown reasoning %q (want detach or hold)", ts.Refusal.Reasoning)
		}
		d, err := driver.NewRefusalDetectorWith(c)
		if err != nil {
			return nil, b.errf(at+".refusal.phrases", "%v", err)
		}
		return d, nil
	}
	p, err := b.plugin(ctx, at+".plugin", ts.Plugin)
	if err != nil {
		return nil, err
	}
	if !p.IsTransform() {
		return nil, b.errf(at+".plugin", "plugin %q is not a transform", p.Name())
	}
	return p, nil
}

func (b *builder) plugin(ctx context.Context, at string, ps *PluginSpec) (*host.Plugin, error) {
	if n := btoi(ps.Path != "") + btoi(ps.Builtin != "") + btoi(ps.OCI != ""); n != 1 {
		return nil, b.errf(at, "give exactly one of path, builtin or oci")
	}
	if ps.FollowTag && ps.OCI == "" {
		return nil, b.errf(at+".follow_tag", "follow_tag applies to an oci reference only")
	}
	var lo []host.LoadOption
	if ps.SHA256 != "" {
		if len(ps.SHA256) != 64 || strings.Trim(strings.ToLower(ps.SHA256), "0123456789abcdef") != "" {
			return nil, b.errf(at+".sha256", "want 64 hex digits, got %q", ps.SHA256)
		}
		lo = append(lo, host.WithSHA256(ps.SHA256))
	}
	if len(ps.Config) > 0 {
		var s string
		if err := json.Unmarshal(ps.Config, &s); err == nil {
			lo = append(lo, host.WithConfig([]byte(s)))
		} else {
			lo = append(lo, host.WithConfig(ps.Config))
		}
	}
	if ps.Instances < 0 {
		return nil, b.errf(at+".instances", "must not be negative")
	}
	if ps.Instances > 0 {
		lo = append(lo, host.WithInstances(ps.Instances))
	}
	var wasm []byte
	name := ps.Builtin
	if ps.Builtin != "" {
		var ok bool
		if b.opts.Builtin != nil {
			wasm, ok = b.opts.Builtin(ps.Builtin)
		}
		if !ok {
			return nil, b.errf(at+".builtin", "unknown built-in plugin %q", ps.Builtin)
		}
	} else if ps.OCI != "" {
		sum, mod, err := b.ociModule(ctx, at, ps)
		if err != nil {
			return nil, err
		}
		if ps.SHA256 != "" && !strings.EqualFold(ps.SHA256, sum) {
			return nil, b.errf(at+".sha256", "the module behind %s has sha256 %s", ps.OCI, sum)
		}
		wasm, name = mod, ociName(ps.OCI)
		lo = append(lo, host.WithSHA256(sum))
	} else {
		path := ps.Path
		if !filepath.IsAbs(path) && b.opts.Dir != "" {
			path = filepath.Join(b.opts.Dir, path)
		}
		rt, err := b.runtime(ctx)
		if err != nil {
			return nil, err
		}
		// Read no more than the module size limit allows (+1, so Load
		// rejects it by that limit): a device or an endless pipe is not
		// read until memory runs out.
		if wasm, err = readAtMost(path, int64(rt.ModuleLimits().ModuleBytes)+1); err != nil {
			return nil, b.errf(at+".path", "%v", err)
		}
		name = filepath.Base(ps.Path)
	}
	if b.plugins == nil {
		b.plugins = map[string]int{}
	}
	if b.plugins[name]++; b.plugins[name] > 1 {
		name = fmt.Sprintf("%s#%d", name, b.plugins[name])
	}
	rt, err := b.runtime(ctx)
	if err != nil {
		return nil, err
	}
	p, err := rt.Load(ctx, name, wasm, lo...)
	if err != nil {
		return nil, b.errf(at, "%v", err)
	}
	switch ps.Fail {
	case "":
	case "open", "closed":
		pol := p.Policy()
		pol.Fail = abi.FailOpen
		if ps.Fail == "closed" {
			pol.Fail = abi.FailClosed
		}
		// The policy is applied at load: load again with it (a plugin is
		// cheap to load twice, and the host keeps its policy immutable).
		_ = p.Close(ctx)
		if p, err = rt.Load(ctx, name, wasm, append(lo, host.WithPolicy(pol))...); err != nil {
			return nil, b.errf(at, "%v", err)
		}
	default:
		return nil, b.errf(at+".fail", "unknown fail policy %q (want open or closed)", ps.Fail)
	}
	return p, nil
}

func (b *builder) runtime(ctx context.Context) (*host.Runtime, error) {
	if b.p.Runtime != nil {
		return b.p.Runtime, nil
	}
	sb := b.sb
	ho := []host.Option{host.WithLogger(b.opts.Logger)}
	mem, err := b.memory()
	if err != nil {
		return nil, err
	}
	if mem > 0 {
		ho = append(ho, host.WithMemoryLimit(mem))
	}
	if sb.CallTimeout != nil {
		if dur(sb.CallTimeout) <= 0 {
			return nil, b.errf("sandbox.call_timeout", "must be positive")
		}
		ho = append(ho, host.WithCallTimeout(dur(sb.CallTimeout)))
	}
	if sb.Trusted {
		ho = append(ho, host.WithTrusted())
	}
	if sb.Interpreter {
		ho = append(ho, host.WithInterpreter())
	}
	if sb.Breaker != nil {
		ho = append(ho, host.WithBreaker(sb.Breaker.Failures, time.Duration(sb.Breaker.Span)))
	}
	rt, err := host.New(ctx, append(ho, b.opts.HostOptions...)...)
	if err != nil {
		return nil, b.errf("sandbox", "%v", err)
	}
	b.p.Runtime = rt
	return rt, nil
}

var errMemory = errors.New("want a byte count (an integer) or a size such as \"16MiB\"")

// memory parses sandbox.memory; 0 means the default.
func (b *builder) memory() (uint64, error) {
	raw := b.sb.Memory
	if len(raw) == 0 {
		return 0, nil
	}
	var n uint64
	if err := json.Unmarshal(raw, &n); err != nil {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, b.errf("sandbox.memory", "%v", errMemory)
		}
		mult := uint64(1)
		for _, u := range []struct {
			suf string
			m   uint64
		}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
			if v, ok := strings.CutSuffix(s, u.suf); ok {
				s, mult = strings.TrimSpace(v), u.m
				break
			}
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, b.errf("sandbox.memory", "%v, got %s", errMemory, raw)
		}
		n = v * mult
	}
	if n < 64<<10 {
		return 0, b.errf("sandbox.memory", "%d bytes is below one 64 KiB page", n)
	}
	return n, nil
}

// gated is a Wasm condition used as a matcher: any opinion it gives counts
// as a match for the rule's own action.
type gated struct {
	plugin *host.Plugin
	rule   *driver.Rule
}

func (g *gated) Decide(ctx context.Context, a *driver.Attempt) (driver.Decision, error) {
	d, err := g.plugin.Decide(ctx, a)
	if err != nil || d.Action == abi.ActionNone {
		return driver.Decision{}, err
	}
	return g.rule.Decide(ctx, a)
}

// FailPolicy is the plugin's.
func (g *gated) FailPolicy() abi.FailPolicy { return g.plugin.FailPolicy() }

// retryFloor is a plugin condition that decides its own action, in a
// policy with a default backoff (Options.DefaultBackoff): a retry it
// decides without a delay waits the default's.
type retryFloor struct {
	plugin *host.Plugin
	delay  time.Duration
}

func (r *retryFloor) Decide(ctx context.Context, a *driver.Attempt) (driver.Decision, error) {
	d, err := r.plugin.Decide(ctx, a)
	if err == nil && d.Action == abi.ActionRetry && d.Delay == 0 {
		d.Delay = r.delay
	}
	return d, err
}

// FailPolicy is the plugin's.
func (r *retryFloor) FailPolicy() abi.FailPolicy { return r.plugin.FailPolicy() }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ociName names a plugin after its repository's last element:
// registry.example.com/team/refusal@sha256:… is "refusal".
func ociName(ref string) string {
	if i := strings.IndexAny(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, "/"); i >= 0 {
		ref = ref[i+1:]
	}
	if i := strings.Index(ref, ":"); i >= 0 {
		ref = ref[:i]
	}
	return ref
}

// redisURLForms is what checkRedisURL's errors show.
const redisURLForms = "redis://host:port/db (rediss:// for TLS, or unix:///path), redis+sentinel://sentinel:port/db?master_name=NAME&addr=sentinel2:port, or redis+cluster://node:port?addr=node2:port (rediss+… for TLS)"

// checkRedisURL checks a state URL's form without go-redis, which a
// policy does not link: the scheme names a topology, a host (or a path
// for unix://) is there, a Sentinel URL names its primary, a cluster has
// no database, every addr parameter is a host:port, and no password is in
// it. go-redis checks the rest (its own query parameters) when the state
// is built. It returns "" for a URL it accepts.
func checkRedisURL(raw string) string {
	if raw == "" {
		return "required: the server, as " + redisURLForms
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "not a URL: " + redisURLForms
	}
	scheme := strings.ToLower(u.Scheme)
	base, topo, _ := strings.Cut(scheme, "+")
	q := u.Query()
	switch {
	case base != "redis" && base != "rediss" && !(base == "unix" && topo == ""),
		topo != "" && topo != "sentinel" && topo != "cluster":
		return fmt.Sprintf("scheme %q is not one of redis, rediss, unix, redis+sentinel, rediss+sentinel, redis+cluster, rediss+cluster: %s", u.Scheme, redisURLForms)
	case base != "unix" && u.Host == "":
		return "no host: " + redisURLForms
	case base == "unix" && u.Path == "":
		return "no socket path: unix:///path/to/redis.sock"
	case topo == "sentinel" && q.Get("master_name") == "":
		return "a Sentinel URL names the primary the Sentinels watch: ?master_name=NAME"
	case topo != "sentinel" && q.Has("master_name"):
		return "master_name is for a redis+sentinel:// url"
	case topo == "cluster" && strings.Trim(u.Path, "/") != "":
		return "a cluster has only database 0: no /db in a redis+cluster:// url"
	case topo == "" && q.Has("addr"):
		return "addr parameters are for redis+sentinel:// and redis+cluster:// urls (more Sentinels, more seed nodes)"
	case q.Has("password") || q.Has("sentinel_password"):
		return "the URL holds a password: put it in an environment variable named by password_env (sentinel_password_env for the Sentinels')"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			return "the URL holds a password: put it in an environment variable named by password_env (sentinel_password_env for the Sentinels')"
		}
	}
	for _, a := range q["addr"] {
		if h, p, err := net.SplitHostPort(a); err != nil || h == "" || p == "" {
			return fmt.Sprintf("addr %q is not a host:port", a)
		}
	}
	return ""
}

// lookupState finds a linked state store's factory (a variable for tests).
var lookupState = stateplug.Lookup

// state builds the shared state the file names, or checks it (Validate:
// no connection).
func (b *builder) state(ss *StateSpec) (driver.Option, error) {
	rs := ss.Redis
	if rs == nil {
		return nil, b.errf("state", "name the store to share the state in: \"state\": {\"redis\": {\"url\": \"redis://host:6379/0\"}}")
	}
	spec := stateplug.Spec{Kind: "redis", URL: rs.URL, Prefix: rs.Prefix, OpTimeout: dur(rs.OpTimeout), Logger: b.opts.Logger}
	if msg := checkRedisURL(rs.URL); msg != "" {
		return nil, b.errf("state.redis.url", "%s", msg)
	}
	if rs.OpTimeout != nil && *rs.OpTimeout <= 0 {
		return nil, b.errf("state.redis.op_timeout", "must be a positive duration")
	}
	if rs.PasswordEnv != "" {
		if looksLikeSecret(rs.PasswordEnv) || !envPattern.MatchString(rs.PasswordEnv) {
			return nil, b.errf("state.redis.password_env", "not an environment variable name (letters, digits, '_'); it holds the NAME of the variable with the password, never the password (the value is not shown)")
		}
		if !b.opts.validate {
			if spec.Password = b.opts.Getenv(rs.PasswordEnv); spec.Password == "" {
				return nil, b.errf("state.redis.password_env", "environment variable %s is not set", rs.PasswordEnv)
			}
		}
	}
	if rs.SentinelPasswordEnv != "" {
		if !strings.Contains(strings.ToLower(rs.URL), "+sentinel://") {
			return nil, b.errf("state.redis.sentinel_password_env", "only for a redis+sentinel:// or rediss+sentinel:// url")
		}
		if looksLikeSecret(rs.SentinelPasswordEnv) || !envPattern.MatchString(rs.SentinelPasswordEnv) {
			return nil, b.errf("state.redis.sentinel_password_env", "not an environment variable name (letters, digits, '_'); it holds the NAME of the variable with the Sentinels' password, never the password (the value is not shown)")
		}
		if !b.opts.validate {
			if spec.SentinelPassword = b.opts.Getenv(rs.SentinelPasswordEnv); spec.SentinelPassword == "" {
				return nil, b.errf("state.redis.sentinel_password_env", "environment variable %s is not set", rs.SentinelPasswordEnv)
			}
		}
	}
	if b.opts.validate {
		return nil, nil
	}
	f := lookupState("redis")
	if f == nil {
		return nil, b.errf("state.redis", "the Redis state is not linked into this program: import _ \"github.com/retryhost/retryhost/state/redis\"")
	}
	st, err := f(spec)
	if err != nil {
		return nil, b.errf("state.redis", "%v", err)
	}
	b.p.closers = append(b.p.closers, st.Close)
	b.p.stats = st.Stats
	return st.Option, nil
}

// ociModule fetches the module behind an "oci" plugin. A reference is
// fetched once per load, so two plugins naming the same tag get the same
// module even if the tag moves during the load. A tag needs follow_tag,
// and is then recorded for Policy.Moved.
func (b *builder) ociModule(ctx context.Context, at string, ps *PluginSpec) (string, []byte, error) {
	tag := !strings.Contains(ps.OCI, "@")
	switch {
	case tag && !ps.FollowTag:
		return "", nil, b.errf(at+".oci", "%s names a tag, not a digest: pin it (…@sha256:…), or set \"follow_tag\": true to follow the tag", ps.OCI)
	case !tag && ps.FollowTag:
		return "", nil, b.errf(at+".follow_tag", "%s is pinned by digest, which never moves: follow_tag needs a tag", ps.OCI)
	case tag && ps.SHA256 != "":
		return "", nil, b.errf(at+".sha256", "a followed tag's module changes: pin a digest (…@sha256:…) instead of sha256")
	case b.opts.OCI == nil:
		return "", nil, b.errf(at+".oci", "an oci plugin needs Options.OCI (package oci)")
	}
	for _, f := range b.p.fetched {
		if f.ref == ps.OCI {
			return f.sum, f.wasm, nil
		}
	}
	src := b.opts.OCI(ps.OCI)
	sum, wasm, err := src.Fetch(ctx, "")
	if err != nil {
		return "", nil, b.errf(at+".oci", "%v", err)
	}
	b.p.fetched = append(b.p.fetched, fetched{ref: ps.OCI, src: src, sum: sum, wasm: wasm, tag: tag})
	return sum, wasm, nil
}

// switchesModel reports whether a rule may move a request to another
// model: a switch rule, or a plugin rule that decides its own action. A
// policy without one has nowhere to send a request while its model cools
// down, so a default cooldown would only reroute it to a model no rule
// names.
func switchesModel(rules []RuleSpec) bool {
	for _, r := range rules {
		if r.Action == "switch" || (r.Plugin != nil && r.Action == "") {
			return true
		}
	}
	return false
}

// readAtMost reads the file at path, stopping after n bytes.
func readAtMost(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

// afterCommit reads what a stream does after commit: the policy's
// after_commit and its models' and groups' own, the continuation limit and
// prompt, the throughput floor.
func (b *builder) afterCommit(f *File) ([]driver.StreamOption, error) {
	var sopts []driver.StreamOption
	mode := func(path, s string) (driver.AfterCommit, error) {
		a, err := driver.ParseAfterCommit(s)
		if err != nil {
			return 0, b.errf(path, "unknown after_commit %q (want error or continue)", s)
		}
		return a, nil
	}
	if f.AfterCommit != "" {
		a, err := mode("after_commit", f.AfterCommit)
		if err != nil {
			return nil, err
		}
		sopts = append(sopts, driver.WithAfterCommit(a))
	}
	on := func(path, name, s string) error {
		if s == "" {
			return nil
		}
		a, err := mode(path, s)
		if err != nil {
			return err
		}
		sopts = append(sopts, driver.WithAfterCommitOn(b.p.Models[name], a))
		return nil
	}
	for i, m := range f.Models {
		if err := on(fmt.Sprintf("models[%d].after_commit", i), m.Name, m.AfterCommit); err != nil {
			return nil, err
		}
	}
	for i, g := range f.Groups {
		if err := on(fmt.Sprintf("groups[%d].after_commit", i), g.Name, g.AfterCommit); err != nil {
			return nil, err
		}
	}
	if n := f.MaxContinuations; n != nil {
		if *n < 1 {
			return nil, b.errf("max_continuations", "must be at least 1 (after_commit: error turns continuation off), got %d", *n)
		}
		sopts = append(sopts, driver.WithMaxContinuations(*n))
	}
	if f.ContinuationPrompt != "" {
		sopts = append(sopts, driver.WithContinuationPrompt(f.ContinuationPrompt))
	}
	if tf := f.ThroughputFloor; tf != nil {
		switch {
		case !(tf.CharsPerSecond > 0):
			return nil, b.errf("throughput_floor.chars_per_second", "a positive rate is required, got %v", tf.CharsPerSecond)
		case tf.Window == nil || *tf.Window <= 0:
			return nil, b.errf("throughput_floor.window", "a positive duration is required")
		}
		sopts = append(sopts, driver.WithThroughputFloor(tf.CharsPerSecond, dur(tf.Window)))
	}
	return sopts, nil
}
