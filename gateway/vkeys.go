package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/retryhost/retryhost/gateway/vkey"
)

// WithKeySet makes every endpoint but /healthz and /readyz require a key
// of s (see package vkey) or of WithAPIKeys: an unknown, expired or
// revoked key gets 401. A request with a virtual key is held to its
// routes (403 for another model), rates, budget and concurrency (429);
// see the multi-team gateway page of the manual. Default: none.
func WithKeySet(s *vkey.Set) Option {
	return func(c *config) error {
		if s == nil {
			return errors.New("gateway: nil key set")
		}
		c.keySet = s
		return nil
	}
}

// WithLimiter sets what keeps the virtual keys' rates and budgets: a
// fleet-wide store (a vkey.Fleet on state/redis's Limiter) or, by default, a vkey.Local in
// this process.
func WithLimiter(l vkey.Limiter) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("gateway: nil limiter")
		}
		c.limiter = l
		return nil
	}
}

// SetKeySet replaces the virtual keys for every request from now on, as
// SetAPIKeys does the plain ones; the counters of a key kept (by id) stay.
// retryhost serve calls it when its --keys-file changes or on SIGHUP.
func (g *Gateway) SetKeySet(s *vkey.Set) error {
	if s == nil {
		return errors.New("gateway: nil key set")
	}
	g.keySet.Store(s)
	if l, ok := g.cfg.limiter.(*vkey.Local); ok {
		l.Forget(s)
	}
	g.warnUnpricedSpend(context.Background())
	return nil
}

// warnUnpricedSpend logs a warning when a virtual key has a spend budget
// and the policy prices no model: every request would cost 0, and the
// budget never be reached.
func (g *Gateway) warnUnpricedSpend(ctx context.Context) {
	s, gen := g.keySet.Load(), g.cur.Load()
	if s == nil || gen == nil || len(gen.pol.Prices) > 0 {
		return
	}
	for _, k := range s.Keys() {
		if k.Budget.Spends() {
			g.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "a virtual key has a spend budget but the policy prices no model: its spend stays 0",
				slog.String("key", k.ID))
			return
		}
	}
}

type keyCtxKey struct{}

// KeyID returns the id of the virtual key a request was admitted with,
// from its context (the handler's or any below it), or "" (a plain API
// key, or none).
func KeyID(ctx context.Context) string {
	if k, ok := ctx.Value(keyCtxKey{}).(*vkey.Key); ok {
		return k.ID
	}
	return ""
}

// keyOf returns the virtual key of a request's context, if any.
func keyOf(ctx context.Context) *vkey.Key {
	k, _ := ctx.Value(keyCtxKey{}).(*vkey.Key)
	return k
}

// virtualKey finds the request's virtual key among the credentials it
// presents: the key, or why none is served (an expired or revoked key's
// own message; "" when no credential is a key of s).
func virtualKey(r *http.Request, s *vkey.Set, now time.Time) (*vkey.Key, string) {
	bearerKey, _ := bearer(r.Header.Get("Authorization"))
	why := ""
	for _, cred := range [2]string{bearerKey, r.Header.Get("X-Api-Key")} {
		if cred = strings.TrimSpace(cred); cred == "" {
			continue
		}
		k, ok := s.Lookup(cred)
		if !ok {
			continue
		}
		switch k.StatusAt(now) {
		case vkey.Valid:
			return k, ""
		case vkey.Revoked:
			why = "retryhost gateway: API key " + strconv.Quote(k.ID) + " is revoked"
		case vkey.Expired:
			why = "retryhost gateway: API key " + strconv.Quote(k.ID) + " expired at " + k.Expires.UTC().Format(time.RFC3339)
		}
	}
	return nil, why
}

// refuseKey answers 401 for a request with no key served.
func (g *Gateway) refuseKey(w http.ResponseWriter, r *http.Request, d door, msg string) {
	g.stats.unauthorized.Add(1)
	w.Header().Set("WWW-Authenticate", `Bearer realm="retryhost"`)
	if w.Header().Get("X-Request-Id") == "" {
		refusedID(w, r, d)
	}
	writeErr(w, d, apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "invalid_api_key", msg: msg})
	g.logRefused(r, w, http.StatusUnauthorized, "unauthorized")
}

// estimateTokens is what a request is charged at admission against its
// key's TPM and budget: its body's bytes over 4 (the input, roughly) and
// the output it allows (max_tokens), settled on the upstream's usage.
func estimateTokens(bodyLen int, cr *chatRequest) int64 {
	return int64(bodyLen/4) + int64(max(cr.req.MaxOutputTokens, 0))
}

// admitKey holds a request with a virtual key to its routes (403) and its
// limits (429; the x-ratelimit-* headers on every answer of a rate-limited
// key): false when it was refused, with the answer written.
// The request asks for model, then its fallbacks; est is its token
// estimate (estimateTokens).
func (g *Gateway) admitKey(ctx context.Context, w http.ResponseWriter, d door, c *call, model string, fallbacks []string, est int64) bool {
	k := c.key
	l := &c.l
	for i := 0; i <= len(fallbacks); i++ {
		name, param := model, "model"
		if i > 0 {
			name, param = fallbacks[i-1], "fallbacks["+strconv.Itoa(i-1)+"]"
		}
		if !k.Allows(name) {
			l.status, l.outcome = http.StatusForbidden, "forbidden"
			writeErr(w, d, apiError{status: l.status, typ: "invalid_request_error", code: "model_not_allowed", param: param,
				msg: "retryhost gateway: API key " + strconv.Quote(k.ID) + " may not use " + strconv.Quote(name)})
			return false
		}
	}
	if !k.Limited() {
		return true
	}
	now := time.Now()
	dec := g.limiter().Admit(ctx, k, est, now)
	h := w.Header()
	if k.RPM > 0 || k.TPM > 0 {
		rh := new(rateHeaders) // the six values, and the bytes they are made of: one allocation
		if k.RPM > 0 {
			h["X-Ratelimit-Limit-Requests"] = rh.put(0, strconv.AppendInt(rh.next(), k.RPM, 10))
			h["X-Ratelimit-Remaining-Requests"] = rh.put(1, strconv.AppendInt(rh.next(), dec.RemainingRequests, 10))
			h["X-Ratelimit-Reset-Requests"] = rh.put(2, appendReset(rh.next(), dec.ResetRequests))
		}
		if k.TPM > 0 {
			h["X-Ratelimit-Limit-Tokens"] = rh.put(3, strconv.AppendInt(rh.next(), k.TPM, 10))
			h["X-Ratelimit-Remaining-Tokens"] = rh.put(4, strconv.AppendInt(rh.next(), dec.RemainingTokens, 10))
			h["X-Ratelimit-Reset-Tokens"] = rh.put(5, appendReset(rh.next(), dec.ResetTokens))
		}
	}
	e := apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "rate_limit_exceeded"}
	switch dec.Reason {
	case vkey.Admitted:
		c.keyCharged, c.est = true, vkey.Cost(k, est)
		return true
	case vkey.OverRPM:
		e.msg = "retryhost gateway: API key " + strconv.Quote(k.ID) + " is over its " + strconv.FormatInt(k.RPM, 10) + " requests per minute"
	case vkey.OverTPM:
		e.msg = "retryhost gateway: API key " + strconv.Quote(k.ID) + " is over its " + strconv.FormatInt(k.TPM, 10) + " tokens per minute"
	case vkey.OverBudget, vkey.OverSpend:
		// As OpenAI answers an exhausted quota: 429, insufficient_quota,
		// and no retry (x-should-retry: false, which both SDKs obey).
		e.typ, e.code = "insufficient_quota", "insufficient_quota"
		what := "token"
		if dec.Reason == vkey.OverSpend {
			what = "spend"
		}
		e.msg = "retryhost gateway: API key " + strconv.Quote(k.ID) + " has used its " + what + " budget until " +
			now.Add(dec.RetryAfter).UTC().Format(time.RFC3339)
		h.Set("X-Should-Retry", "false")
	case vkey.StoreDown:
		e = apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "limits_unavailable",
			msg: "retryhost gateway: the rate-limit store is unreachable and this key set is refused while it is"}
	}
	h.Set("Retry-After", retryAfterHeader(dec.RetryAfter))
	l.status, l.outcome = e.status, "rejected"
	writeErr(w, d, e)
	return false
}

// limiter is the virtual keys' Limiter.
func (g *Gateway) limiter() vkey.Limiter { return g.cfg.limiter }

// settleKey charges a request's key what it used beyond its estimate
// (the upstream's reported usage) and, for a key with a spend budget, what
// every attempt of it cost at the policy's prices, once it is over.
func (g *Gateway) settleKey(c *call) {
	if !c.keyCharged {
		return
	}
	c.keyCharged = false
	used := c.l.inputToks + c.l.outputToks
	delta := used - c.est
	if used == 0 && c.l.status == http.StatusOK {
		delta = 0 // answered without a usage (a forwarded door's): the estimate stands
	}
	var cost float64
	if c.key.Budget.Spends() {
		cost = c.st.acct.sum().cost
	}
	if delta != 0 || cost > 0 {
		g.limiter().Settle(context.Background(), c.key, delta, cost, time.Now())
	}
}

// rateHeaders holds a limited key's x-ratelimit-* values, each a slice
// of its own, and the bytes they are strings of: an answer's six values
// in one allocation rather than one or two each.
type rateHeaders struct {
	v   [6]string
	buf [6 * 24]byte // a value is at most 20 bytes (an int64; a reset, appendReset)
	n   int          // of buf, used
}

// next returns buf's unused part, empty, to append one value to.
func (rh *rateHeaders) next() []byte { return rh.buf[rh.n:rh.n:len(rh.buf)] }

// put makes b, appended to next's slice, value i and returns it as a
// header's values. b is never written again: the string may share it.
func (rh *rateHeaders) put(i int, b []byte) []string {
	if len(b) > 0 && cap(b) == len(rh.buf)-rh.n { // appended in place
		rh.v[i] = unsafe.String(&b[0], len(b))
		rh.n += len(b)
	} else {
		rh.v[i] = string(b) // grown elsewhere (not reached: a value fits)
	}
	return rh.v[i : i+1 : i+1]
}

// appendReset appends a wait as OpenAI's x-ratelimit-reset-* render it
// ("1s", "6m0s", "20ms") to b.
func appendReset(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, "0s"...)
	}
	if d < time.Second {
		return append(strconv.AppendInt(b, int64((d+time.Millisecond-1)/time.Millisecond), 10), "ms"...)
	}
	d = d.Round(time.Second)
	if d%time.Second != 0 || d >= 1000*time.Hour { // rounded to the largest Duration
		return append(b, d.String()...)
	}
	s := int64(d / time.Second)
	if h := s / 3600; h > 0 {
		b = append(strconv.AppendInt(b, h, 10), 'h')
		b = append(strconv.AppendInt(b, s/60%60, 10), 'm')
	} else if m := s / 60; m > 0 {
		b = append(strconv.AppendInt(b, m, 10), 'm')
	}
	return append(strconv.AppendInt(b, s%60, 10), 's')
}
