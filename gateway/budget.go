package gateway

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
)

// defaultBodyBudget is WithBodyBudget's default: 512 MiB of memory for the
// request bodies in flight, sized for a 2-core machine. Such machines
// have 4 GiB (2 GiB a core, the compute-optimised size) to 8 GiB; 512 MiB
// of live heap is at most about 1 GiB resident under Go's default GOGC, a
// quarter of the smaller, which leaves the rest to streams, plugin
// instances and the runtime. It holds 7 of the largest text bodies (8
// MiB, charged 64 MiB each) being opened at once, about 330 requests of
// 100 KiB with 2,000 JSON values, and committed streams up to
// WithMaxConcurrent (1024) while their bodies are under 256 KiB.
const defaultBodyBudget = 512 << 20

// What a request is charged against the body budget, by the stage it is
// in. The charges bound the heap the gateway holds for a body at each
// stage, measured on 8 MiB bodies of every shape the doors decode (tiny
// messages, content blocks, tool results, stop sequences, tools, object
// members, long strings) through both doors to both kinds of upstream:
//   - while its body arrives, 2 bytes a byte: io.ReadAll's buffer grows
//     by copying;
//   - once read, until its request is open (committed, or answered
//     otherwise), 8 bytes a byte and 384 a JSON value: parsing it,
//     encoding it for the upstream and the copies between held at most
//     7.8 times a body of a few long strings and, beyond the body, 377
//     bytes a value for a body of many tiny values;
//   - from commit to its end, 2 bytes a byte: the upstream request's body,
//     which its connection keeps while the answer streams, and the parsed
//     request a stream that continues after commit keeps.
const (
	bodyReadCost  = 2
	bodyByteCost  = 8
	bodyValueCost = 384
	bodyHeldCost  = 2
)

// bodyBudget is the gateway's in-flight body budget (WithBodyBudget), in
// bytes charged.
type bodyBudget struct {
	limit int64
	used  atomic.Int64
}

// take charges n, or reports false, charging nothing, when n does not fit.
func (b *bodyBudget) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// settle brings what c is charged to n: it takes the difference, or gives
// it back. Taking reports false, charging nothing more, when it does not fit.
func (b *bodyBudget) settle(c *call, n int64) bool {
	if d := n - c.charged; d > 0 {
		if !b.take(d) {
			return false
		}
	} else {
		b.used.Add(d)
	}
	c.charged = n
	return true
}

// errBodyBudget ends the reading of a body that the budget has no room for.
var errBodyBudget = errors.New("retryhost gateway: the body budget is full")

// chargedBody charges what is read of a body as it arrives.
type chargedBody struct {
	r io.Reader
	b *bodyBudget
	c *call
}

func (cb *chargedBody) Read(p []byte) (int, error) {
	n, err := cb.r.Read(p)
	if n > 0 && !cb.b.settle(cb.c, cb.c.charged+bodyReadCost*int64(n)) {
		return n, errBodyBudget
	}
	return n, err
}

// chargeBody charges a body read whole for its decoding; a body that does
// not fit gets 429 (the budget is full: retry later) or, when it needs
// more than the whole budget, 413.
func (g *Gateway) chargeBody(w http.ResponseWriter, d door, c *call, body []byte) bool {
	values := jsonValues(body)
	cost := bodyByteCost*int64(len(body)) + bodyValueCost*values
	l := &c.l
	if cost > g.budget.limit {
		l.status, l.outcome = http.StatusRequestEntityTooLarge, "client_error"
		writeErr(w, d, apiError{status: l.status, typ: "invalid_request_error", code: "request_too_large",
			msg: "retryhost gateway: decoding this body (" + strconv.Itoa(len(body)) + " bytes, " + strconv.FormatInt(values, 10) +
				" JSON values) takes about " + strconv.FormatInt(cost, 10) + " bytes, more than the gateway's whole body budget of " +
				strconv.FormatInt(g.budget.limit, 10) + ": send fewer, larger values"})
		return false
	}
	if !g.budget.settle(c, cost) {
		g.refuseBudget(w, d, c)
		return false
	}
	return true
}

// refuseBudget answers a request the body budget has no room for: 429
// with Retry-After, as when the gateway is full (WithMaxConcurrent).
func (g *Gateway) refuseBudget(w http.ResponseWriter, d door, c *call) {
	g.stats.rejectedBudget.Add(1)
	c.l.status, c.l.outcome = http.StatusTooManyRequests, "rejected"
	w.Header().Set("Retry-After", retryAfterHeader(g.cfg.retryAfterBusy))
	writeErr(w, d, apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "gateway_busy",
		msg: "retryhost gateway: the request bodies in flight fill the gateway's body budget (" +
			strconv.FormatInt(g.budget.limit, 10) + " bytes); retry later"})
}

// jsonValues counts the values of the JSON text b, near enough for the
// budget: its objects and arrays, and the elements and members after the
// first of each ('{', '[' and ',' outside strings).
func jsonValues(b []byte) int64 {
	var n int64
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{', '[', ',':
			n++
		case '"':
			for { // to the quote that ends the string: one after an even run of backslashes
				j := bytes.IndexByte(b[i+1:], '"')
				if j < 0 {
					return n
				}
				i += 1 + j
				k := i - 1
				for b[k] == '\\' {
					k--
				}
				if (i-1-k)%2 == 0 {
					break
				}
			}
		}
	}
	return n
}
