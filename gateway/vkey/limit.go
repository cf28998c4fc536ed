package vkey

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Window is the span RPM and TPM are counted over.
const Window = time.Minute

// Reason is what a Limiter refused a request for.
type Reason int

const (
	Admitted Reason = iota
	OverRPM
	OverTPM
	OverBudget
	// StoreDown: the fleet-wide store is unreachable and the key set says
	// StoreDownRefuse.
	StoreDown
	// OverSpend: the key has spent its day's or month's cost budget.
	OverSpend
)

// Decision is a Limiter's answer to one request, with what the
// x-ratelimit-* headers say: the key's limits, what remains of them after
// this request, and when they are whole again.
type Decision struct {
	Reason Reason
	// RetryAfter is when a refused request may be admitted.
	RetryAfter time.Duration
	// Requests and Tokens are the key's RPM and TPM (0: none).
	Requests, Tokens                   int64
	RemainingRequests, RemainingTokens int64
	ResetRequests, ResetTokens         time.Duration
}

// A Limiter keeps keys' rates and budgets. Admit charges one request and
// est tokens (an estimate of its input and output) when every limit of the
// key has room for them, atomically, and charges nothing otherwise;
// Settle charges what the request used beyond est (delta; negative: gives
// back what it did not use) and what it cost, once its usage is known. A
// request's cost is not known before it runs: Admit refuses a key whose
// spend has reached its budget, so the request that crosses a budget is
// served and counted in full, and the next is refused. Keys are told apart
// by id, so a key's counters outlive a reload and a rotation of its secret.
type Limiter interface {
	Admit(ctx context.Context, k *Key, est int64, now time.Time) Decision
	Settle(ctx context.Context, k *Key, delta int64, cost float64, now time.Time)
}

// Local is a Limiter in process: GCRA for the rates (a key may spend a
// whole minute's requests or tokens at once, then at the rate), counters
// per UTC day and month for the token and spend budgets. It is safe for
// concurrent use.
type Local struct {
	m      sync.Map // key id → *local: read without a lock on every request
	period atomic.Pointer[period]
}

// period is a UTC day's Period, kept while requests are in it: Period's
// two time.Date cost more than the rest of an admission.
type period struct {
	start, end       int64 // the day's, in ns since 1970
	day, month       int64
	dayEnd, monthEnd time.Time
}

// periodOf returns Period(now), from the day's cached.
func (l *Local) periodOf(now time.Time) (day, month int64, dayEnd, monthEnd time.Time) {
	ns := now.UnixNano()
	if p := l.period.Load(); p != nil && p.start <= ns && ns < p.end {
		return p.day, p.month, p.dayEnd, p.monthEnd
	}
	day, month, dayEnd, monthEnd = Period(now)
	l.period.Store(&period{start: dayEnd.Add(-24 * time.Hour).UnixNano(), end: dayEnd.UnixNano(),
		day: day, month: month, dayEnd: dayEnd, monthEnd: monthEnd})
	return day, month, dayEnd, monthEnd
}

type local struct {
	mu         sync.Mutex
	req, tok   int64 // GCRA: the theoretical arrival time (ns) of requests and tokens
	day, month int64 // the period of dayUsed and monthUsed (Period)
	dayUsed    int64
	monthUsed  int64
	daySpent   float64
	monthSpent float64
}

// roll starts the counters of a new day or month.
func (s *local) roll(day, month int64) {
	if s.day != day {
		s.day, s.dayUsed, s.daySpent = day, 0, 0
	}
	if s.month != month {
		s.month, s.monthUsed, s.monthSpent = month, 0, 0
	}
}

// NewLocal returns an empty Local.
func NewLocal() *Local { return &Local{} }

func (l *Local) get(id string) *local {
	if s, ok := l.m.Load(id); ok {
		return s.(*local)
	}
	s, _ := l.m.LoadOrStore(id, &local{})
	return s.(*local)
}

// Forget drops the counters of every key but those of keep (a reload's
// key set), so that a key file that changes often does not grow them.
func (l *Local) Forget(keep *Set) {
	l.m.Range(func(id, _ any) bool {
		if _, ok := keep.byID[id.(string)]; !ok {
			l.m.Delete(id)
		}
		return true
	})
}

// Period returns the UTC day (days since 1970) and month (months since
// 1970) of t, and when each ends.
func Period(t time.Time) (day, month int64, dayEnd, monthEnd time.Time) {
	t = t.UTC()
	y, m, d := t.Date()
	dayEnd = time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
	monthEnd = time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
	return t.Unix() / 86400, int64(y-1970)*12 + int64(m-1), dayEnd, monthEnd
}

// Cost clamps a request's token estimate to what a key can ever admit
// (its TPM), so that a large request waits for a whole minute's tokens
// rather than for ever.
func Cost(k *Key, est int64) int64 {
	if k.TPM > 0 && est > k.TPM {
		return k.TPM
	}
	return max(est, 0)
}

// gcra takes cost units of a limit of rate a Window from a GCRA whose
// theoretical arrival time is *tat, all in ns: ok, or the wait; the units
// remaining and the time until the limit is whole again.
func gcra(tat *int64, rate, cost, now int64) (ok bool, wait, remaining, reset int64) {
	t := int64(Window) / rate // ns per unit
	t = max(t, 1)
	at := max(*tat, now)
	next := at + cost*t
	if allow := next - int64(Window); now < allow {
		return false, allow - now, max(0, (now+int64(Window)-at)/t), at - now
	}
	*tat = next
	return true, 0, max(0, (now+int64(Window)-next)/t), next - now
}

func (l *Local) Admit(_ context.Context, k *Key, est int64, now time.Time) Decision {
	d := Decision{Requests: k.RPM, Tokens: k.TPM}
	if !k.Limited() {
		return d
	}
	s := l.get(k.ID)
	est = Cost(k, est)
	ns := now.UnixNano()
	day, month, dayEnd, monthEnd := l.periodOf(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll(day, month)
	b := k.Budget
	// A spent budget refuses until its period ends: the month's, when it
	// is spent too.
	switch overMonth := b.TokensPerMonth > 0 && s.monthUsed >= b.TokensPerMonth; {
	case overMonth:
		d.Reason, d.RetryAfter = OverBudget, monthEnd.Sub(now)
		return d
	case b.TokensPerDay > 0 && s.dayUsed >= b.TokensPerDay:
		d.Reason, d.RetryAfter = OverBudget, dayEnd.Sub(now)
		return d
	}
	switch {
	case b.CostPerMonth > 0 && s.monthSpent >= b.CostPerMonth:
		d.Reason, d.RetryAfter = OverSpend, monthEnd.Sub(now)
		return d
	case b.CostPerDay > 0 && s.daySpent >= b.CostPerDay:
		d.Reason, d.RetryAfter = OverSpend, dayEnd.Sub(now)
		return d
	}
	req, tok := s.req, s.tok
	if k.RPM > 0 {
		ok, wait, rem, reset := gcra(&req, k.RPM, 1, ns)
		d.RemainingRequests, d.ResetRequests = rem, time.Duration(reset)
		if !ok {
			d.Reason, d.RetryAfter = OverRPM, time.Duration(wait)
			d.RemainingTokens = k.TPM
			return d
		}
	}
	if k.TPM > 0 {
		ok, wait, rem, reset := gcra(&tok, k.TPM, est, ns)
		d.RemainingTokens, d.ResetTokens = rem, time.Duration(reset)
		if !ok {
			d.Reason, d.RetryAfter = OverTPM, time.Duration(wait)
			return d
		}
	}
	s.req, s.tok = req, tok
	s.dayUsed += est
	s.monthUsed += est
	return d
}

func (l *Local) Settle(_ context.Context, k *Key, delta int64, cost float64, now time.Time) {
	if !k.Limited() || delta == 0 && !(cost > 0 && k.Budget.Spends()) {
		return
	}
	s := l.get(k.ID)
	day, month, _, _ := l.periodOf(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	// The tokens' delta settles the estimate of the period that charged
	// it, if still current; the spend is the period's the request ended in.
	sameDay, sameMonth := s.day == day, s.month == month
	if cost > 0 && k.Budget.Spends() {
		s.roll(day, month)
		s.daySpent += cost
		s.monthSpent += cost
	}
	if k.TPM > 0 {
		t := max(int64(Window)/k.TPM, 1)
		s.tok += delta * t // below now is a whole minute's tokens: gcra reads it as now
	}
	if sameDay {
		s.dayUsed = max(0, s.dayUsed+delta)
	}
	if sameMonth {
		s.monthUsed = max(0, s.monthUsed+delta)
	}
}
