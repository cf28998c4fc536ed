package driver

import (
	"context"
	"errors"
	"fmt"
	"math"
)

// ErrBudgetExhausted is the cause recorded in a [RetryError] when a
// failure that a rule would have retried or failed over was not, because
// the Runner's retry budget (see [RetryBudget]) had no room for another
// retry in flight: the request failed fast instead of adding load to a
// provider that is already failing. Branch on it with errors.Is.
var ErrBudgetExhausted = errors.New("retryhost: retry budget exhausted")

// Defaults of a [RetryBudget] whose fields are zero.
const (
	DefaultBudgetPercent    = 20
	DefaultBudgetMinRetries = 3
)

// RetryBudget bounds the retries of a Runner as Envoy's retry budget does:
// the retries in flight (every attempt but a request's first, whether it
// retries the same model or fails over, from the moment a rule chooses it
// until it ends) may be at most Percent per cent of the requests in flight,
// and never fewer than MinRetries, so that a Runner with little traffic can
// still retry. A request's own retry limits (the rules' attempts,
// [WithMaxAttempts]) still apply; the budget is what stops many requests
// that fail together from multiplying the load on a provider that is
// browning out (a retry storm).
//
// With A requests in flight and R retries in flight, a rule's choice of a
// next attempt is followed when R < max(MinRetries, ⌊A × Percent / 100⌋);
// otherwise the request fails with a *[RetryError] whose Cause is
// [ErrBudgetExhausted]. A result that a rule rejected (a content filter's
// finish, say) is returned as the answer instead: the budget never turns
// an answer into an error.
//
// The counters live in the Runner's [State] under its state key
// ([WithStateKey]): Runners and replicas that share a State share them. A
// State on a store may count the requests and retries started in a
// sliding window instead of those in flight.
//
// A RetryBudget is a plain value; the Runner keeps the counters, safe for
// concurrent requests.
type RetryBudget struct {
	// Percent is the share of the requests in flight that may be retries
	// in flight, 1 to 100. Default (0) 20.
	Percent int
	// MinRetries is how many retries may be in flight whatever the
	// traffic, so that low traffic can still retry. Default (0) 3;
	// negative is an error.
	MinRetries int
}

// WithRetryBudget turns on a retry budget for the Runner (see
// [RetryBudget]); zero fields take their defaults, so
// WithRetryBudget(RetryBudget{}) is 20 % with a minimum of 3. Default: no
// budget, since a Runner cannot know whether it carries a whole service's
// traffic or one batch job's (docs/decisions.md, "Why is the retry budget off
// by default?").
func WithRetryBudget(b RetryBudget) Option {
	return func(c *config) error {
		if b.Percent == 0 {
			b.Percent = DefaultBudgetPercent
		}
		if b.MinRetries == 0 {
			b.MinRetries = DefaultBudgetMinRetries
		}
		if b.Percent < 1 || b.Percent > 100 {
			return fmt.Errorf("retryhost: retry budget percent %d is not in 1-100", b.Percent)
		}
		if b.MinRetries < 0 {
			return fmt.Errorf("retryhost: negative retry budget minimum %d", b.MinRetries)
		}
		c.retryBudget = &b
		return nil
	}
}

// budgetAllows is how many retries b lets be in flight with requests in flight.
func budgetAllows(b *RetryBudget, requests int64) int64 {
	n := requests
	if n > math.MaxInt64/100 {
		n = math.MaxInt64 / 100
	}
	return max(int64(b.MinRetries), n*int64(b.Percent)/100)
}

// budgetTake takes a retry slot for the next attempt, reporting false when
// the budget has none. A request holds at most one slot: the attempt that
// used it has ended by the time the next is chosen (budgetRelease).
func (q *request) budgetTake() bool {
	if !q.inBudget || q.retrySlot {
		return true
	}
	if !q.r.state.TryRetry(q.sctx, q.r.stateKey, *q.r.cfg.retryBudget) {
		return false
	}
	q.retrySlot = true
	return true
}

// budgetRelease gives back the retry slot of the attempt that just ended.
func (q *request) budgetRelease() {
	if q.retrySlot {
		q.retrySlot = false
		q.retryEnded()
	}
}

// retryEnded gives a retry slot back to the State, also when the request
// was cancelled: what it took must be given back.
func (q *request) retryEnded() {
	q.r.state.RetryEnded(q.giveBackCtx(), q.r.stateKey)
}

// giveBackCtx is the ctx for giving back what the request took: the
// request's, without its cancellation (the in-process State ignores it).
func (q *request) giveBackCtx() context.Context {
	if q.r.local || q.sctx.Done() == nil {
		return q.sctx
	}
	return context.WithoutCancel(q.sctx)
}

// budgetEnd ends q's presence in the budget. Idempotent.
func (q *request) budgetEnd() {
	q.budgetRelease()
	if q.inBudget {
		q.inBudget = false
		q.r.state.End(q.giveBackCtx(), q.r.stateKey)
	}
}
