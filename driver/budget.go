package driver

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
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
// traffic or one batch job's (RATIONALE.md, "Why is the retry budget off
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

// budgetState holds the counters of a retry budget. It is an interface so
// that a fleet can share them (a store such as Redis behind it) as it
// shares cooldowns; localBudget is the in-process one. Every method must
// be safe for concurrent use and must not block for long: it runs on the
// request's path.
//
// TODO(fleet, issue 15): the exported state interface is not built yet.
// Next: one small interface in driver for what replicas share (a model's
// cooldown and probe, a Retry-After per model or key, sticky fallbacks per
// sticky key, these counters, a group's latency statistics), in-process by
// default; package state/redis on go-redis v9 (at most one round trip per
// request, TTLs not timestamps, local fallback when Redis is slow or down);
// "state": {"redis": …} in policy files; .ci/run installs redis-server; the
// fleet test runs three `retryhost serve` replicas on one Redis.
type budgetState interface {
	// requestStarted and requestEnded bracket a request in flight.
	requestStarted()
	requestEnded()
	// tryRetry takes a slot for a retry in flight if the budget allows
	// one, and reports whether it did.
	tryRetry(b *RetryBudget) bool
	// retryEnded gives back a slot tryRetry took.
	retryEnded()
}

// localBudget is a budgetState in this process's memory: two atomic counters.
type localBudget struct {
	requests atomic.Int64
	retries  atomic.Int64
}

func (l *localBudget) requestStarted() { l.requests.Add(1) }
func (l *localBudget) requestEnded()   { l.requests.Add(-1) }
func (l *localBudget) retryEnded()     { l.retries.Add(-1) }

func (l *localBudget) tryRetry(b *RetryBudget) bool {
	for {
		r := l.retries.Load()
		if r >= budgetAllows(b, l.requests.Load()) {
			return false
		}
		if l.retries.CompareAndSwap(r, r+1) {
			return true
		}
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

// budgetBegin counts q as a request in flight.
func (q *request) budgetBegin() {
	if s := q.r.budget; s != nil && !q.disabled {
		s.requestStarted()
		q.inBudget = true
	}
}

// budgetTake takes a retry slot for the next attempt, reporting false when
// the budget has none. A request holds at most one slot: the attempt that
// used it has ended by the time the next is chosen (budgetRelease).
func (q *request) budgetTake() bool {
	if !q.inBudget || q.retrySlot {
		return true
	}
	if !q.r.budget.tryRetry(q.r.cfg.retryBudget) {
		return false
	}
	q.retrySlot = true
	return true
}

// budgetRelease gives back the retry slot of the attempt that just ended.
func (q *request) budgetRelease() {
	if q.retrySlot {
		q.retrySlot = false
		q.r.budget.retryEnded()
	}
}

// budgetEnd ends q's presence in the budget. Idempotent.
func (q *request) budgetEnd() {
	q.budgetRelease()
	if q.inBudget {
		q.inBudget = false
		q.r.budget.requestEnded()
	}
}
