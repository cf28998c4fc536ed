package gateway

import (
	"net/http"
	"strconv"
	"time"
)

// countTokens serves POST /v1/messages/count_tokens, Anthropic's token
// count: forwarded to the route's Anthropic models (its own, or its
// group's), failing over between them (see forward), answered and refused
// in Anthropic's shape. The client's anthropic-beta header goes along.
// A route with no Anthropic model is a 400: another provider's tokenizer
// counts differently, so its count would mislead.
func (g *Gateway) countTokens(w http.ResponseWriter, r *http.Request) {
	d := messagesDoor{}
	c := &call{}
	l := &c.l
	l.id, l.start = newID("msgtok_rh"), time.Now()
	defer g.logAccess(r.Context(), r, l, &c.st.acct)
	defer c.close(g)
	ctx, body, ok := g.admit(w, r, d, c)
	if !ok {
		return
	}
	fields, name, ok := g.rawBody(ctx, w, d, c, body, nil) // counting is not billed: a request of the key's RPM
	if !ok {
		return
	}
	if _, ok := fields["messages"]; !ok {
		refuse(w, d, l, "invalid_request", "messages", "retryhost gateway: messages: at least one message is required")
		return
	}
	rt := lookup(w, d, l, c.gen, name)
	if rt == nil {
		return
	}
	ts := c.gen.targets(rt, func(t *target) bool { return t.ant != nil })
	if len(ts) == 0 {
		refuse(w, d, l, "invalid_request", "model", "retryhost gateway: route "+strconv.Quote(name)+
			" has no Anthropic model: count_tokens counts with Anthropic's tokenizer, which only an Anthropic model of the route has")
		return
	}
	var h http.Header
	if beta := r.Header.Values("Anthropic-Beta"); len(beta) > 0 {
		h = http.Header{"Anthropic-Beta": beta}
	}
	g.forward(ctx, w, d, c, ts, "v1/messages/count_tokens", fields, h, false)
}
