package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryhost/retryhost/gateway/vkey"
	"github.com/retryhost/retryhost/policy"
)

// ErrShuttingDown is the cause of a request the gateway ended because it
// was shutting down (Shutdown's drain deadline passed, or Close).
var ErrShuttingDown = errors.New("retryhost gateway: shutting down")

// Gateway is the OpenAI-compatible fail-over gateway, an http.Handler. Build
// it with [New]; Close it to release its policy. It is safe for concurrent
// use.
type Gateway struct {
	cfg    config
	src    Source
	mux    *http.ServeMux
	client *http.Client // the upstreams' client when the gateway made it; nil otherwise
	// upstream is the client the policy's models call their upstreams
	// with: the Source's or client, sending a traceparent when tracing.
	upstream *http.Client
	tracing  *tracing // WithTracerProvider's; nil: no tracing
	stats    *stats
	metrics  *metrics
	// accounting counts what requests used (accounting.go).
	accounting *accounting

	reloadMu   sync.Mutex // orders Reload's swap against another's and Close's
	reloadSeq  atomic.Uint64
	reloadDone uint64 // the seq of the Reload in place; under reloadMu
	cur        atomic.Pointer[generation]

	keys   atomic.Pointer[[][sha256.Size]byte] // the client keys' SHA-256 (WithAPIKeys, SetAPIKeys); nil: open
	keySet atomic.Pointer[vkey.Set]            // the virtual keys (WithKeySet, SetKeySet); nil: none

	sem       chan struct{}  // chat requests in flight
	budget    bodyBudget     // the memory their bodies hold (WithBodyBudget)
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
		maxBody: 8 << 20, bodyBudget: defaultBodyBudget, maxConcurrent: 1024, upstreamConns: 256,
		headerTimeout: 60 * time.Second, writeTimeout: 30 * time.Second, readTimeout: 30 * time.Second,
		retryAfterBusy: time.Second, pluginPoll: defaultPluginPoll,
	}, stats: &stats{}, openers: newOpeners(defaultMaxIdleOpeners())}
	g.stats.cur = g.cur.Load
	g.metrics = newMetrics(g.stats, &g.budget)
	if err := g.configure(opts); err != nil {
		return nil, err
	}
	if err := g.connectUpstream(src); err != nil {
		return nil, err
	}
	g.admission()
	g.stopCtx, g.stop = context.WithCancelCause(context.Background())
	gen, err := g.load(ctx)
	if err != nil {
		g.stop(err)
		g.closeClient()
		return nil, err
	}
	g.cur.Store(gen)
	g.startPoll(gen)
	g.routes()
	g.warnUnpricedSpend(ctx)
	return g, nil
}

// configure applies opts over the defaults New set, checks what they
// cannot mean together, and registers the metrics they bring.
func (g *Gateway) configure(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return errors.New("gateway: nil option")
		}
		if err := o(&g.cfg); err != nil {
			return err
		}
	}
	if g.cfg.logger == nil {
		g.cfg.logger = slog.New(slog.DiscardHandler)
	}
	if g.cfg.bodyBudget < bodyByteCost*g.cfg.maxBody {
		return fmt.Errorf("gateway: a body budget of %d bytes holds no body of the largest size (%d bytes, charged %d)",
			g.cfg.bodyBudget, g.cfg.maxBody, bodyByteCost*g.cfg.maxBody)
	}
	g.budget.limit = g.cfg.bodyBudget
	g.accounting = newAccounting(g.metrics.reg, g.cfg.keyLabels)
	for _, c := range g.cfg.collectors {
		if err := g.metrics.reg.Register(c); err != nil {
			return fmt.Errorf("gateway: WithMetrics: %w", err)
		}
	}
	return nil
}

// connectUpstream makes the HTTP client the policy's providers use, unless
// src's options bring one, traced when a tracer provider is set.
func (g *Gateway) connectUpstream(src Source) error {
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
	g.upstream = src.opts.HTTPClient
	if g.upstream == nil {
		g.upstream = g.client
	}
	if g.cfg.tracerProvider != nil {
		t, err := newTracing(g.cfg.tracerProvider)
		if err != nil {
			g.closeClient()
			return fmt.Errorf("gateway: tracing: %w", err)
		}
		g.tracing, g.upstream = t, withTraceparent(g.upstream)
	}
	return nil
}

// admission sets up what admits a request: the client keys, the virtual
// keys and their limiter, the concurrency limits.
func (g *Gateway) admission() {
	if len(g.cfg.keys) > 0 {
		g.keys.Store(&g.cfg.keys)
	}
	if g.cfg.keySet != nil {
		g.keySet.Store(g.cfg.keySet)
	}
	if g.cfg.limiter == nil {
		g.cfg.limiter = vkey.NewLocal()
	}
	g.sem = make(chan struct{}, g.cfg.maxConcurrent)
	g.perClient = map[string]int{}
	if g.cfg.maxPerClient == 0 {
		g.cfg.maxPerClient = max(1, g.cfg.maxConcurrent/defaultPerClientShare)
	}
}

// routes makes the mux: the front doors, the models, the metrics and the
// probes; any other path answers not found in the client's format.
func (g *Gateway) routes() {
	g.mux = http.NewServeMux()
	g.door("/v1/chat/completions", g.authed(chatDoor{}, g.chat))
	g.door("/v1/messages", g.authed(messagesDoor{}, g.messages))
	g.door("/v1/messages/count_tokens", g.authed(messagesDoor{}, g.countTokens))
	g.door("/v1/embeddings", g.authed(chatDoor{}, g.embeddings))
	g.door("/v1/responses", g.authed(responsesDoor{}, g.responses))
	g.door("/v1/responses/{id}", g.authed(responsesDoor{}, g.storedResponse))
	g.door("/v1/responses/{id}/{op}", g.authed(responsesDoor{}, g.storedResponse))
	g.mux.HandleFunc("/v1/models", g.modelsAuthed(g.models))
	g.mux.HandleFunc("/v1/models/{id...}", g.modelsAuthed(g.model))
	g.mux.Handle("/metrics", g.authed(chatDoor{}, g.metrics.handler().ServeHTTP))
	g.mux.HandleFunc("/healthz", g.healthz)
	g.mux.HandleFunc("/readyz", g.readyz)
	// An unknown path answers in the client's format (an Anthropic SDK
	// calling /v1/messages/batches gets an Anthropic not_found_error)
	// and is logged like any other request.
	g.mux.HandleFunc("/", g.modelsAuthed(func(w http.ResponseWriter, r *http.Request) {
		e := apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "not_found",
			msg: fmt.Sprintf("retryhost gateway: no endpoint %s %s", r.Method, r.URL.Path)}
		writeErr(w, modelsDoor(r), e)
		g.logRefused(r, w, e.status, "not_found")
	}))
}

// door serves a front door's route, in a server span when tracing.
func (g *Gateway) door(route string, h http.HandlerFunc) {
	if g.tracing != nil {
		h = g.tracing.traced(route, h)
	}
	g.mux.HandleFunc(route, h)
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

// stats are the gateway's counters (exposed as metrics later; read by tests).
type stats struct {
	malformed      atomic.Int64 // upstream SSE events skipped
	unauthorized   atomic.Int64
	rejectedBusy   atomic.Int64
	rejectedClient atomic.Int64 // refused at WithMaxConcurrentPerClient
	rejectedBudget atomic.Int64 // refused at WithBodyBudget
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
