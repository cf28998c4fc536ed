package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/retryhost/retryhost/driver"
)

// forwardStateful forwards a stateful Responses request (cr.forward) to
// the OpenAI account of its chain (its route, then its own fallbacks),
// its body as it came but for "model", failing over between the
// account's models as embeddings do (forward): the stored response it
// refers to, or stores, is the account's, which each of them reaches. A
// chain that is not all one account is a 400 (statefulMsg).
func (g *Gateway) forwardStateful(ctx context.Context, w http.ResponseWriter, d door, c *call, cr *chatRequest, chain []*route) {
	l := &c.l
	var ts []target
	account := ""
	for i, rt := range chain {
		rts, acct := c.gen.accountTargets(rt)
		what := ""
		if i > 0 {
			what = "fallbacks[" + strconv.Itoa(i-1) + "]: "
		}
		switch {
		case rts == nil:
			what += "route " + strconv.Quote(rt.name) + " is not one OpenAI account"
		case account != "" && acct != account:
			what += "route " + strconv.Quote(rt.name) + " is another OpenAI account than route " + strconv.Quote(chain[0].name) + "'s"
		default:
			account, ts = acct, append(ts, rts...)
			continue
		}
		refuse(w, d, l, "invalid_request", cr.stateful, "retryhost gateway: "+cr.stateful+": "+what+": "+statefulMsg)
		return
	}
	g.forward(ctx, w, d, c, ts, "responses", cr.forward, nil, true)
}

// accountTargets returns the models of rt as forward targets, and their
// account, when every one of them (its model, or each of its group's) is
// an OpenAI model of one account (openai.Model.Account); else nil.
func (gen *generation) accountTargets(rt *route) ([]target, string) {
	n := 1
	if grp, ok := unwrap(rt.model).(*driver.DeploymentGroup); ok {
		n = len(grp.Deployments())
	}
	account := ""
	ts := gen.targets(rt, func(t *target) bool {
		if t.oai == nil || t.oai.Provider() != "openai" || t.oai.Account() == "" {
			return false
		}
		if account == "" {
			account = t.oai.Account()
		}
		return t.oai.Account() == account
	})
	if len(ts) != n {
		return nil, ""
	}
	return ts, account
}

// responseID is what a response id is made of (OpenAI's: resp_ and
// letters and digits).
var responseID = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// routeHeader names the route whose account stores a response, on the
// calls that refer to one by id (storedResponse), which carry no model.
const routeHeader = "X-Retryhost-Route"

// storedResponse serves the calls on a response that an OpenAI account
// stores: GET and DELETE /v1/responses/{id}, POST
// /v1/responses/{id}/cancel (background mode) and GET
// /v1/responses/{id}/input_items, forwarded with their query to that
// account (storedAccount), failing over between its models as forward
// does, and answered as it answers; errors in OpenAI's shape. The
// doors' admission and access log apply. A body goes along as it came
// (openai-go asks to resume a background response's stream with a GET
// whose JSON body says "stream": true).
func (g *Gateway) storedResponse(w http.ResponseWriter, r *http.Request) {
	d := responsesDoor{}
	c := &call{}
	l := &c.l
	l.id, l.start = newID("resp_rh"), time.Now()
	defer g.logAccess(r.Context(), r, l, &c.st.acct)
	defer c.close(g)
	id, op := r.PathValue("id"), r.PathValue("op")
	switch op {
	case "":
		c.allow = "GET, DELETE"
	case "cancel":
		c.allow = http.MethodPost
	case "input_items":
		c.allow = http.MethodGet
	default:
		l.requestID = requestID(r.Header.Get("X-Request-Id"), l.id)
		l.status, l.outcome = http.StatusNotFound, "client_error"
		writeErr(w, d, apiError{status: l.status, typ: "invalid_request_error", code: "not_found",
			msg: fmt.Sprintf("retryhost gateway: no endpoint %s %s", r.Method, r.URL.Path)})
		return
	}
	ctx, body, ok := g.admit(w, r, d, c)
	if !ok {
		return
	}
	if !responseID.MatchString(id) { // nor a dot segment, which would name another path of the account
		refuse(w, d, l, "invalid_request", "response_id", "retryhost gateway: "+strconv.Quote(id)+" is not a response id (letters, digits, '_', '-')")
		return
	}
	rt, ts := g.storedAccount(w, d, l, c.gen, r.Header.Get(routeHeader))
	if ts == nil {
		return
	}
	if c.key != nil && !g.admitKey(ctx, w, d, c, rt.name, nil, 0) {
		return
	}
	path := "responses/" + url.PathEscape(id)
	if op != "" {
		path += "/" + op
	}
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = nil
	}
	g.tryEach(ctx, w, d, c, ts, false, func(t *target) (*http.Response, error) {
		return t.oai.Send(ctx, r.Method, path, body, nil)
	})
}

// storedAccount returns the route, and its models as forward targets, of
// the account a call on a stored response goes to: the route name names
// (the routeHeader), which must be one OpenAI account; without one, the
// one account of the policy's routes that are (by name, the first such
// route). It returns nil targets with the refusal written: 404 when no
// route is one account, 400 when the name is not one, or when there are
// several accounts and no name to choose.
func (g *Gateway) storedAccount(w http.ResponseWriter, d door, l *accessLog, gen *generation, name string) (*route, []target) {
	const why = "a stored response is reachable only through a route whose models are all one OpenAI account (one base URL, key and headers), the account that stores it"
	if name != "" {
		rt := gen.routes[name]
		if rt == nil {
			l.status, l.outcome = http.StatusNotFound, "client_error"
			writeErr(w, d, apiError{status: l.status, typ: "invalid_request_error", code: "model_not_found",
				msg: "retryhost gateway: " + routeHeader + ": no route named " + strconv.Quote(name) + " (GET /v1/models lists them)"})
			return nil, nil
		}
		ts, _ := gen.accountTargets(rt)
		if ts == nil {
			refuse(w, d, l, "invalid_request", "", "retryhost gateway: "+routeHeader+": route "+strconv.Quote(name)+" is not one OpenAI account: "+why)
			return nil, nil
		}
		l.route = name
		return rt, ts
	}
	var (
		first    *route
		ts       []target
		accounts = map[string]bool{}
	)
	for _, n := range gen.names {
		rts, acct := gen.accountTargets(gen.routes[n])
		if rts == nil || accounts[acct] {
			continue
		}
		accounts[acct] = true
		if first == nil {
			first, ts = gen.routes[n], rts
		}
	}
	switch {
	case first == nil:
		l.status, l.outcome = http.StatusNotFound, "client_error"
		writeErr(w, d, apiError{status: l.status, typ: "invalid_request_error", code: "not_found",
			msg: "retryhost gateway: no route of this gateway stores responses: " + why})
		return nil, nil
	case len(accounts) > 1:
		refuse(w, d, l, "invalid_request", "", "retryhost gateway: the routes reach "+strconv.Itoa(len(accounts))+
			" OpenAI accounts: name the route whose account stores the response in the "+routeHeader+" header ("+why+")")
		return nil, nil
	}
	l.route = first.name
	return first, ts
}
