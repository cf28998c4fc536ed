package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/policy"
	"github.com/retryhost/retryhost/provider/anthropic"
	"github.com/retryhost/retryhost/provider/bedrock"
	"github.com/retryhost/retryhost/provider/gemini"
	"github.com/retryhost/retryhost/provider/openai"
)

// A Source loads the policy a Gateway serves: at New, and again at every
// Reload. Build one with [File] or [Bytes].
type Source struct {
	name string
	load func(ctx context.Context, opts policy.Options) (*policy.Policy, error)
	opts policy.Options
}

// File is the policy file at path, loaded with opts (see [policy.Load]).
func File(path string, opts policy.Options) Source {
	return Source{name: path, opts: opts, load: func(ctx context.Context, o policy.Options) (*policy.Policy, error) {
		return policy.Load(ctx, path, o)
	}}
}

// Bytes is a policy held in memory (name labels its errors).
func Bytes(name string, data []byte, opts policy.Options) Source {
	data = slices.Clone(data)
	if opts.Name == "" {
		opts.Name = name
	}
	return Source{name: name, opts: opts, load: func(ctx context.Context, o policy.Options) (*policy.Policy, error) {
		return policy.Parse(ctx, data, o)
	}}
}

// defaultBackoff is the backoff of a policy that gives no backoff.delay
// (policy.Options.DefaultBackoff; docs/decisions.md, "Why does the gateway
// default to a backoff and a cooldown?"): 1 s, doubling, up to 8 s, with
// equal jitter. Each wait is at least half its nominal value, so a model
// retried without Retry-After sees at most 2 attempts in any 1.5 s and 4 in
// any 3 s; full jitter could draw two near-zero waits in a row.
var defaultBackoff = driver.Backoff{Delay: time.Second, Factor: 2, MaxDelay: 8 * time.Second, Jitter: driver.JitterEqual}

// defaultCooldown is the cooldown of a policy with no "cooldown" and a
// rule that switches models (policy.Options.DefaultCooldown): 5
// consecutive timeouts, rate limits, overloads, 5xx or network errors on a
// model take it out of rotation for 1 s (or its longer Retry-After), then
// one request probes it; each probe that fails doubles the next cooldown,
// up to 10 s. A model back after a short outage is used again within a
// second or two; one that stays down costs a probe every 10 s, as a fixed
// 10 s cooldown did, which outlasted the short outages it was for.
var defaultCooldown = driver.Cooldown{Failures: 5, For: time.Second, Max: 10 * time.Second}

// defaultFirstContent and defaultGap are the first-content and gap
// deadlines of a policy that gives none (policy.Options.DefaultFirstContent
// and DefaultGap): an upstream that sends its headers, or some content, and
// then stays silent is failed over after them instead of holding the
// client until it gives up. Two minutes to first content leaves room for
// a reasoning model that thinks before it streams; a minute of silence
// mid-answer is the response-header timeout's own bound.
var (
	defaultFirstContent = 2 * time.Minute
	defaultGap          = time.Minute
)

// defaultHedge is the hedge of a policy that gives none, sets no
// first-content deadline and may switch models (policy.Options.
// DefaultHedge): an attempt with no first content after 10 s (a slow first
// token, an upstream that sends no headers) has the next model started
// beside it, and the first to answer is the client's. The slow one is not
// given up: a model that thinks for a minute before it streams still
// answers when the other is slower.
var defaultHedge = 10 * time.Second

// implicitRules are the rules of a policy that gives no "rules"
// (policy.Options.DefaultRules): a failure that is not the request's fails
// over to the next model, in the file's order (a rate limit, an overload,
// a 5xx, a cut or refused connection, a deadline, a refusal, an unknown
// error; the upstream refusing the gateway's credentials, 401 and 403; a
// 404, the model missing there), and once every model has been tried, a
// rate limit is retried on the last (3 attempts, its Retry-After or the
// backoff) and a server or network error once. What the request itself
// caused (a 400 such as a context length or a content filter, a 413, a
// 422) is the client's answer at once.
func implicitRules(models []string) []policy.RuleSpec {
	var rules []policy.RuleSpec
	if len(models) > 1 {
		health := &policy.MatchSpec{Class: []string{"rate-limit", "overloaded", "server", "network", "timeout", "refusal", "auth", "unknown"}}
		missing := &policy.MatchSpec{Status: []int{http.StatusNotFound}}
		for _, m := range models {
			rules = append(rules,
				policy.RuleSpec{When: health, Action: "switch", Model: m},
				policy.RuleSpec{When: missing, Action: "switch", Model: m})
		}
	}
	return append(rules,
		policy.RuleSpec{When: &policy.MatchSpec{Class: []string{"rate-limit"}}, Action: "retry", Attempts: 3},
		policy.RuleSpec{When: &policy.MatchSpec{Class: []string{"overloaded", "server", "network"}}, Action: "retry", Attempts: 2})
}

// Reload loads the Source again and, if it builds, serves the new policy to
// every request that starts from now on; requests in flight finish on the
// policy they started with, which is closed after the last of them. A
// policy that fails to load is an error and the old one stays.
//
// The load (compiling the policy's plugins) holds no lock: Close, Shutdown
// and SetAPIKeys never wait for it. A Reload whose ctx ends before its
// policy is in place is abandoned: its policy, if it was built anyway, is
// closed, the old one stays, and the error wraps ErrReloadAbandoned and
// ctx's cause. Of two Reloads that overlap, the one that started last wins:
// an older one that finishes after it is abandoned too.
func (g *Gateway) Reload(ctx context.Context) error {
	if g.cur.Load() == nil {
		return ErrShuttingDown // closed
	}
	seq := g.reloadSeq.Add(1)
	gen, err := g.load(ctx)
	if err == nil && ctx.Err() != nil {
		// Built, but too late: a loader that did not watch ctx.
		_ = gen.close(context.WithoutCancel(ctx))
		gen, err = nil, ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			return g.abandonReload(ctx, context.Cause(ctx))
		}
		g.stats.reloadFailures.Add(1)
		g.cfg.logger.LogAttrs(ctx, slog.LevelError, "policy reload rejected; the old policy stays",
			slog.String("source", g.src.name), slog.String("error", err.Error()))
		return err
	}
	g.reloadMu.Lock()
	if g.cur.Load() == nil { // closed meanwhile
		g.reloadMu.Unlock()
		_ = gen.close(context.WithoutCancel(ctx))
		return ErrShuttingDown
	}
	if seq < g.reloadDone {
		g.reloadMu.Unlock()
		_ = gen.close(context.WithoutCancel(ctx))
		return g.abandonReload(ctx, errReloadSuperseded)
	}
	g.reloadDone = seq
	g.cur.Swap(gen).release() // closes it after its last request
	g.startPoll(gen)
	g.reloadMu.Unlock()
	g.stats.reloads.Add(1)
	g.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "policy reloaded", slog.String("source", g.src.name),
		slog.Int("routes", len(gen.names)))
	g.warnUnpricedSpend(ctx)
	return nil
}

// ErrReloadAbandoned is wrapped by the error of a Reload that ended before
// its policy took effect: its ctx ended (a budget, a newer reload, a stop),
// or a newer Reload took effect first. The old policy stays.
var ErrReloadAbandoned = errors.New("gateway: policy reload abandoned; the old policy stays")

// errReloadSuperseded is the cause of a Reload overtaken by a newer one.
var errReloadSuperseded = errors.New("a newer reload took effect first")

// abandonReload counts and logs a Reload abandoned for cause.
func (g *Gateway) abandonReload(ctx context.Context, cause error) error {
	g.stats.reloadsAbandoned.Add(1)
	g.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "policy reload abandoned; the old policy stays",
		slog.String("source", g.src.name), slog.String("cause", cause.Error()))
	return fmt.Errorf("%w: %w", ErrReloadAbandoned, cause)
}

// upstreams names the providers of a policy's models (by ProviderOptions
// name) by the API they speak: a door translates its request's fields for
// each (parseChat, parseMessages).
type upstreams struct {
	// providers are those of its OpenAI-compatible models: forwarded
	// fields go there.
	providers []string
	// anthropic are those of its Anthropic models, which get the
	// Messages door's fields.
	anthropic []string
	// gemini are those of its Gemini models, which get the fields that
	// have a translation there (toGeminiFields).
	gemini []string
	// bedrock are those of its Bedrock models, which get the fields that
	// have a translation there as a bedrock.Options (toBedrockFields).
	bedrock []string
}

// generation is one loaded policy with its routes. Requests hold a
// reference while they run; the gateway holds one while it is current.
type generation struct {
	pol    *policy.Policy
	routes map[string]*route
	byKey  map[driver.Model]string // a model → its route name
	names  []string                // sorted
	upstreams
	// provOf names the provider (by ProviderOptions name) of each of its
	// adapters' models, by model name: the attempts
	// whose request may lack parameters they cannot honour
	// (chatRequest.unhonoured). A Bedrock model that is not Claude is
	// named by bedrockOthers, since it honours less than a Claude one.
	provOf  map[string]string
	created int64 // when the policy was loaded (Unix seconds), for /v1/models
	// hooked are the models the file built over the gateway's own upstream
	// client, whose streams wait only in bodies that run a flushHook.
	hooked map[driver.Model]bool
	// any are the models built with the id "*" (driver.AnyModelID): each
	// sends the model the client named.
	any map[driver.Model]bool
	// implicit is the route of a request that names no route, when the
	// policy starts on a "*" model: the request goes there with the name
	// it gave (nil: such a request is a 404).
	implicit *route

	refs   atomic.Int64
	closed sync.Once
	err    error
}

type route struct {
	name    string
	model   driver.Model
	ownedBy string // the provider behind the route, for /v1/models
	// id is the model the request names on this link (Request.ModelID),
	// which its "*" models send: the route's name, or on an implicit
	// route the client's.
	id       string
	implicit bool
}

// implicitRoute is the route of a request naming name, which is no
// route's: the policy's start, sending name.
func (gen *generation) implicitRoute(name string) *route {
	if gen.implicit == nil {
		return nil
	}
	rt := *gen.implicit
	rt.id, rt.implicit = name, true
	return &rt
}

// load loads the source's policy, with the gateway's hooks and defaults,
// into a new generation.
func (g *Gateway) load(ctx context.Context) (*generation, error) {
	o := g.loadOptions()
	p, err := g.src.load(ctx, o)
	if err != nil {
		return nil, err
	}
	gen := &generation{pol: p, routes: map[string]*route{}, byKey: map[driver.Model]string{}, created: time.Now().Unix(),
		hooked: map[driver.Model]bool{}, any: map[driver.Model]bool{}, provOf: map[string]string{}}
	// A provider name whose models all speak Chat Completions gets the
	// forwarded fields; one shared with a Responses API model does not
	// (ProviderOptions are keyed by provider name, not by model).
	chat, anth, gem, bed := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	for name, m := range p.Models {
		g.addRoute(gen, name, m, chat, anth, gem, bed)
	}
	for prov, ok := range chat {
		if ok && !anth[prov] {
			gen.providers = append(gen.providers, prov)
		}
	}
	for prov := range anth {
		if _, shared := chat[prov]; !shared { // one name for two APIs: neither gets raw fields
			gen.anthropic = append(gen.anthropic, prov)
		}
	}
	for prov := range gem {
		if _, shared := chat[prov]; !shared && !anth[prov] && !bed[prov] {
			gen.gemini = append(gen.gemini, prov)
		}
	}
	for prov := range bed {
		if _, shared := chat[prov]; !shared && !anth[prov] && !gem[prov] {
			gen.bedrock = append(gen.bedrock, prov)
		}
	}
	if base := p.Runner.Base(); gen.any[base] {
		gen.implicit = gen.routes[gen.byKey[base]]
	}
	slices.Sort(gen.names)
	slices.Sort(gen.providers)
	slices.Sort(gen.anthropic)
	slices.Sort(gen.gemini)
	slices.Sort(gen.bedrock)
	gen.refs.Store(1)
	return gen, nil
}

// loadOptions are the source's policy options with the gateway's hooks
// (commit, answer size, observers, upstream client) and its defaults.
func (g *Gateway) loadOptions() policy.Options {
	o := g.src.opts
	o.StreamOptions = append(slices.Clip(o.StreamOptions), driver.WithOnCommit(onCommit))
	if g.cfg.maxAnswer > 0 {
		o.StreamOptions = append(o.StreamOptions, driver.WithMaxAnswerBytes(g.cfg.maxAnswer))
	}
	o.RunnerOptions = append(slices.Clip(o.RunnerOptions), driver.WithObserver(observer{m: g.metrics, log: g.cfg.logger}))
	o.PluginCalls = pluginCall
	if g.tracing != nil {
		o.RunnerOptions = append(o.RunnerOptions, driver.WithObserver(g.tracing.telemetry))
		o.PluginCalls = func(ctx context.Context, c policy.PluginCall) {
			pluginCall(ctx, c)
			pluginEvent(ctx, c)
		}
	}
	o.HTTPClient = g.upstream
	o.RawChunks = true // logprobs, system_fingerprint, service_tier (rawfields.go); thinking signatures (messages_encode.go)
	g.gatewayDefaults(&o)
	// A non-streaming client's request is non-streamed upstream when the
	// policy needs no stream for it (policy.Options.DefaultUpstreamJSON):
	// a streamed answer collected costs the upstream and the gateway more
	// than the JSON answer a plain proxy relays. Stream options given in
	// code (transforms among them) are not the file's to judge: with
	// them, the models say for themselves.
	o.DefaultUpstreamJSON = len(g.src.opts.StreamOptions) == 0
	return o
}

// gatewayDefaults fills what the policy's file leaves unset with the
// gateway's defaults, their durations scaled by defaultsScale (tests).
func (g *Gateway) gatewayDefaults(o *policy.Options) {
	sc := g.cfg.defaultsScale
	if sc == 0 {
		sc = 1
	}
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * sc) }
	if o.DefaultBackoff == nil {
		b := defaultBackoff
		b.Delay, b.MaxDelay = scale(b.Delay), scale(b.MaxDelay)
		o.DefaultBackoff = &b
	}
	if o.DefaultRules == nil {
		o.DefaultRules = implicitRules
	}
	if o.DefaultEmptyAnswer == "" {
		o.DefaultEmptyAnswer = "fail" // a 200 with no content is an upstream's glitch: fail it over
	}
	if o.DefaultCooldown == nil {
		c := defaultCooldown
		c.For, c.Max = scale(c.For), scale(c.Max)
		o.DefaultCooldown = &c
	}
	if o.DefaultFirstContent == 0 {
		o.DefaultFirstContent = scale(defaultFirstContent)
	}
	if o.DefaultGap == 0 {
		o.DefaultGap = scale(defaultGap)
	}
	if o.DefaultHedge == 0 {
		o.DefaultHedge = scale(defaultHedge)
	}
}

// addRoute adds the route name of model m to gen, and notes in chat,
// anth, gem and bed which API m's provider speaks.
func (g *Gateway) addRoute(gen *generation, name string, m driver.Model, chat, anth, gem, bed map[string]bool) {
	if bound := g.src.opts.Models[name]; bound == nil && g.client != nil {
		gen.hooked[m] = true
	}
	inner := m
	for {
		u, ok := inner.(interface{ Unwrap() driver.Model })
		if !ok {
			break
		}
		inner = u.Unwrap()
	}
	owner := "retryhost" // a group, or a model bound in code without a provider
	if _, ok := inner.(driver.Described); ok {
		var id string
		owner, id = driver.Describe(inner)
		if id == driver.AnyModelID {
			gen.any[m] = true
		}
	}
	gen.routes[name] = &route{name: name, model: m, ownedBy: owner, id: name}
	gen.byKey[m] = name
	gen.names = append(gen.names, name)
	if om, ok := inner.(*openai.Model); ok {
		ok, seen := chat[om.Provider()]
		chat[om.Provider()] = (ok || !seen) && !om.ResponsesAPI()
		gen.provOf[name] = om.Provider()
	}
	if am, ok := inner.(*anthropic.Model); ok {
		anth[am.Provider()] = true
		gen.provOf[name] = am.Provider()
	}
	if gm, ok := inner.(*gemini.Model); ok {
		gem[gm.Provider()] = true
		gen.provOf[name] = gm.Provider()
	}
	if bm, ok := inner.(*bedrock.Model); ok {
		bed[bm.Provider()] = true
		gen.provOf[name] = bm.Provider()
		if !bm.Claude() {
			gen.provOf[name] = bedrockOthers(bm.Provider())
		}
	}
}

// acquire returns the current generation with a reference held, or nil
// once the gateway is closed.
func (g *Gateway) acquire() *generation {
	for {
		gen := g.cur.Load()
		if gen == nil {
			return nil
		}
		if n := gen.refs.Load(); n > 0 && gen.refs.CompareAndSwap(n, n+1) {
			return gen
		}
	}
}

// release drops a reference; the last one closes the policy.
func (gen *generation) release() {
	if gen.refs.Add(-1) == 0 {
		_ = gen.close(context.Background())
	}
}

func (gen *generation) close(ctx context.Context) error {
	gen.closed.Do(func() { gen.err = gen.pol.Close(ctx) })
	return gen.err
}

// name returns the route name of m, or its key if the policy does not name it.
func (gen *generation) name(m driver.Model) string {
	if n, ok := gen.byKey[m]; ok {
		return n
	}
	if m == nil {
		return ""
	}
	return m.Key()
}
