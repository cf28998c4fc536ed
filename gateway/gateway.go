package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/policy"
	"github.com/retryhost/retryhost/provider/anthropic"
	"github.com/retryhost/retryhost/provider/openai"
)

// ErrShuttingDown is the cause of a request the gateway ended because it
// was shutting down (Shutdown's drain deadline passed, or Close).
var ErrShuttingDown = errors.New("retryhost gateway: shutting down")

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
// model take it out of rotation for 10 s (or its longer Retry-After),
// then one request probes it.
var defaultCooldown = driver.Cooldown{Failures: 5, For: 10 * time.Second}

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

// Option configures a Gateway.
type Option func(*config) error

type config struct {
	keys            [][sha256.Size]byte
	maxBody         int64
	maxConcurrent   int
	maxPerClient    int // 0: maxConcurrent/defaultPerClientShare
	upstreamConns   int
	headerTimeout   time.Duration
	writeTimeout    time.Duration
	readTimeout     time.Duration
	logger          *slog.Logger
	retryAfterBusy  time.Duration
	httpClientGiven bool
	pluginPoll      time.Duration
	collectors      []prometheus.Collector
	maxAnswer       int64 // WithMaxAnswerBytes; 0: the driver's default
}

// WithAPIKeys makes every endpoint but /healthz and /readyz require one of
// keys, as "Authorization: Bearer KEY" (what OpenAI clients send) or
// "X-Api-Key: KEY" (a request with both is served if either is a key);
// anything else gets 401. Keys are compared in constant
// time, each against its SHA-256. Calling it again adds keys; empty keys are
// an error. Whitespace around a key is not part of it (a key read with
// os.ReadFile keeps its final newline), as it is not of the key a client
// sends. Default: no keys, every client is served (bind to loopback).
func WithAPIKeys(keys ...string) Option {
	return func(c *config) error {
		for i, k := range keys {
			k = strings.TrimSpace(k)
			if k == "" {
				return fmt.Errorf("gateway: API key %d is empty", i)
			}
			c.keys = append(c.keys, sha256.Sum256([]byte(k)))
		}
		return nil
	}
}

// WithMaxBodyBytes caps a request body; a larger one gets 413. Default 8 MiB.
func WithMaxBodyBytes(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("gateway: max body bytes must be positive, got %d", n)
		}
		c.maxBody = n
		return nil
	}
}

// WithMaxAnswerBytes caps the answer a non-streaming request holds until it
// is complete (it commits at its end, driver.CommitAtEnd), per attempt, as
// driver.WithMaxAnswerBytes counts it; past it the attempt fails
// (driver.ErrAnswerTooLarge) and the policy's rules decide; a request whose
// every attempt failed so gets 502 (code answer_too_large). Streams are not
// bounded by it: they hold nothing past their preamble. Default 32 MiB
// (driver.DefaultMaxAnswerBytes).
func WithMaxAnswerBytes(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("gateway: max answer bytes must be positive, got %d", n)
		}
		c.maxAnswer = n
		return nil
	}
}

// WithMaxConcurrent caps the chat requests in flight; one more gets 429
// with Retry-After from the gateway itself, without reaching any upstream.
// Default 1024.
func WithMaxConcurrent(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("gateway: max concurrent requests must be positive, got %d", n)
		}
		c.maxConcurrent = n
		return nil
	}
}

// defaultPerClientShare: by default one client may hold a quarter of the
// WithMaxConcurrent slots, so that a client trickling its bodies (each
// holds its slot for up to WithReadTimeout) cannot hold them all.
const defaultPerClientShare = 4

// WithMaxConcurrentPerClient caps the chat requests in flight from one
// client: the API key it presents when the gateway requires keys, else its
// remote IP address. One more gets 429 (code client_busy) with
// Retry-After. Behind a proxy without keys every request comes from the
// proxy's address: raise the cap to WithMaxConcurrent's there. Default: a
// quarter of WithMaxConcurrent (256 of 1024), at least 1.
func WithMaxConcurrentPerClient(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("gateway: max concurrent requests per client must be positive, got %d", n)
		}
		c.maxPerClient = n
		return nil
	}
}

// The buffers of each HTTP/1.1 connection of the gateway's upstream client
// (net/http's default is 4 KiB each). A held stream keeps its connection,
// so these are memory per open stream. The read buffer only batches reads
// for the SSE line reader above it, which has its own buffer (and a read
// bigger than the buffer bypasses it), so 2 KiB costs at most a read more
// for a burst past it. The write buffer carries only the request's headers:
// net/http flushes them on their own (the SDK's body is not a reader it
// knows to be in memory) and then copies the body to the connection past
// the buffer, so a request is two writes with 4 KiB or 1 KiB alike while its
// headers fit (about 630 bytes with a 164-character API key;
// TestUpstreamRequestWrites). An HTTP/2 upstream multiplexes streams on a
// connection with buffers of its own.
const (
	upstreamReadBuffer  = 2 << 10
	upstreamWriteBuffer = 1 << 10
)

// upstreamMaxHeaderBytes bounds an upstream's response headers (net/http's
// default is 10 MiB, per request in flight). Providers send a few KiB;
// Envoy's default cap is 60 KiB. Past it the attempt fails as a cut
// connection and the rules decide.
const upstreamMaxHeaderBytes = 64 << 10

// WithUpstreamConns caps the connections to each upstream host (idle and
// active; requests beyond it wait for one). Default 256. It applies when the
// Source's policy.Options bring no HTTPClient of their own.
func WithUpstreamConns(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("gateway: upstream connections must be positive, got %d", n)
		}
		c.upstreamConns = n
		return nil
	}
}

// WithUpstreamHeaderTimeout bounds the wait for an upstream's response
// headers; past it the attempt fails as a timeout (and fails over as the
// policy says). The policy's first-content deadline bounds the wait for
// content as well. Default 60s. It applies to streaming clients' requests,
// when the Source's policy.Options bring no HTTPClient of their own: a
// non-streaming client's request may be non-streamed upstream (a model's
// "upstream_json"), whose headers come with the whole answer, so the
// first-content deadline alone bounds it.
func WithUpstreamHeaderTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("gateway: upstream header timeout must be positive, got %v", d)
		}
		c.headerTimeout = d
		return nil
	}
}

// WithWriteTimeout bounds each write to a client (one SSE event, or the
// whole JSON answer): a client that stops reading loses its stream instead
// of holding an upstream open. Default 30s.
func WithWriteTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("gateway: write timeout must be positive, got %v", d)
		}
		c.writeTimeout = d
		return nil
	}
}

// WithReadTimeout bounds the reading of a request's body; past it the
// answer is 408. A request holds one of the WithMaxConcurrent slots while
// its body arrives (the slots also bound the bodies held in memory at
// once), so the timeout bounds how long a client that trickles its body
// holds one, not whether it does: a client that trickles many bodies at
// once holds at most its share of the slots (WithMaxConcurrentPerClient). It bounds the body of a request answered without reading it
// too (a missing key, /healthz …): see ServeHTTP. Default 30s.
func WithReadTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("gateway: read timeout must be positive, got %v", d)
		}
		c.readTimeout = d
		return nil
	}
}

// WithLogger sets where access logs (one record per request, at Info, with
// no prompt or output text) and reloads go. Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("gateway: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithMetrics registers more Prometheus collectors in the gateway's own
// registry, served on /metrics beside its series: for example the calls
// into the policy's Wasm plugins, counted by a host.Observer the caller
// installs through policy.Options.HostOptions (as retryhost serve does;
// the gateway does not see the Wasm host). A collector that clashes with
// another is an error from New. Default: none.
func WithMetrics(cs ...prometheus.Collector) Option {
	return func(c *config) error {
		for i, x := range cs {
			if x == nil {
				return fmt.Errorf("gateway: metrics collector %d is nil", i)
			}
		}
		c.collectors = append(c.collectors, cs...)
		return nil
	}
}

// Gateway is the OpenAI-compatible fail-over gateway, an http.Handler. Build
// it with [New]; Close it to release its policy. It is safe for concurrent
// use.
type Gateway struct {
	cfg     config
	src     Source
	mux     *http.ServeMux
	client  *http.Client // the upstreams' client when the gateway made it; nil otherwise
	stats   *stats
	metrics *metrics

	reloadMu   sync.Mutex // orders Reload's swap against another's and Close's
	reloadSeq  atomic.Uint64
	reloadDone uint64 // the seq of the Reload in place; under reloadMu
	cur        atomic.Pointer[generation]

	keys atomic.Pointer[[][sha256.Size]byte] // the client keys' SHA-256 (WithAPIKeys, SetAPIKeys); nil: open

	sem       chan struct{}  // chat requests in flight
	perClient map[string]int // chat requests in flight by client (clientOf); under mu

	mu sync.Mutex // orders draining's setting against enter's inflight.Add
	// draining: Shutdown or Close began. Set under mu; read without it
	// where no admission depends on it (readyz, a stream's end: see relay).
	draining atomic.Bool
	unready  atomic.Bool // Unready: /readyz is 503 while requests are still served
	inflight sync.WaitGroup
	stopCtx  context.Context // done when in-flight requests must end (drain deadline, Close)
	stop     context.CancelCauseFunc

	poller pluginPoller // follows the policy's tagged plugins (WithPluginPoll)

	openers *openers // run the opening of policy requests off the handlers' stacks
}

// New loads src's policy and returns the gateway serving it. Every policy
// mistake is reported here.
func New(ctx context.Context, src Source, opts ...Option) (*Gateway, error) {
	if src.load == nil {
		return nil, errors.New("gateway: empty Source (use gateway.File or gateway.Bytes)")
	}
	g := &Gateway{src: src, cfg: config{
		maxBody: 8 << 20, maxConcurrent: 1024, upstreamConns: 256,
		headerTimeout: 60 * time.Second, writeTimeout: 30 * time.Second, readTimeout: 30 * time.Second,
		retryAfterBusy: time.Second, pluginPoll: defaultPluginPoll,
	}, stats: &stats{}, openers: newOpeners(defaultMaxIdleOpeners())}
	g.stats.cur = g.cur.Load
	g.metrics = newMetrics(g.stats)
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("gateway: nil option")
		}
		if err := o(&g.cfg); err != nil {
			return nil, err
		}
	}
	if g.cfg.logger == nil {
		g.cfg.logger = slog.New(slog.DiscardHandler)
	}
	for _, c := range g.cfg.collectors {
		if err := g.metrics.reg.Register(c); err != nil {
			return nil, fmt.Errorf("gateway: WithMetrics: %w", err)
		}
	}
	if src.opts.HTTPClient == nil {
		g.client = &http.Client{Transport: &http.Transport{
			Proxy:                  http.ProxyFromEnvironment,
			DialContext:            (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:      true,
			MaxIdleConns:           g.cfg.upstreamConns * 4,
			MaxIdleConnsPerHost:    g.cfg.upstreamConns,
			MaxConnsPerHost:        g.cfg.upstreamConns,
			IdleConnTimeout:        90 * time.Second,
			TLSHandshakeTimeout:    10 * time.Second,
			ReadBufferSize:         upstreamReadBuffer,
			WriteBufferSize:        upstreamWriteBuffer,
			MaxResponseHeaderBytes: upstreamMaxHeaderBytes,
		}}
		g.client.Transport = &sseFilter{next: g.client.Transport, skipped: &g.stats.malformed, headerTimeout: g.cfg.headerTimeout}
	}
	if len(g.cfg.keys) > 0 {
		g.keys.Store(&g.cfg.keys)
	}
	g.sem = make(chan struct{}, g.cfg.maxConcurrent)
	g.perClient = map[string]int{}
	if g.cfg.maxPerClient == 0 {
		g.cfg.maxPerClient = max(1, g.cfg.maxConcurrent/defaultPerClientShare)
	}
	g.stopCtx, g.stop = context.WithCancelCause(context.Background())
	gen, err := g.load(ctx)
	if err != nil {
		g.stop(err)
		g.closeClient()
		return nil, err
	}
	g.cur.Store(gen)
	g.startPoll(gen)
	g.mux = http.NewServeMux()
	g.mux.HandleFunc("/v1/chat/completions", g.authed(chatDoor{}, g.chat))
	g.mux.HandleFunc("/v1/messages", g.authed(messagesDoor{}, g.messages))
	g.mux.HandleFunc("/v1/models", g.modelsAuthed(g.models))
	g.mux.HandleFunc("/v1/models/{id...}", g.modelsAuthed(g.model))
	g.mux.Handle("/metrics", g.authed(chatDoor{}, g.metrics.handler().ServeHTTP))
	g.mux.HandleFunc("/healthz", g.healthz)
	g.mux.HandleFunc("/readyz", g.readyz)
	// An unknown path answers in the client's format (an Anthropic SDK
	// calling /v1/messages/count_tokens gets an Anthropic not_found_error)
	// and is logged like any other request.
	g.mux.HandleFunc("/", g.modelsAuthed(func(w http.ResponseWriter, r *http.Request) {
		e := apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "not_found",
			msg: fmt.Sprintf("retryhost gateway: no endpoint %s %s", r.Method, r.URL.Path)}
		writeErr(w, modelsDoor(r), e)
		g.logRefused(r, e.status, "not_found")
	}))
	return g, nil
}

// ServeHTTP serves the endpoints listed in the package documentation. A
// path that is not clean (a doubled slash, as a base URL with a trailing
// slash joined by hand gives, or a dot segment) is served as its clean
// form: ServeMux would answer it with a 307 redirect, which clients do not
// follow with a POST body, so the request failed on a spelling.
//
// A request with a body gets the read timeout (WithReadTimeout) from its
// start, whichever endpoint it is for: net/http reads what a handler left
// unread of a body (up to 256 KiB) before it sends the answer and again
// after it, with no deadline unless the server has a ReadTimeout (serve's
// has none: it would end every stream). Without one a client with no key
// could hold a connection and its goroutine for ever by declaring a body
// and never sending it, as the 401 does not read it. The chat doors read
// their body under the same deadline and then clear it.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 { // -1: chunked
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(g.cfg.readTimeout))
	}
	if p := r.URL.EscapedPath(); r.Method != http.MethodConnect {
		if c := cleanPath(p); c != p {
			r = withPath(r, c)
		}
	}
	g.mux.ServeHTTP(w, r)
}

// cleanPath is p without doubled slashes and dot segments, its trailing
// slash kept, as ServeMux cleans a path before it matches one.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// withPath is a shallow copy of r for the escaped path p (r when p does
// not unescape, which a path from EscapedPath, cleaned, always does).
func withPath(r *http.Request, p string) *http.Request {
	dec, err := url.PathUnescape(p)
	if err != nil {
		return r
	}
	u := *r.URL
	u.Path, u.RawPath = dec, ""
	if dec != p {
		u.RawPath = p
	}
	r = r.WithContext(r.Context())
	r.URL = &u
	return r
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

// SetAPIKeys replaces the client keys (WithAPIKeys) for every request
// from now on, at once: a key left out is refused from the next request,
// a new one accepted. It needs at least one key and no empty one (a
// gateway started without keys starts requiring them); on an error the
// keys in use stay. retryhost serve calls it when its --api-keys-file
// changes or on SIGHUP.
func (g *Gateway) SetAPIKeys(keys ...string) error {
	if len(keys) == 0 {
		return errors.New("gateway: SetAPIKeys needs at least one key")
	}
	var c config
	if err := WithAPIKeys(keys...)(&c); err != nil {
		return err
	}
	g.keys.Store(&c.keys)
	return nil
}

// Unready turns /readyz to 503 (as while draining) from now on, while every
// request is still served as before. It is the first step of a stop behind
// a load balancer that probes /readyz: call Unready, keep the listener
// open until the balancer has seen the 503 and sends no more (retryhost
// serve's --shutdown-delay), then Shutdown. A balancer cannot see a 503
// from a listener that is already closed.
func (g *Gateway) Unready() { g.unready.Store(true) }

// Shutdown stops taking chat requests (they get 503, /readyz turns 503) and
// waits for those in flight until ctx is done; then it ends them, a stream
// with the in-band error event (ErrShuttingDown), and waits for them to
// return. It does not stop the http.Server: call its Shutdown too, for the
// listener and idle connections. Shutdown returns ctx's error if it had to
// end requests.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	g.draining.Store(true)
	g.mu.Unlock()
	done := make(chan struct{})
	go func() { g.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		g.stop(ErrShuttingDown)
		<-done
		return ctx.Err()
	}
}

// Close ends every request in flight (as Shutdown does at its deadline),
// waits for them, then releases the policy and the upstream connections.
// The Gateway serves nothing after it.
func (g *Gateway) Close(ctx context.Context) error {
	g.stopPoll()
	g.mu.Lock()
	g.draining.Store(true)
	g.mu.Unlock()
	g.stop(ErrShuttingDown)
	done := make(chan struct{})
	go func() { g.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.openers.stop()
	g.reloadMu.Lock()
	old := g.cur.Swap(nil)
	g.reloadMu.Unlock()
	var err error
	if old != nil {
		err = old.close(ctx)
	}
	g.closeClient()
	return err
}

func (g *Gateway) closeClient() {
	if g.client != nil {
		g.client.CloseIdleConnections()
	}
}

// CloseIdleConnections passes the call on to the wrapped transport:
// without it http.Client.CloseIdleConnections, which asks the transport
// for the method, would do nothing, and Close would leave the upstream
// connections open.
func (f *sseFilter) CloseIdleConnections() {
	if c, ok := f.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// generation is one loaded policy with its routes. Requests hold a
// reference while they run; the gateway holds one while it is current.
type generation struct {
	pol    *policy.Policy
	routes map[string]*route
	byKey  map[driver.Model]string // a model → its route name
	names  []string                // sorted
	// providers are the ProviderOptions names of the policy's
	// OpenAI-compatible models: forwarded fields go there.
	providers []string
	// anthropic are those of its Anthropic models, which get the
	// Messages door's fields.
	anthropic []string
	created   int64 // when the policy was loaded (Unix seconds), for /v1/models
	// hooked are the models the file built over the gateway's own upstream
	// client, whose streams wait only in bodies that run a flushHook.
	hooked map[driver.Model]bool

	refs   atomic.Int64
	closed sync.Once
	err    error
}

type route struct {
	name    string
	model   driver.Model
	ownedBy string // the provider behind the route, for /v1/models
}

func (g *Gateway) load(ctx context.Context) (*generation, error) {
	o := g.src.opts
	o.StreamOptions = append(slices.Clip(o.StreamOptions), driver.WithOnCommit(onCommit))
	if g.cfg.maxAnswer > 0 {
		o.StreamOptions = append(o.StreamOptions, driver.WithMaxAnswerBytes(g.cfg.maxAnswer))
	}
	o.RunnerOptions = append(slices.Clip(o.RunnerOptions), driver.WithObserver(observer{g.metrics}))
	if o.HTTPClient == nil {
		o.HTTPClient = g.client
	}
	o.RawChunks = true // logprobs, system_fingerprint, service_tier (rawfields.go); thinking signatures (messages_encode.go)
	if o.DefaultBackoff == nil {
		o.DefaultBackoff = &defaultBackoff
	}
	if o.DefaultCooldown == nil {
		o.DefaultCooldown = &defaultCooldown
	}
	if o.DefaultFirstContent == 0 {
		o.DefaultFirstContent = defaultFirstContent
	}
	if o.DefaultGap == 0 {
		o.DefaultGap = defaultGap
	}
	p, err := g.src.load(ctx, o)
	if err != nil {
		return nil, err
	}
	gen := &generation{pol: p, routes: map[string]*route{}, byKey: map[driver.Model]string{}, created: time.Now().Unix(),
		hooked: map[driver.Model]bool{}}
	// A provider name whose models all speak Chat Completions gets the
	// forwarded fields; one shared with a Responses API model does not
	// (ProviderOptions are keyed by provider name, not by model).
	chat, anth := map[string]bool{}, map[string]bool{}
	for name, m := range p.Models {
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
			owner, _ = driver.Describe(inner)
		}
		gen.routes[name] = &route{name: name, model: m, ownedBy: owner}
		gen.byKey[m] = name
		gen.names = append(gen.names, name)
		if om, ok := inner.(*openai.Model); ok {
			ok, seen := chat[om.Provider()]
			chat[om.Provider()] = (ok || !seen) && !om.ResponsesAPI()
		}
		if am, ok := inner.(*anthropic.Model); ok {
			anth[am.Provider()] = true
		}
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
	slices.Sort(gen.names)
	slices.Sort(gen.providers)
	slices.Sort(gen.anthropic)
	gen.refs.Store(1)
	return gen, nil
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

// authed wraps h with the API key check, against the keys in use when the
// request arrives (none: open); a refusal is in d's format. A request is
// served when any credential it presents (a bearer token, an X-Api-Key)
// is a key: a client may send both, one of them stale (an SDK's
// OPENAI_API_KEY from the environment beside the x-api-key it was given).
// Each credential is compared with every key, in constant time.
func (g *Gateway) authed(d door, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		keys := g.keys.Load()
		if keys == nil {
			h(w, r)
			return
		}
		bearerKey, _ := bearer(r.Header.Get("Authorization"))
		match := 0
		for _, key := range [2]string{bearerKey, r.Header.Get("X-Api-Key")} {
			if key = strings.TrimSpace(key); key == "" {
				continue // keys are never empty
			}
			sum := sha256.Sum256([]byte(key))
			for i := range *keys {
				match |= subtle.ConstantTimeCompare(sum[:], (*keys)[i][:])
			}
		}
		if match != 1 {
			g.stats.unauthorized.Add(1)
			w.Header().Set("WWW-Authenticate", `Bearer realm="retryhost"`)
			writeErr(w, d, apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "invalid_api_key",
				msg: "retryhost gateway: missing or invalid API key"})
			g.logRefused(r, http.StatusUnauthorized, "unauthorized")
			return
		}
		h(w, r)
	}
}

// bearer returns the credentials of an "Authorization: Bearer KEY"
// header; the scheme is case-insensitive (RFC 9110, 11.1), as some clients
// send "bearer".
func bearer(h string) (string, bool) {
	scheme, key, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return key, true
}

func (g *Gateway) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	draining := g.draining.Load() || g.unready.Load()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch {
	case draining:
		setRetryAfter(w.Header(), http.StatusServiceUnavailable)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("draining\n"))
	case g.cur.Load() == nil:
		setRetryAfter(w.Header(), http.StatusServiceUnavailable)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("no policy\n"))
	default:
		_, _ = w.Write([]byte("ready\n"))
	}
}

// modelsAuthed wraps a model endpoint with the API key check, refusing
// in the format of the client: Anthropic's for a request with
// anthropic-version (what anthropic-sdk-go sends), else OpenAI's.
func (g *Gateway) modelsAuthed(h http.HandlerFunc) http.HandlerFunc {
	chat, msgs := g.authed(chatDoor{}, h), g.authed(messagesDoor{}, h)
	return func(w http.ResponseWriter, r *http.Request) {
		if modelsDoor(r) == (messagesDoor{}) {
			msgs(w, r)
			return
		}
		chat(w, r)
	}
}

// modelsDoor is the format a model endpoint answers r in.
func modelsDoor(r *http.Request) door {
	if r.Header.Get("Anthropic-Version") != "" {
		return messagesDoor{}
	}
	return chatDoor{}
}

// models lists the routes, in OpenAI's model-list shape (Anthropic's for
// a request with anthropic-version).
func (g *Gateway) models(w http.ResponseWriter, r *http.Request) {
	gen := g.modelsGen(w, r)
	if gen == nil {
		return
	}
	defer gen.release()
	w.Header().Set("Content-Type", "application/json")
	if modelsDoor(r) == (messagesDoor{}) {
		_, _ = w.Write(appendAnthropicModels(nil, gen.names, gen.created))
		return
	}
	b := []byte(`{"object":"list","data":[`)
	for i, n := range gen.names {
		if i > 0 {
			b = append(b, ',')
		}
		b = gen.appendModel(b, n)
	}
	b = append(b, "]}\n"...)
	_, _ = w.Write(b)
}

// model retrieves one route (GET /v1/models/{id}: openai-go's and
// anthropic-sdk-go's Models.Get), in the shape of the list's entries; an
// unknown route is a 404 in the client's format.
func (g *Gateway) model(w http.ResponseWriter, r *http.Request) {
	gen := g.modelsGen(w, r)
	if gen == nil {
		return
	}
	defer gen.release()
	d := modelsDoor(r)
	name := r.PathValue("id")
	if gen.routes[name] == nil {
		writeErr(w, d, apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "model_not_found", param: "model",
			msg: "retryhost gateway: no route named " + strconv.Quote(name) + " (GET /v1/models lists them)"})
		return
	}
	var b []byte
	if _, ok := d.(messagesDoor); ok {
		b = appendAnthropicModel(b, name, gen.created)
	} else {
		b = gen.appendModel(b, name)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// modelsGen admits a request to the model endpoints: GET or HEAD, while a
// policy is loaded. It returns the generation with a reference held, or
// nil with the refusal written.
func (g *Gateway) modelsGen(w http.ResponseWriter, r *http.Request) *generation {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeErr(w, modelsDoor(r), apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error", code: "method_not_allowed",
			msg: "retryhost gateway: use GET"})
		return nil
	}
	gen := g.acquire()
	if gen == nil {
		writeErr(w, modelsDoor(r), errShutdown)
	}
	return gen
}

// appendModel appends route n as OpenAI's model object.
func (gen *generation) appendModel(b []byte, n string) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, n)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, gen.created, 10)
	b = append(b, `,"owned_by":`...)
	b = appendJSONString(b, gen.routes[n].ownedBy)
	return append(b, '}')
}

// enter admits a chat request: its client (clientOf) and 0, or the status
// refused with (the answer written in d's format) when the gateway drains,
// is full, or the client holds its share (WithMaxConcurrentPerClient).
func (g *Gateway) enter(w http.ResponseWriter, r *http.Request, d door) (string, int) {
	client := g.clientOf(r)
	g.mu.Lock()
	if g.draining.Load() {
		g.mu.Unlock()
		w.Header().Set("Connection", "close")
		writeErr(w, d, errShutdown)
		return "", http.StatusServiceUnavailable
	}
	select {
	case g.sem <- struct{}{}:
	default:
		g.mu.Unlock()
		g.stats.rejectedBusy.Add(1)
		w.Header().Set("Retry-After", retryAfterHeader(g.cfg.retryAfterBusy))
		writeErr(w, d, apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "gateway_busy",
			msg: fmt.Sprintf("retryhost gateway: %d requests in flight, the most it serves at once; retry later", cap(g.sem))})
		return "", http.StatusTooManyRequests
	}
	if g.perClient[client] >= g.cfg.maxPerClient {
		<-g.sem
		g.mu.Unlock()
		g.stats.rejectedClient.Add(1)
		w.Header().Set("Retry-After", retryAfterHeader(g.cfg.retryAfterBusy))
		writeErr(w, d, apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "client_busy",
			msg: fmt.Sprintf("retryhost gateway: this client has %d requests in flight, the most one client may have at once; retry later", g.cfg.maxPerClient)})
		return "", http.StatusTooManyRequests
	}
	g.perClient[client]++
	g.inflight.Add(1)
	g.mu.Unlock()
	g.metrics.inflight.Inc()
	return client, 0
}

func (g *Gateway) leave(client string) {
	g.metrics.inflight.Dec()
	g.mu.Lock()
	if g.perClient[client]--; g.perClient[client] <= 0 {
		delete(g.perClient, client)
	}
	g.mu.Unlock()
	<-g.sem
	g.inflight.Done()
}

// clientOf is who a request counts against for WithMaxConcurrentPerClient:
// the API key it was admitted with, when the gateway requires keys (a
// credential that is no key names no client: a client cannot spread its
// requests over made-up keys), else its remote IP address.
func (g *Gateway) clientOf(r *http.Request) string {
	if keys := g.keys.Load(); keys != nil {
		bearerKey, _ := bearer(r.Header.Get("Authorization"))
		for _, key := range [2]string{bearerKey, r.Header.Get("X-Api-Key")} {
			if key = strings.TrimSpace(key); key == "" {
				continue
			}
			sum := sha256.Sum256([]byte(key))
			for i := range *keys {
				if subtle.ConstantTimeCompare(sum[:], (*keys)[i][:]) == 1 {
					return string(sum[:])
				}
			}
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip:" + host
}

// stats are the gateway's counters (exposed as metrics later; read by tests).
type stats struct {
	malformed      atomic.Int64 // upstream SSE events skipped
	unauthorized   atomic.Int64
	rejectedBusy   atomic.Int64
	rejectedClient atomic.Int64 // refused at WithMaxConcurrentPerClient
	reloads        atomic.Int64
	reloadFailures atomic.Int64
	// reloadsAbandoned: Reloads whose ctx ended, or that a newer one overtook.
	reloadsAbandoned atomic.Int64
	// cur is the gateway's current policy, for the shared state's counters.
	cur func() *generation
}

// state returns the current policy's shared-state counters (zero when it
// shares no state).
func (s *stats) state() policy.StateStats {
	if s.cur != nil {
		if gen := s.cur(); gen != nil {
			st, _ := gen.pol.StateStats()
			return st
		}
	}
	return policy.StateStats{}
}

// MalformedEvents returns how many upstream SSE events the gateway skipped
// because their data was not a JSON object (when it made the upstream
// client, see WithUpstreamConns).
func (g *Gateway) MalformedEvents() int64 { return g.stats.malformed.Load() }
