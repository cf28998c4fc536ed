package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/anthropic"
	"github.com/retryhost/retryhost/provider/openai"
)

// The forwarded doors (count_tokens, embeddings, a stateful Responses
// request) serve what the driver does not model: the request goes to an
// upstream of the same API as the client's, its body unchanged but for
// "model", and the answer comes back as the upstream wrote it (an event
// stream flushed as it comes). They share the chat doors'
// admission (keys, limits, body budget, drain) and access log, and fail
// over between the route's models: a route's own model, or its group's in
// the group's order, each tried once; a failure that chainOn moves on from
// (a rate limit, a server error, a cut connection, the upstream refusing
// the gateway's key or not having the model) goes to the next, any other
// (the upstream rejecting the request itself) is answered at once.

// poster is a model that forwards a raw request (the adapters' Post).
type poster interface {
	Post(ctx context.Context, path string, body []byte, h http.Header) (*http.Response, error)
}

// target is one model a forwarded request may go to.
type target struct {
	name string // the policy's name of the model
	id   string // the model id the upstream body names
	post poster
	oai  *openai.Model    // set when the model is OpenAI-compatible
	ant  *anthropic.Model // set when it is Anthropic's
}

// unwrap is m without the policy's and telemetry's wrappers.
func unwrap(m driver.Model) driver.Model {
	for {
		u, ok := m.(interface{ Unwrap() driver.Model })
		if !ok {
			return m
		}
		m = u.Unwrap()
	}
}

// targets returns the models of rt a forwarded request may go to: its
// model, or its group's in order; keep filters them. A "*" model sends the
// id the client named.
func (gen *generation) targets(rt *route, keep func(*target) bool) []target {
	members := []driver.Model{rt.model}
	grouped := false
	if g, ok := unwrap(rt.model).(*driver.DeploymentGroup); ok {
		members, grouped = g.Deployments(), true
	}
	var ts []target
	for _, m := range members {
		t := target{name: gen.name(m)}
		if !grouped {
			t.name = rt.name
		}
		switch in := unwrap(m).(type) {
		case *openai.Model:
			t.id, t.post, t.oai = in.ModelID(), in, in
		case *anthropic.Model:
			t.id, t.post, t.ant = in.ModelID(), in, in
		default:
			continue
		}
		if t.id == driver.AnyModelID {
			t.id = rt.id
		}
		if keep(&t) {
			ts = append(ts, t)
		}
	}
	return ts
}

// admit takes a forwarded door's request up to its body: screened,
// admitted, the policy held, the body read and charged. It returns the
// request's context and body, or false with the refusal written. The
// caller runs c.close in every case.
func (g *Gateway) admit(w http.ResponseWriter, r *http.Request, d door, c *call) (context.Context, []byte, bool) {
	l := &c.l
	if !g.screen(w, r, d, c) {
		return nil, nil, false
	}
	client, status := g.enter(w, r, d)
	if status != 0 {
		l.status, l.outcome = status, "rejected"
		return nil, nil, false
	}
	c.entered, c.client, c.key = true, client, keyOf(r.Context())
	if c.gen = g.acquire(); c.gen == nil {
		l.status, l.outcome = http.StatusServiceUnavailable, "shutdown"
		writeErr(w, d, errShutdown)
		return nil, nil, false
	}
	ctx, body, read := g.readBody(w, r, d, c)
	if !read || !g.chargeBody(w, d, c, body) {
		return nil, nil, false
	}
	return ctx, body, true
}

// refuse answers a client's mistake in d's shape.
func refuse(w http.ResponseWriter, d door, l *accessLog, code, param, msg string) {
	l.status, l.outcome = http.StatusBadRequest, "client_error"
	writeErr(w, d, apiError{status: l.status, typ: "invalid_request_error", code: code, param: param, msg: msg})
}

// rawBody reads a forwarded request's body as a JSON object and its
// "model", then admits it under the client's virtual key, if it has one,
// charging est tokens; false with the answer written when it is not a
// JSON object with a model or the key refuses it. est, if not nil,
// estimates the request's tokens from its fields (none: 0).
func (g *Gateway) rawBody(ctx context.Context, w http.ResponseWriter, d door, c *call, body []byte, est func(map[string]json.RawMessage) int64) (map[string]json.RawMessage, string, bool) {
	l := &c.l
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		refuse(w, d, l, "invalid_request", "", "retryhost gateway: the body is not a JSON object")
		return nil, "", false
	}
	var model string
	if err := json.Unmarshal(fields["model"], &model); err != nil || model == "" {
		refuse(w, d, l, "invalid_request", "model", "retryhost gateway: model is required, a string naming a route (GET /v1/models lists them)")
		return nil, "", false
	}
	if c.key != nil {
		var n int64
		if est != nil {
			n = est(fields)
		}
		if !g.admitKey(ctx, w, d, c, model, nil, n) {
			return nil, "", false
		}
	}
	return fields, model, true
}

// lookup returns the route of name, or nil with a 404 written.
func lookup(w http.ResponseWriter, d door, l *accessLog, gen *generation, name string) *route {
	rt := gen.routes[name]
	if rt == nil {
		rt = gen.implicitRoute(name)
	}
	if rt == nil {
		l.status, l.outcome = http.StatusNotFound, "client_error"
		writeErr(w, d, apiError{status: l.status, typ: "invalid_request_error", code: "model_not_found", param: "model",
			msg: "retryhost gateway: no route named " + strconv.Quote(name) + " (GET /v1/models lists them)"})
		return nil
	}
	l.route, l.implicit = name, rt.implicit
	return rt
}

// forward sends the request to each target in turn, its body's "model"
// set to the target's id, until one answers with a 2xx or fails in a way
// that does not move a request on (chainOn), then answers the client: the
// upstream's status, content type and body as they came, or the failure
// in d's shape (fail). A billed door's answer is read for its usage as it
// goes by (usageTap), for the request's accounting.
func (g *Gateway) forward(ctx context.Context, w http.ResponseWriter, d door, c *call, ts []target, path string, fields map[string]json.RawMessage, h http.Header, billed bool) {
	g.tryEach(ctx, w, d, c, ts, billed, func(t *target) (*http.Response, error) {
		fields["model"], _ = json.Marshal(t.id)
		body, err := json.Marshal(fields)
		if err != nil { // json.RawMessage members are valid JSON: never
			return nil, err
		}
		return t.post.Post(ctx, path, body, h)
	})
}

// tryEach sends the request (send) to each target in turn until one
// answers with a 2xx or fails in a way that does not move a request on
// (chainOn), then answers the client as forward says. Each try is an
// attempt of the request's trail (its request log line); the one that
// answered carries the usage its answer reported when billed, which the
// request's key is charged (settleKey) and its accounting counts.
func (g *Gateway) tryEach(ctx context.Context, w http.ResponseWriter, d door, c *call, ts []target, billed bool, send func(*target) (*http.Response, error)) {
	var (
		resp  *http.Response
		err   error
		t     target
		tried time.Time // the last attempt's start
	)
	l, tr := &c.l, &c.st.acct
	tr.start, tr.prices = l.start, c.gen.pol.Prices
	for i := range ts {
		t = ts[i]
		l.attempts++
		tried = time.Now()
		if resp, err = send(&t); err != nil {
			a := acctAttempt{model: t.name, number: l.attempts, outcome: driver.AttemptFailed, ended: true,
				start: tried.Sub(l.start), duration: time.Since(tried), failOver: i > 0, class: classify(err).class}
			if pe := lastProviderError(err); pe != nil {
				a.status = pe.Status
			}
			tr.add(a)
		}
		if err == nil || ctx.Err() != nil || !chainOn(err) {
			break
		}
		if i < len(ts)-1 {
			l.fallbacks++
			g.metrics.failovers.WithLabelValues(l.route).Inc()
		}
	}
	l.model = t.name
	if err != nil {
		g.fail(ctx, w, d, l, err)
		return
	}
	defer resp.Body.Close()
	a := acctAttempt{model: t.name, number: l.attempts, outcome: driver.AttemptSucceeded, ended: true,
		start: tried.Sub(l.start), failOver: l.attempts > 1}
	l.commitAt = time.Since(l.start)
	a.ttfc = l.commitAt - a.start
	hd := w.Header()
	hd.Set("X-Retryhost-Model", t.name)
	hd.Set("X-Retryhost-Attempts", strconv.Itoa(l.attempts))
	for _, k := range [...]string{"Content-Type", "Content-Length"} {
		if v := resp.Header.Get(k); v != "" {
			hd.Set(k, v)
		}
	}
	if hd.Get("Content-Type") == "" {
		hd.Set("Content-Type", "application/json")
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(g.writeDeadline(ctx))
	w.WriteHeader(resp.StatusCode)
	l.status, l.outcome = resp.StatusCode, "ok"
	sse := strings.HasPrefix(hd.Get("Content-Type"), "text/event-stream")
	var (
		body io.Reader = resp.Body
		tap  *usageTap
	)
	if billed {
		tap = newUsageTap(sse)
		body = io.TeeReader(resp.Body, tap)
	}
	if sse {
		err = g.copyEvents(ctx, rc, w, body)
	} else {
		_, err = io.Copy(w, body)
	}
	if err != nil {
		l.outcome = "truncated"
		a.outcome, a.class = driver.AttemptTruncated, abi.ClassNetwork.String()
		var we interface{ Timeout() bool }
		if ctx.Err() != nil || errors.As(err, &we) {
			l.outcome = "client_closed"
		}
	}
	a.duration = time.Since(tried)
	if tap != nil {
		if u, ok := tap.usage(); ok {
			a.usage = u
			l.inputToks, l.outputToks = u.InputTokens, u.OutputTokens
		}
	}
	tr.add(a)
}

// copyEvents copies an upstream's event stream (a stateful Responses
// request's) to the client as it comes: each read flushed at once, under
// a write deadline renewed for each, as a relayed stream's are.
func (g *Gateway) copyEvents(ctx context.Context, rc *http.ResponseController, w io.Writer, r io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_ = rc.SetWriteDeadline(g.writeDeadline(ctx))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if ferr := rc.Flush(); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
