package gateway

import (
	"context"
	"net/http"
	"strconv"

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
		what := "route " + strconv.Quote(rt.name) + " is not one OpenAI account"
		if rts != nil && account != "" && acct != account {
			what = "fallbacks[" + strconv.Itoa(i-1) + "]: route " + strconv.Quote(rt.name) + " is another OpenAI account than route " + strconv.Quote(chain[0].name) + "'s"
		}
		if rts == nil || (account != "" && acct != account) {
			refuse(w, d, l, "invalid_request", cr.stateful, "retryhost gateway: "+cr.stateful+": "+what+": "+statefulMsg)
			return
		}
		account, ts = acct, append(ts, rts...)
	}
	g.forward(ctx, w, d, l, ts, "responses", cr.forward, nil)
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
