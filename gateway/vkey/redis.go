package vkey

import (
	"context"
	"sync"
	"time"

	redisstate "github.com/retryhost/retryhost/state/redis"
)

// Fleet is a Limiter for a whole fleet: each key's rates and budgets are
// kept on Redis (a state/redis Limiter, one round trip an admission), and
// the settlement of a request's usage runs after the request, off its
// path. While Redis does not answer, it does what the key set's
// on_store_down says: "local" (the default), each replica limits on its
// own with a [Local] (a fleet of N replicas then admits up to N times a
// key's limits), or "refuse", every request of a limited key gets
// StoreDown (the gateway's 503). A Fleet is safe for concurrent use.
type Fleet struct {
	r      *redisstate.Limiter
	local  *Local
	onDown func() string
	wg     sync.WaitGroup // settlements in flight
}

var _ Limiter = (*Fleet)(nil)

// NewFleet returns a Fleet on r. onDown returns the key set's
// on_store_down (StoreDownLocal, StoreDownRefuse), read at each outage's
// request so that a reloaded key set's applies; nil is local.
func NewFleet(r *redisstate.Limiter, onDown func() string) *Fleet {
	return &Fleet{r: r, local: NewLocal(), onDown: onDown}
}

// Close waits for the settlements in flight; r stays its caller's to close.
func (f *Fleet) Close() { f.wg.Wait() }

// reasons: the Redis limiter's refusals as the Limiter's.
var reasons = map[redisstate.Refusal]Reason{
	redisstate.NotRefused: Admitted, redisstate.RefusedRPM: OverRPM,
	redisstate.RefusedTPM: OverTPM, redisstate.RefusedBudget: OverBudget,
	redisstate.RefusedSpend: OverSpend,
}

func limitsOf(k *Key) redisstate.Limits {
	return redisstate.Limits{RPM: k.RPM, TPM: k.TPM, TokensPerDay: k.Budget.TokensPerDay, TokensPerMonth: k.Budget.TokensPerMonth,
		CostPerDay: k.Budget.CostPerDay, CostPerMonth: k.Budget.CostPerMonth}
}

func periodOf(now time.Time) redisstate.Period {
	day, month, dayEnd, monthEnd := Period(now)
	return redisstate.Period{Day: day, Month: month, DayEnd: dayEnd, MonthEnd: monthEnd}
}

// Admit implements [Limiter] in one round trip to Redis.
func (f *Fleet) Admit(ctx context.Context, k *Key, est int64, now time.Time) Decision {
	if !k.Limited() {
		return Decision{Requests: k.RPM, Tokens: k.TPM}
	}
	p := periodOf(now)
	a, err := f.r.Admit(ctx, k.ID, limitsOf(k), Cost(k, est), p, now)
	if err == nil {
		d := Decision{Reason: reasons[a.Refused], Requests: k.RPM, Tokens: k.TPM, RetryAfter: a.Wait,
			RemainingRequests: a.RemainingRequests, ResetRequests: a.ResetRequests,
			RemainingTokens: a.RemainingTokens, ResetTokens: a.ResetTokens}
		if a.Refused == redisstate.RefusedBudget || a.Refused == redisstate.RefusedSpend {
			d.RetryAfter = p.DayEnd.Sub(now)
			if a.Month {
				d.RetryAfter = p.MonthEnd.Sub(now)
			}
		}
		return d
	}
	if f.onDown != nil && f.onDown() == StoreDownRefuse {
		return Decision{Reason: StoreDown, Requests: k.RPM, Tokens: k.TPM, RetryAfter: f.r.RetryInterval()}
	}
	return f.local.Admit(ctx, k, est, now)
}

// Settle implements [Limiter]: the script runs after the request, in a
// goroutine of its own (Close waits for it), and in process while Redis
// does not answer.
func (f *Fleet) Settle(ctx context.Context, k *Key, delta int64, cost float64, now time.Time) {
	if !k.Budget.Spends() {
		cost = 0
	}
	if !k.Limited() || delta == 0 && !(cost > 0) {
		return
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if f.r.Settle(context.WithoutCancel(ctx), k.ID, limitsOf(k), delta, cost, periodOf(now), now) != nil {
			f.local.Settle(ctx, k, delta, cost, now)
		}
	}()
}
