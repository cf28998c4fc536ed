package gateway

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/gateway/vkey"
)

// reqState is one chat request's state that the policy's commit hook
// fills in; it travels in the request's context.
type reqState struct {
	committed driver.Model
	attempts  int  // the committed attempt's number
	atEnd     bool // a non-streaming request: it commits at the end of the answer
	// start is when the gateway took the request: its time to first
	// content runs from there, over the links of its chain (each link is
	// a policy request of its own, whose commit event counts from the
	// link's start).
	start time.Time
	acct  acctTrail // its attempts, for its accounting and request log
}

type stateKey struct{}

// onCommit is the StreamOption the gateway adds to every policy it loads.
func onCommit(ctx context.Context, c driver.CommitInfo) {
	if st, ok := ctx.Value(stateKey{}).(*reqState); ok {
		st.committed, st.attempts = c.Model, c.Number
	}
}

// accessLog is what one request's log record says (never prompt or
// output text).
type accessLog struct {
	id        string // the answer's id (chatcmpl-…)
	requestID string // X-Request-Id: the client's, else id
	route     string
	model     string
	stream    bool
	status    int
	// outcome is what the client got: ok, client_error, upstream_error,
	// plugin_failed, truncated, client_closed, shutdown, rejected,
	// unauthorized, not_found. truncated is a stream's only (an upstream
	// failed after its first event went out, see endErr): a non-streaming
	// client gets a whole answer or a whole error answer, and a failure
	// while collecting it is logged as that error (fail), never truncated.
	outcome    string
	implicit   bool // route is a name no route has, served by the implicit route
	attempts   int
	fallbacks  int
	errClass   string
	start      time.Time
	commitAt   time.Duration // time to commit (first content; a non-streaming request: the whole answer), 0 if none
	parts      int
	inputToks  int64
	outputToks int64
	trail      trail // one record per attempt (logAttempts), and a stream's last line (appendTrail)
}

func (g *Gateway) logAccess(ctx context.Context, r *http.Request, l *accessLog, t *acctTrail) {
	g.metrics.request(l)
	var tot totals
	if t != nil {
		tot = t.sum()
	}
	keyID := KeyID(ctx)
	g.accounting.request(g.metrics.route(l), l, keyID, &tot)
	if g.tracing != nil {
		endSpan(ctx, l, keyID)
	}
	if g.cfg.requestLog != nil {
		g.cfg.requestLog.write(r, l, keyID, t, &tot, time.Now())
	}
	h := g.cfg.logger.Handler()
	if !h.Enabled(ctx, slog.LevelInfo) {
		return
	}
	logAttempts(ctx, h, r, l)
	// The record is made here, not by Logger.LogAttrs, which takes the
	// caller's program counter (runtime.Callers, ~1% of a request's CPU)
	// for a source that an access log never shows.
	rec := slog.NewRecord(time.Now(), slog.LevelInfo, "request", 0)
	rec.AddAttrs(
		slog.String("id", l.id), slog.String("request_id", l.requestID), slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.Int("status", l.status), slog.String("outcome", l.outcome),
		slog.String("route", l.route), slog.String("model", l.model), slog.Bool("stream", l.stream),
		slog.Int("attempts", l.attempts), slog.Int("fallbacks", l.fallbacks), slog.String("error_class", l.errClass),
		slog.Duration("duration", time.Since(l.start)), slog.Duration("time_to_first_content", l.commitAt),
		slog.Int("parts", l.parts), slog.Int64("input_tokens", l.inputToks), slog.Int64("output_tokens", l.outputToks),
		slog.Int64("billed_input_tokens", tot.usage.InputTokens), slog.Int64("billed_output_tokens", tot.usage.OutputTokens),
		slog.Int64("cached_input_tokens", tot.usage.CacheReadTokens), slog.Float64("cost", tot.cost),
		slog.String("key", keyID), slog.String("remote", r.RemoteAddr))
	_ = h.Handle(ctx, rec)
}

// logRefused writes the access-log line (and counts the request) of a
// request refused before it reached a door's handler: a missing or wrong
// API key, an unknown path. Its id is the one its answer carries
// (refusedID).
func (g *Gateway) logRefused(r *http.Request, w http.ResponseWriter, status int, outcome string) {
	l := accessLog{status: status, outcome: outcome, start: time.Now()}
	l.requestID = w.Header().Get("X-Request-Id")
	g.logAccess(r.Context(), r, &l, nil)
}

// refusedID names the answer of a request that no door's handler reads
// (a refused key, an unknown path, the model endpoints) as a door's
// answers are named: the client's X-Request-Id if valid, else a new id.
func refusedID(w http.ResponseWriter, r *http.Request, d door) {
	setRequestID(w.Header(), d, []string{requestID(r.Header.Get("X-Request-Id"), newID("req_rh"))})
}

// maxRequestID caps a client's X-Request-Id.
const maxRequestID = 128

// requestID returns the client's X-Request-Id when it is 1 to 128 visible
// ASCII characters (it goes into logs and upstream headers), else ours.
func requestID(client, ours string) string {
	if client == "" || len(client) > maxRequestID {
		return ours
	}
	for i := 0; i < len(client); i++ {
		if c := client[i]; c <= ' ' || c > '~' {
			return ours
		}
	}
	return client
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// chat serves POST /v1/chat/completions.
func (g *Gateway) chat(w http.ResponseWriter, r *http.Request) { g.serve(w, r, chatDoor{}) }

// serve answers one request of door d: open (admission, body, routing,
// the commit gate), then the answer relayed or collected in d's format.
//
// A held stream spends its whole life in relay, and its handler's stack
// keeps every frame above it: open's many locals are gone by then, so
// that thousands of held streams do not each keep a stack grown past 8 KiB
// (BenchmarkHeldStreams reports it).
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, d door) {
	c := &call{}
	l := &c.l
	l.id, l.start = d.newID(), time.Now()
	defer g.logAccess(r.Context(), r, l, &c.st.acct)
	if !g.open(w, r, d, c) {
		return
	}
	defer c.close(g)
	if c.stream {
		g.relay(c.ctx, w, l, c.s, c.enc, c.relayHook, &c.hook, r.ProtoMajor >= 2)
	} else {
		g.collect(c.ctx, w, d, l, c.s, c.enc)
	}
}

// open takes a request up to its commit: false when it was answered
// already (refused, or failed before commit), with what it took released.
func (g *Gateway) open(w http.ResponseWriter, r *http.Request, d door, c *call) (ok bool) {
	l := &c.l
	if !g.screen(w, r, d, c) {
		return
	}
	client, status := g.enter(w, r, d)
	if status != 0 {
		l.status, l.outcome = status, "rejected"
		return
	}
	c.entered, c.client = true, client
	defer func() {
		if !ok {
			c.close(g)
		}
	}()
	gen := g.acquire()
	if gen == nil {
		l.status, l.outcome = http.StatusServiceUnavailable, "shutdown"
		writeErr(w, d, errShutdown)
		return
	}
	c.gen = gen
	ctx, body, read := g.readBody(w, r, d, c)
	if !read || !g.chargeBody(w, d, c, body) {
		return
	}
	held := bodyHeldCost * int64(len(body))
	cr, chain, routed := g.routeRequest(w, r, d, c, body, gen)
	if !routed {
		return
	}
	if c.key = keyOf(r.Context()); c.key != nil && !g.admitKey(ctx, w, d, c, cr.model, cr.fallbacks, estimateTokens(len(body), cr)) {
		return
	}
	if cr.forward != nil {
		g.forwardStateful(ctx, w, d, c, cr, chain)
		return
	}
	if ok = g.commit(ctx, w, d, c, cr, chain); ok {
		g.budget.settle(c, held) // committed: the rest of the decoding's charge is given back
	}
	return ok
}

// screen names the request and answers at once, unread, what it declares
// wrong: a method other than POST (c.allow's), a compressed body, a body
// declared larger than WithMaxBodyBytes.
func (g *Gateway) screen(w http.ResponseWriter, r *http.Request, d door, c *call) bool {
	l := &c.l
	l.requestID = requestID(r.Header.Get("X-Request-Id"), l.id)
	c.hv[0] = l.requestID
	setRequestID(w.Header(), d, c.hv[0:1:1]) // on every answer; sent with the first byte, never before commit
	if allow := cmp.Or(c.allow, http.MethodPost); r.Method != allow && (c.allow == "" || !slices.Contains(strings.Split(allow, ", "), r.Method)) {
		w.Header().Set("Allow", allow)
		l.status, l.outcome = http.StatusMethodNotAllowed, "client_error"
		writeErr(w, d, apiError{status: l.status, typ: "invalid_request_error", code: "method_not_allowed", msg: "retryhost gateway: use " + allow})
		return false
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		// Read as JSON, a compressed body is a parse error naming its
		// first byte: say what is wrong instead.
		l.status, l.outcome = http.StatusUnsupportedMediaType, "client_error"
		writeErr(w, d, apiError{status: l.status, typ: "invalid_request_error", code: "unsupported_content_encoding",
			msg: "retryhost gateway: Content-Encoding " + strconv.Quote(ce) + " is not supported: send the body uncompressed"})
		return false
	}
	if r.ContentLength > g.cfg.maxBody {
		// Declared too large: answered at once, unread (the connection
		// closes, so net/http does not read it either), instead of after
		// WithMaxBodyBytes bytes, or the read timeout, of it.
		l.status, l.outcome = http.StatusRequestEntityTooLarge, "client_error"
		w.Header().Set("Connection", "close")
		writeErr(w, d, apiError{status: l.status, typ: "invalid_request_error", code: "request_too_large",
			msg: "retryhost gateway: the body declares " + strconv.FormatInt(r.ContentLength, 10) + " bytes, more than " + strconv.FormatInt(g.cfg.maxBody, 10)})
		return false
	}
	return true
}

// readBody reads the body whole, under the body limit, the read timeout
// and the gateway's stop, and returns the request's context: the client's,
// ended also by the stop, with ErrShuttingDown as its cause.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, d door, c *call) (context.Context, []byte, bool) {
	l := &c.l
	rc := http.NewResponseController(w)
	// The request's context: the client's, ended also by the gateway's
	// stop (Shutdown's deadline, Close), with ErrShuttingDown as its
	// cause. The stop also ends a body still arriving at once, as it ends
	// a stream: the drain must not wait on it for the rest of the read
	// timeout (WithReadTimeout, set in ServeHTTP). One AfterFunc on the
	// gateway's stop does both.
	ctx, cancel := context.WithCancelCause(r.Context())
	c.cancel = cancel
	c.reading = true
	c.stopAfter = context.AfterFunc(g.stopCtx, func() {
		cancel(context.Cause(g.stopCtx))
		// A write under way to a client that reads nothing would hold
		// the drain for the rest of its write timeout: it gets the
		// grace that every write has from now on (writeDeadline). Not
		// once the handler is done with w (close): an HTTP/2 writer is
		// gone by then.
		c.wmu.Lock()
		if c.reading {
			_ = rc.SetReadDeadline(time.Now())
		}
		if !c.wdone {
			_ = rc.SetWriteDeadline(time.Now().Add(stopWriteGrace))
		}
		c.wmu.Unlock()
	})
	body, err := io.ReadAll(&chargedBody{r: http.MaxBytesReader(w, r.Body, g.cfg.maxBody), b: &g.budget, c: c})
	c.wmu.Lock()
	c.reading = false
	_ = rc.SetReadDeadline(time.Time{}) // the server watches the connection for the client going away
	c.wmu.Unlock()
	if err != nil {
		var (
			mb *http.MaxBytesError
			ne net.Error
		)
		switch {
		case g.stopCtx.Err() != nil:
			l.status, l.outcome = http.StatusServiceUnavailable, "shutdown"
			w.Header().Set("Connection", "close")
			writeErr(w, d, errShutdown)
		case errors.Is(err, errBodyBudget):
			w.Header().Set("Connection", "close") // the rest of the body is not read
			g.refuseBudget(w, d, c)
		case errors.As(err, &mb):
			l.status, l.outcome = http.StatusRequestEntityTooLarge, "client_error"
			writeErr(w, d, apiError{status: l.status, typ: "invalid_request_error", code: "request_too_large",
				msg: "retryhost gateway: the body exceeds " + strconv.FormatInt(mb.Limit, 10) + " bytes"})
		case errors.As(err, &ne) && ne.Timeout():
			l.status, l.outcome = http.StatusRequestTimeout, "client_error"
			w.Header().Set("Connection", "close")
			writeErr(w, d, apiError{status: l.status, typ: "invalid_request_error", code: "request_timeout",
				msg: "retryhost gateway: the body took longer than " + g.cfg.readTimeout.String() + " to arrive"})
		default:
			// The body cannot be read whole for a reason of its own
			// (chunked framing that is not, a connection ended before
			// the declared length): the answer is a 400, since written
			// nothing becomes net/http's "200 OK" with an empty body,
			// which a client still there (one that half-closed after
			// its request) would take for an answer. The log says 499
			// when the connection ended (net/http then ends the
			// request's context): most such clients are gone.
			l.status, l.outcome = http.StatusBadRequest, "client_error"
			if r.Context().Err() != nil {
				l.status, l.outcome = 499, "client_closed"
			}
			w.Header().Set("Connection", "close")
			writeErr(w, d, apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "invalid_body",
				msg: "retryhost gateway: the body could not be read whole: " + err.Error()})
		}
		return nil, nil, false
	}
	return ctx, body, true
}

// routeRequest parses the body in d's format and finds the route of its
// model and of each of its fallbacks, answering a request that names an
// unknown one.
func (g *Gateway) routeRequest(w http.ResponseWriter, r *http.Request, d door, c *call, body []byte, gen *generation) (*chatRequest, []*route, bool) {
	l := &c.l
	cr, err := d.parse(body, r.Header, gen)
	if err != nil {
		l.status, l.outcome = http.StatusBadRequest, "client_error"
		var re *requestError
		errors.As(err, &re)
		writeErr(w, d, apiError{status: l.status, typ: "invalid_request_error", code: cmp.Or(re.code, "invalid_request"), msg: re.msg, param: re.param})
		return nil, nil, false
	}
	l.stream = cr.stream
	if cr.req.Headers == nil {
		cr.req.Headers = http.Header{}
	}
	c.hv[1] = l.requestID
	cr.req.Headers["X-Request-Id"] = c.hv[1:2:2] // for the upstreams' logs
	chain := c.one[:0]
	if len(cr.fallbacks) > 0 {
		chain = make([]*route, 0, 1+len(cr.fallbacks))
	}
	for i := 0; i <= len(cr.fallbacks); i++ {
		name := cr.model
		if i > 0 {
			name = cr.fallbacks[i-1]
		}
		rt := gen.routes[name]
		if rt == nil {
			rt = gen.implicitRoute(name)
		}
		if rt == nil {
			param := "model"
			if i > 0 {
				param = "fallbacks[" + strconv.Itoa(i-1) + "]"
			}
			l.status, l.outcome = http.StatusNotFound, "client_error"
			writeErr(w, d, apiError{status: l.status, typ: "invalid_request_error", code: "model_not_found", param: param,
				msg: "retryhost gateway: no route named " + strconv.Quote(name) + " (GET /v1/models lists them)"})
			return nil, nil, false
		}
		chain = append(chain, rt)
	}
	l.route, l.implicit = cr.model, chain[0].implicit // metrics label an implicit route "*": label values must stay few
	return cr, chain, true
}

// commit runs the chain's policy requests up to the commit gate (for a
// non-streaming client, the end of the answer) and readies the answer's
// headers and encoder; a failure before commit is answered as the error.
func (g *Gateway) commit(ctx context.Context, w http.ResponseWriter, d door, c *call, cr *chatRequest, chain []*route) bool {
	l, gen := &c.l, c.gen
	st := &c.st
	st.atEnd, st.start = !cr.stream, l.start
	st.acct.start, st.acct.prices = l.start, gen.pol.Prices
	var hook *flushHook
	if cr.stream && g.client != nil {
		hook = &c.hook
	}
	c.ctxV = callCtx{Context: ctx, c: c, hooked: hook != nil}
	ctx = &c.ctxV

	// Before commit: nothing is written. Each link of the chain is a whole
	// policy request starting on that route. A non-streaming client sees
	// nothing before the whole answer, so its request commits at the end:
	// every failure up to there fails over (and a failed attempt's partial
	// text never reaches it).
	sctx := ctx
	if !cr.stream {
		sctx = driver.CommitAtEnd(ctx)
	}
	if c.unhonoured = cr.unhonoured; c.unhonoured != nil {
		sctx = driver.SkipModels(sctx, c.ineligible)
	}
	c.chain, c.ctx, c.sctx, c.req = chain, ctx, sctx, &cr.req
	g.openers.run(c)
	// A move on to the request's own fallbacks is a fail-over as much as a
	// rule's switch (which the observer counts): one per link moved to.
	for _, rt := range c.chain[1 : 1+l.fallbacks] {
		g.metrics.failovers.WithLabelValues(rt.name).Inc()
	}
	c.req = nil // opened: a held stream does not keep the parsed request through the call
	err, prior := c.err, c.prior
	if err != nil {
		l.attempts = prior + attempts(err)
		g.fail(ctx, w, d, l, err)
		return false
	}
	l.commitAt = time.Since(l.start)
	l.model, l.attempts = gen.name(st.committed), prior+st.attempts
	c.hv[2], c.hv[3] = l.model, strconv.Itoa(l.attempts)
	h := w.Header()
	h["X-Retryhost-Model"], h["X-Retryhost-Attempts"] = c.hv[2:3:3], c.hv[3:4:4]
	answered := l.model
	if gen.any[st.committed] {
		// A "*" model answered: the answer names the model it was asked
		// for, the client's (X-Retryhost-Model names the policy's).
		answered = c.chain[l.fallbacks].id
	}
	c.enc, c.stream = d.encoder(l.id, answered, cr), cr.stream
	if cr.stream {
		if hook != nil && (hook.bodies.Load() == 0 || !gen.hooked[st.committed]) {
			hook = nil // the committed model may wait elsewhere than in a hooked body
		}
		c.relayHook = hook
	}
	return true
}

// close releases what open took, in the reverse order.
func (c *call) close(g *Gateway) {
	if c.s != nil {
		_ = c.s.Close()
	}
	c.hook.endTail() // an upstream body's end the relay did not read
	if c.stopAfter != nil && !c.stopAfter() {
		// The stop's func has run or runs now: let it finish with w.
		c.wmu.Lock()
		c.wdone = true
		c.wmu.Unlock()
	}
	if c.cancel != nil {
		c.cancel(nil)
	}
	if c.gen != nil {
		c.gen.release()
	}
	g.budget.settle(c, 0)
	g.settleKey(c)
	if c.entered {
		g.leave(c.client)
	}
}

// call is what one request keeps beyond serve's own variables: its access
// log, the commit hook's state, the flush hook and the opening's inputs and
// result, in one allocation. Its open runs on an opener (openers.go).
type call struct {
	allow string // the methods the endpoint takes, as an Allow header lists them; "": POST
	l     accessLog
	st    reqState
	hook  flushHook
	// hv hold header values (the answer's X-Request-Id, the upstream's,
	// X-Retryhost-Model, X-Retryhost-Attempts), each a slice of its own.
	hv [4]string

	// The opening's inputs, then what it hands back.
	gen       *generation
	chain     []*route  // the route, then the request's fallbacks
	one       [1]*route // chain's array when there are no fallbacks
	ctx, sctx context.Context
	req       *driver.Request
	s         driver.Stream
	err       error
	prior     int // the attempts of the chain's failed links
	// unhonoured are the request's parameters that some providers'
	// upstreams are not sent (chatRequest.unhonoured); nil when none.
	unhonoured map[string][]string

	// What serve needs after open, and what close releases.
	enc        encoder
	stream     bool
	relayHook  *flushHook // the flush hook the relay arms; nil: flush every event
	entered    bool       // admitted (g.enter)
	charged    int64      // what the body budget charges it (bodyBudget.settle)
	client     string     // who it counts against (clientOf), while entered
	key        *vkey.Key  // the virtual key it came with, if any
	keyCharged bool       // the key's limiter charged it est tokens, to settle in close
	est        int64
	cancel     context.CancelCauseFunc
	stopAfter  func() bool
	ctxV       callCtx    // the request's context, as the driver and the upstream client see it
	wmu        sync.Mutex // held while stopAfter's func sets w's deadlines
	reading    bool       // the body is being read (under wmu)
	wdone      bool       // close ran: w is not to be touched (under wmu)
}

// ineligible reports whether m may not serve the request as a fall-back:
// its policy says "unsupported_params": "skip" and its provider is not
// sent some parameter of the request.
func (c *call) ineligible(m driver.Model) bool {
	name := m.Key()
	return c.gen.pol.SkipsUnsupported(name) && len(c.unhonoured[c.gen.provOf[name]]) > 0
}

// callCtx is a request's context below the gateway: its cancelable one,
// answering also for the request's state (stateKey) and its flush hook
// (flushKey), which a context.WithValue each would cost an allocation and
// a link that every Value lookup under it walks.
type callCtx struct {
	context.Context
	c      *call
	hooked bool // the flush hook is the upstream client's to run
}

func (x *callCtx) Value(key any) any {
	switch key.(type) {
	case stateKey:
		return &x.c.st
	case callKey:
		return x.c
	case flushKey:
		if x.hooked {
			return &x.c.hook
		}
	}
	return x.Context.Value(key)
}

// open opens the policy request on each link of the chain in turn, until
// one commits or fails for a reason that does not move it on.
func (c *call) open() {
	for i, rt := range c.chain {
		c.l.fallbacks = i
		c.req.ModelID = rt.id
		c.s, c.err = c.gen.pol.Model.Stream(driver.StartOn(c.sctx, rt.model), c.req)
		if c.err == nil || c.ctx.Err() != nil || !chainOn(c.err) || i == len(c.chain)-1 {
			break
		}
		c.prior += attempts(c.err) // the attempts of a link the request moves on from; the last link's are its error's
	}
}

// stopWriteGrace bounds a write to a client once its request is ended
// (the gateway stopped at its drain deadline, or the client went away):
// enough for the in-band error to reach a client that reads, short
// enough that one that reads nothing does not hold the drain for the
// write timeout.
const stopWriteGrace = time.Second

// writeDeadline is the deadline of a write to a client starting now:
// WithWriteTimeout, or stopWriteGrace once ctx, the request's, is done.
func (g *Gateway) writeDeadline(ctx context.Context) time.Time {
	d := g.cfg.writeTimeout
	if ctx.Err() != nil {
		d = min(d, stopWriteGrace)
	}
	return time.Now().Add(d)
}

// errShutdown is the answer to a request that arrives while the gateway
// shuts down.
var errShutdown = apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "shutting_down", msg: ErrShuttingDown.Error()}

// chainOn reports whether a route's failure moves a request on to its
// per-request fallbacks: not when the upstream rejected the request itself
// (a 4xx other than 401, 403, 404, 408, 409 and 429; a content filter),
// which the client gets as is. A 401 or 403 refuses the gateway's key or
// region, a 404 says the model is not there: the next link may have it.
func chainOn(err error) bool {
	pe := lastProviderError(err)
	if pe == nil {
		return true
	}
	switch {
	case pe.Class == abi.ClassContentFilter:
		return false
	case pe.Status == http.StatusUnauthorized || pe.Status == http.StatusForbidden || pe.Status == http.StatusNotFound:
		return true // the gateway's credentials for that upstream, or its models, not the request
	}
	return !(pe.Status >= 400 && pe.Status < 500 && !driver.DefaultRetryable(pe.Status))
}

// attempts returns how many attempts a failed policy request made.
func attempts(err error) int {
	var re *driver.RetryError
	if errors.As(err, &re) {
		return len(re.Attempts)
	}
	return 1
}

// fail answers a request that never committed.
func (g *Gateway) fail(ctx context.Context, w http.ResponseWriter, d door, l *accessLog, err error) {
	if cause := context.Cause(ctx); cause != nil {
		if errors.Is(cause, ErrShuttingDown) {
			l.status, l.outcome = http.StatusServiceUnavailable, "shutdown"
			writeErr(w, d, errShutdown)
			return
		}
		l.status, l.outcome = 499, "client_closed" // nobody is listening
		return
	}
	e := classify(err)
	l.status, l.outcome, l.errClass = e.status, "upstream_error", e.class
	switch {
	case e.code == codePluginFailed:
		// The gateway's own plugin failed, not an upstream: the log says
		// what the client was told.
		l.outcome = codePluginFailed
	case e.status < 500 && e.status != http.StatusTooManyRequests:
		l.outcome = "client_error"
	}
	if e.retryAfter != "" {
		w.Header().Set("Retry-After", e.retryAfter)
	}
	if e.retryAfterMs != "" {
		w.Header().Set("Retry-After-Ms", e.retryAfterMs)
	}
	setRetryAfter(w.Header(), e.status)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_, _ = w.Write(e.body(d))
}

// relay streams a committed answer as server-sent events. Events are
// written and flushed as soon as the next part would have to wait for the
// upstream (see flushHook), so parts that arrived together share one write
// and none is held back; without the hook (a model the gateway's client
// does not serve), every event is flushed on its own. A failure after
// commit ends the stream with an in-band error event and no end marker.
// tails is the request's hook whose upstream body may wait, after its end
// marker, for the read of its end (flushHook.endTail): the relay sends the
// answer's end first.
func (g *Gateway) relay(ctx context.Context, w http.ResponseWriter, l *accessLog, s driver.Stream, enc encoder, hook, tails *flushHook, h2 bool) {
	startEventStream(w.Header(), l)
	g.metrics.streams.Inc()
	defer g.metrics.streams.Dec()
	out := &eventWriter{g: g, ctx: ctx, w: w, rc: http.NewResponseController(w), h2: h2}
	send := out.send // one func value for the stream, armed on each wait
	var (
		usage *abi.Usage
		p     abi.Part // one for the whole stream: the encoder's methods take its address, which moves it to the heap
	)
	for {
		if hook != nil && len(out.buf) > 0 {
			hook.arm(send)
		}
		var err error
		p, err = s.Recv()
		if hook != nil {
			hook.disarm()
		}
		switch {
		case out.broken:
			l.outcome = "client_closed"
			return
		case err == io.EOF:
			g.endStream(l, enc, out, usage, tails)
			return
		case err != nil:
			g.failStream(ctx, l, enc, out, err)
			return
		case p.Kind == abi.KindRaw:
			out.take()
			if out.buf = enc.raw(out.buf, &p); hook == nil {
				out.send()
			}
		default:
			if u := relayPart(w, l, enc, out, &p, hook == nil); u != nil {
				usage = u
			}
		}
	}
}

// startEventStream sets the headers of an event stream and records its
// status.
func startEventStream(h http.Header, l *accessLog) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	l.status = http.StatusOK
}

// relayPart encodes one part of the answer and returns the usage it
// carries, if it is the finish. It sends at once when flushEach is set
// (no flush hook), and for the part that commits the stream.
func relayPart(w http.ResponseWriter, l *accessLog, enc encoder, out *eventWriter, p *abi.Part, flushEach bool) *abi.Usage {
	var usage *abi.Usage
	l.parts++
	upstreamModel(w, p)
	if p.Kind == abi.KindFinish && p.Finish != nil {
		usage = &p.Finish.Usage
		l.inputToks, l.outputToks = p.Finish.Usage.InputTokens, p.Finish.Usage.OutputTokens
	}
	out.take()
	out.buf = enc.appendPart(out.buf, p)
	// The first content part (what commits the stream, under the
	// default commit rule) goes out at once, with the status line,
	// the headers and the preamble the gate held: it is the event
	// the client waits for, and writing the headers is deep work
	// (net/http's chunkWriter.writeHeader has a 2.8 KiB frame) that
	// the flush hook would do from under the upstream read, growing
	// the stack every held stream keeps (see serve).
	if flushEach || !out.headed && driver.CommitOnOutput.IsContent(p) {
		out.send()
	}
	return usage
}

// failStream ends a committed stream that failed with an in-band error
// event and no end marker.
func (g *Gateway) failStream(ctx context.Context, l *accessLog, enc encoder, out *eventWriter, err error) {
	e := streamFailure(ctx, err)
	l.outcome, l.errClass = g.endErr(ctx, &e), classify(err).class
	out.buf = enc.appendErrorEvent(out.buf, &e)
	out.buf = appendTrail(out.buf, &l.trail)
	out.send()
}

// endStream writes the end of an answer the upstream finished, then has
// the upstream body's end read (tails.endTail) when it waits for that.
func (g *Gateway) endStream(l *accessLog, enc encoder, out *eventWriter, usage *abi.Usage, tails *flushHook) {
	var u abi.Usage
	if usage != nil {
		u = *usage
	}
	out.buf = enc.appendEnd(out.buf, &u)
	out.buf = appendTrail(out.buf, &l.trail)
	// The end goes out unflushed: net/http flushes it when the handler
	// returns, in the same write as the chunked body's terminator (on
	// HTTP/2, in the frame that ends the stream), one write a request fewer
	// than a flush here and the terminator after it. So a client that left
	// just now is not seen here: the access log says "ok" for an answer
	// handed whole to the server. It is flushed here when the upstream
	// body's end is still to be read (the client is not to wait on that
	// read), and while the gateway drains: Shutdown returns as the request
	// leaves, before net/http's flush, and a caller that exits then would
	// cut the end.
	tail := tails.tail.Load() != nil
	out.unflushed = !tail && !g.draining.Load()
	out.send()
	if tail {
		tails.endTail()
	}
	if out.broken {
		l.outcome = "client_closed"
		return
	}
	l.outcome = "ok"
}

// eventWriter holds a relay's encoded, unwritten events and writes them
// to the client. It is used by the relay's goroutine, and by the flush
// hook while the relay waits on its upstream, never by both at once.
//
// Each write has its own deadline (WithWriteTimeout). On HTTP/2 (h2) it
// is cleared once the write is out: there it is a timer on the stream,
// which resets the stream when it fires even with no write under way, so
// left armed it would end a stream whose upstream is quiet for longer
// than the write timeout (the gap deadline's to judge). On HTTP/1 it is
// the connection's, and only a write fails on it; the next write sets a
// new one.
type eventWriter struct {
	g   *Gateway
	ctx context.Context
	w   http.ResponseWriter
	rc  *http.ResponseController
	h2  bool

	buf       []byte
	box       *[]byte // buf's array, from relayBufs; nil while nothing is encoded
	broken    bool    // a write or flush failed: the client is gone
	headed    bool    // the status line and headers are out
	unflushed bool    // the write is the end's: net/http flushes it (see endStream)
}

// send writes what is encoded and flushes it, but for the end when
// unflushed is set.
func (o *eventWriter) send() {
	if len(o.buf) == 0 || o.broken {
		return
	}
	_ = o.rc.SetWriteDeadline(o.g.writeDeadline(o.ctx))
	if _, err := o.w.Write(o.buf); err != nil {
		o.broken = true
		return
	}
	if !o.unflushed {
		o.broken = o.rc.Flush() != nil
		if o.h2 {
			_ = o.rc.SetWriteDeadline(time.Time{})
		}
	}
	o.headed = true
	// Written: the array goes back to the pool, so that a stream
	// waiting on its upstream (which is when the hook sends) does
	// not keep one.
	if o.box != nil && cap(o.buf) <= maxPooledBuf {
		*o.box = o.buf[:0]
		relayBufs.Put(o.box)
	}
	o.buf, o.box = nil, nil
}

// take gives buf an array from the pool when it has none.
func (o *eventWriter) take() {
	if o.box == nil {
		o.box = relayBufs.Get().(*[]byte)
		o.buf = *o.box
	}
}

// relayBufs holds the relays' event buffers between writes; one grown past
// maxPooledBuf (a large tool call) is left to the collector.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1<<10); return &b }}

const maxPooledBuf = 64 << 10

// upstreamModel names, in X-Retryhost-Upstream-Model, the model id the
// upstream reported (such as "gpt-4o-2024-08-06"): the preamble's metadata
// arrives before the first content, so before the headers go out.
func upstreamModel(w http.ResponseWriter, p *abi.Part) {
	if p.Kind == abi.KindResponseMeta && p.Meta != nil && p.Meta.ModelID != "" {
		w.Header().Set("X-Retryhost-Upstream-Model", p.Meta.ModelID)
	}
}

// endErr names the outcome of a committed stream that failed, ended with
// the in-band error e: a fail-closed plugin's failure is plugin_failed, as
// e says to the client, any other truncated.
func (g *Gateway) endErr(ctx context.Context, e *apiError) string {
	if cause := context.Cause(ctx); cause != nil {
		if errors.Is(cause, ErrShuttingDown) {
			return "shutdown"
		}
		return "client_closed"
	}
	if e.code == codePluginFailed {
		return codePluginFailed
	}
	return "truncated"
}

// collect answers a non-streaming request: the committed stream, drained
// into one answer. The request committed at the end of its answer
// (driver.CommitAtEnd), so the stream replays a whole answer; a failure
// while reading it (the client gone, the gateway shutting down) is still an
// error answer, never a truncated 200.
func (g *Gateway) collect(ctx context.Context, w http.ResponseWriter, d door, l *accessLog, s driver.Stream, enc encoder) {
	var p abi.Part // one for the whole answer (see relay)
	for {
		var err error
		p, err = s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			// Nothing of the answer was written: the client gets fail's
			// whole answer (a 499 unwritten, a 503 shutting_down, the
			// error), and the log says that answer, never truncated.
			g.fail(ctx, w, d, l, err)
			return
		}
		if p.Kind == abi.KindRaw {
			enc.collect(&p)
			continue
		}
		l.parts++
		upstreamModel(w, &p)
		if p.Kind == abi.KindFinish && p.Finish != nil {
			l.inputToks, l.outputToks = p.Finish.Usage.InputTokens, p.Finish.Usage.OutputTokens
		}
		enc.collect(&p)
	}
	b := enc.appendAnswer(nil)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(g.writeDeadline(ctx))
	l.status, l.outcome = http.StatusOK, "ok"
	if _, err := w.Write(b); err != nil {
		l.outcome = "client_closed"
	}
}
