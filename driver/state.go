package driver

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// State holds what a Runner's requests share beyond one request: the
// models' cooldowns and half-open probes ([WithCooldown]), the Retry-After
// of a rate-limit scope, the sticky fallback ([WithSticky]) and the retry
// budget's counters ([WithRetryBudget]). By default every Runner keeps its
// own in this process's memory ([NewLocalState]); [WithState] hands several
// Runners, or several replicas of a service through a store such as Redis,
// one State, so that what one of them learns (a model is down, a 429 said
// wait a minute, a fallback is sticky) holds for all of them.
//
// # Keys
//
// Models are named by their key ([Model.Key]), so Runners sharing a State
// share the cooldowns of the models they have in common. The sticky
// fallback and the budget's counters live under a Runner's state key
// ([WithStateKey]; by default derived from its models and sticky policy,
// so replicas that run the same policy share it).
//
// # Time
//
// Durations, not timestamps, cross the interface: a cooldown's length, a
// lease's, a sticky period. An implementation measures them on its own
// clock (a store's time, or relative TTLs), so a replica whose clock is
// ahead or behind cannot lengthen or shorten a cooldown for the others,
// and every entry expires on its own: there is no clean-up job.
//
// # Cost
//
// A request makes one call when it starts ([State.Begin]), and only when
// the Runner has a cooldown, a sticky policy or a retry budget (a Runner
// with none of them calls nothing). A success on a model whose snapshot
// showed no failures calls nothing. The other methods run on the failure
// path (a counted failure, a retry, a probe, a new sticky fallback) or
// give back what a request held ([State.End], [State.RetryEnded]), which a
// store may make free (a windowed budget ignores them).
//
// # Errors and ctx
//
// The methods return no errors: a request has nothing better to do with
// one than carry on with what it knows. An implementation on a remote
// store puts a short deadline on ctx, and when the store is slow or down
// answers from a copy in its own memory (as the in-process State would),
// so that a store's outage is never a request's. The Runner passes the
// request's ctx to Begin, Failed, Succeeded, TakeProbe, TryRetry and
// SetSticky, and a ctx that is not cancelled with the request
// (context.WithoutCancel) to End and RetryEnded, which give back what the
// request took. Every method must return promptly once ctx is done.
//
// Implementations must be safe for concurrent use by multiple goroutines
// (and, for a store, by multiple processes).
type State interface {
	// Begin starts a request: it counts it in the retry budget of b.Key
	// when b.Budget is set, reads (and, for a count policy, uses up one
	// request of) the sticky fallback of b.Key when b.Sticky is set, and
	// returns a snapshot of the cooldowns of b.Models and b.Scopes. It is
	// the one call on a request's hot path: a store answers it in one
	// round trip.
	Begin(ctx context.Context, b BeginRequest) Snapshot

	// End ends a request that Begin counted in the budget of key. An
	// implementation that counts requests started in a window rather
	// than in flight may ignore it.
	End(ctx context.Context, key string)

	// TryRetry takes a slot for a retry of a request under key if budget
	// allows one, and reports whether it did. The in-process State
	// counts retries in flight against requests in flight, as Envoy
	// does; a store may count both over a sliding window instead.
	TryRetry(ctx context.Context, key string, budget RetryBudget) bool

	// RetryEnded gives back a slot TryRetry took. A windowed
	// implementation may ignore it.
	RetryEnded(ctx context.Context, key string)

	// Failed counts a failure that speaks of f.Model's health (the
	// Runner has already applied Cooldown.When) and returns the model's
	// state after it, with cooled set when this call started a cooldown
	// or lengthened one (the Runner then logs it and fires
	// Cooldown.OnChange). See [Failure] for the rules.
	Failed(ctx context.Context, f Failure) (s ModelState, cooled bool)

	// Succeeded records a success on model: its failure count goes back
	// to zero and, if it was cooling down or half-open, it is back in
	// rotation and any probe lease on it is released. It reports whether
	// it ended a cooldown (the Runner fires Cooldown.OnChange). The
	// Runner calls it only when the request's snapshot (or its own
	// failures) showed the model not clean.
	Succeeded(ctx context.Context, model string) (ended bool)

	// TakeProbe asks to send an attempt to model after its cooldown. It
	// reports true when the model is in rotation (nothing to probe), or
	// when it is half-open and no probe lease is held: the caller then
	// holds the lease for lease (its attempt's deadline, or the
	// cooldown's For), and every other caller gets false until the
	// probe's outcome is reported (Succeeded or Failed) or the lease
	// expires (a prober that crashed does not keep the model out for
	// ever). It reports false while the model cools down.
	TakeProbe(ctx context.Context, model string, lease time.Duration) bool

	// SetSticky makes model the sticky fallback of key: the start of the
	// next requests requests (requests > 0), or of the requests that
	// start within period (period > 0); exactly one is positive. It
	// replaces the key's previous sticky fallback.
	SetSticky(ctx context.Context, key, model string, requests int, period time.Duration)
}

// BeginRequest is what [State.Begin] is asked. It is a plain value; the
// Runner reuses its slices for every request and from many goroutines: an
// implementation must not modify or keep them.
type BeginRequest struct {
	// Key is the Runner's state key ([WithStateKey]): the sticky fallback
	// and the budget's counters live under it.
	Key string
	// Models are the keys of the models whose cooldown the request may
	// need: the Runner's models and its groups' deployments. Nil when
	// the Runner has no cooldown.
	Models []string
	// Scopes are the rate-limit scopes ([RateLimitScoper]) of the
	// Runner's models. Nil when none declares one or without a cooldown.
	Scopes []string
	// Sticky asks for the sticky fallback of Key.
	Sticky bool
	// Budget counts the request in the retry budget of Key.
	Budget bool
}

// Snapshot is what [State.Begin] answers: the state as the request starts.
// A request keeps it (and what its own calls return) for its lifetime. It
// is a plain value that the request owns: an implementation must not keep
// its slices.
type Snapshot struct {
	// Models are the states of BeginRequest.Models, in the same order
	// (nil or short: the missing ones are clean and in rotation).
	Models []ModelState
	// Scopes are how long each of BeginRequest.Scopes is still blocked
	// by a Retry-After, in the same order; 0 when it is not.
	Scopes []time.Duration
	// Sticky is the key of the sticky fallback to start on; "" for none.
	Sticky string
}

// ModelState is one model's shared cooldown state. The zero value is a
// clean model in rotation. It is a plain value.
type ModelState struct {
	// Failures is how many counted failures in a row the model has had.
	Failures int
	// Cooling is how much longer the model cools down; 0 when it does not.
	Cooling time.Duration
	// HalfOpen reports a cooldown that has ended without a probe's
	// outcome: the model stays out of rotation for every request but the
	// one that takes the probe ([State.TakeProbe]).
	HalfOpen bool
	// Probing reports, with HalfOpen, that a probe lease is held.
	Probing bool
}

// Failure is a counted failure reported to [State.Failed]. It is a plain
// value.
//
// The rules an implementation keeps, on its own clock:
//   - the model's failure count grows by one; when it reaches Failures
//     and the model is not already cooling down, the model cools down
//     for max(For, RetryAfter) and its count becomes Failures-1 (so that
//     after the cooldown one failure, the probe's, starts the next);
//   - a positive RetryAfter cools the model down at once for RetryAfter,
//     whatever its count (the server said when to come back), or
//     lengthens a shorter cooldown to end RetryAfter from now; the count
//     then becomes at least Failures-1. With a Scope, the scope is
//     blocked for RetryAfter as well (or to the later of its end and
//     RetryAfter from now): every model of that scope is out of rotation
//     until then, without a probe after;
//   - a failure while half-open (the probe's) cools the model down again
//     for max(For, RetryAfter) and releases the probe lease; with Max
//     above For, for twice the cooldown it ended (at least For, at most
//     Max) instead of For: a model whose probes keep failing is probed
//     less and less often, one back after a short outage soon.
//     Another cooldown (one the count starts) lasts For again.
//
// An implementation may forget a failure count that has not grown for
// longer than For, and a half-open state older than For, so that its
// entries expire on their own; the in-process State does not.
type Failure struct {
	// Model is the failed model's key.
	Model string
	// Scope is its rate-limit scope ([RateLimitScoper]); "" for none.
	Scope string
	// Failures, For and Max are the Runner's Cooldown.
	Failures int
	For      time.Duration
	Max      time.Duration
	// RetryAfter is the server's Retry-After, already capped by
	// WithRetryAfterCap; 0 when the failure carried none.
	RetryAfter time.Duration
}

// RateLimitScoper is implemented by a [Model] whose rate limits are shared
// with other models (they are counted per API key and account, not per
// model): a failure with a Retry-After on one model of a scope then keeps
// every model of that scope out of rotation for that long, in every
// Runner that shares the [State]. The provider adapters derive it from
// the base URL, a hash of the API key (never the key itself) and the model
// id. Implementations must be safe for concurrent use, and the scope must
// not change.
type RateLimitScoper interface {
	// RateLimitScope names the scope; "" for none.
	RateLimitScope() string
}

// NewLocalState returns a [State] in this process's memory: what a Runner
// uses when [WithState] is not given (each Runner then has its own). Hand
// one to several Runners to make them share cooldowns, sticky fallbacks
// and budget counters within one process. Its memory grows with the
// number of model keys, scopes and state keys it has seen, not with
// traffic.
func NewLocalState() State { return newLocalState(time.Now) }

// newLocalState is NewLocalState on the clock now (a Runner's, for tests).
func newLocalState(now func() time.Time) *localState {
	return &localState{now: now, models: map[string]*localModel{}, scopes: map[string]time.Time{},
		sticky: map[string]*localSticky{}}
}

// localState is the in-process State. One mutex guards the cooldowns and
// sticky entries (a request takes it once when it starts); the budget's
// counters are atomics per key.
type localState struct {
	now func() time.Time

	mu     sync.Mutex
	models map[string]*localModel
	scopes map[string]time.Time // a scope's block ends then
	sticky map[string]*localSticky

	budgets    sync.Map // key → *keyBudget
	lastBudget atomic.Pointer[budgetEntry]
}

type localModel struct {
	failures   int
	last       time.Duration // the length of the latest cooldown
	until      time.Time     // the cooldown's end; zero when in rotation
	halfOpen   bool          // until has passed without a probe's outcome (set lazily, see state)
	probeUntil time.Time     // the probe lease's end; zero when none
}

type localSticky struct {
	model    string
	requests int       // > 0: a count policy's requests left
	until    time.Time // otherwise: the period's end
}

// state returns m's ModelState at now. The caller holds mu.
func (m *localModel) state(now time.Time) ModelState {
	if m == nil {
		return ModelState{}
	}
	s := ModelState{Failures: m.failures}
	switch {
	case m.until.IsZero():
	case now.Before(m.until):
		s.Cooling = m.until.Sub(now)
	default:
		s.HalfOpen = true
		s.Probing = now.Before(m.probeUntil)
	}
	return s
}

func (l *localState) Begin(_ context.Context, b BeginRequest) Snapshot {
	var s Snapshot
	if b.Budget {
		l.budget(b.Key).requests.Add(1)
	}
	if len(b.Models) == 0 && len(b.Scopes) == 0 && !b.Sticky {
		return s
	}
	var now time.Time // read only when an entry needs it: the clean case reads no clock
	clock := func() time.Time {
		if now.IsZero() {
			now = l.now()
		}
		return now
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.models) > 0 {
		for i, k := range b.Models {
			if m := l.models[k]; m != nil {
				if s.Models == nil {
					s.Models = make([]ModelState, len(b.Models)) // clean models answer nil
				}
				s.Models[i] = m.state(clock())
			}
		}
	}
	if len(l.scopes) > 0 {
		for i, k := range b.Scopes {
			if end, ok := l.scopes[k]; ok {
				if !clock().Before(end) {
					delete(l.scopes, k)
					continue
				}
				if s.Scopes == nil {
					s.Scopes = make([]time.Duration, len(b.Scopes))
				}
				s.Scopes[i] = end.Sub(clock())
			}
		}
	}
	if b.Sticky {
		if e := l.sticky[b.Key]; e != nil {
			switch {
			case e.requests > 0:
				e.requests--
				s.Sticky = e.model
			case clock().Before(e.until):
				s.Sticky = e.model
			default:
				delete(l.sticky, b.Key)
			}
		}
	}
	return s
}

// budget returns key's counters; the last key used is one atomic load away
// (a Runner's default State has one key).
func (l *localState) budget(key string) *keyBudget {
	if e := l.lastBudget.Load(); e != nil && e.key == key {
		return e.b
	}
	v, ok := l.budgets.Load(key)
	if !ok {
		v, _ = l.budgets.LoadOrStore(key, new(keyBudget))
	}
	b := v.(*keyBudget)
	l.lastBudget.Store(&budgetEntry{key: key, b: b})
	return b
}

type budgetEntry struct {
	key string
	b   *keyBudget
}

func (l *localState) End(_ context.Context, key string) { l.budget(key).requests.Add(-1) }

func (l *localState) TryRetry(_ context.Context, key string, budget RetryBudget) bool {
	return l.budget(key).tryRetry(&budget)
}

func (l *localState) RetryEnded(_ context.Context, key string) { l.budget(key).retries.Add(-1) }

func (l *localState) Failed(_ context.Context, f Failure) (ModelState, bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.models[f.Model]
	if m == nil {
		m = &localModel{}
		l.models[f.Model] = m
	}
	m.failures++
	cooled := false
	cooling := !m.until.IsZero() && now.Before(m.until)
	halfOpen := !m.until.IsZero() && !cooling
	if (m.failures >= f.Failures && !cooling) || halfOpen {
		d := f.For
		if halfOpen && f.Max > f.For {
			d = min(max(2*m.last, f.For), f.Max) // a failed probe: twice the cooldown it ended
		}
		m.last = d
		m.until = now.Add(max(d, f.RetryAfter))
		m.failures = max(f.Failures-1, 0)
		m.probeUntil = time.Time{}
		cooled = true
	}
	if ra := f.RetryAfter; ra > 0 {
		if end := now.Add(ra); end.After(m.until) {
			m.until = end
			m.failures = max(m.failures, f.Failures-1)
			m.probeUntil = time.Time{}
			cooled = true
		}
		if f.Scope != "" {
			if end := now.Add(ra); end.After(l.scopes[f.Scope]) {
				l.scopes[f.Scope] = end
			}
		}
	}
	return m.state(now), cooled
}

func (l *localState) Succeeded(_ context.Context, model string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.models[model]
	if m == nil {
		return false
	}
	ended := !m.until.IsZero()
	delete(l.models, model) // clean: the zero state
	return ended
}

func (l *localState) TakeProbe(_ context.Context, model string, lease time.Duration) bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.models[model]
	if m == nil || m.until.IsZero() {
		return true // in rotation
	}
	if now.Before(m.until) || now.Before(m.probeUntil) {
		return false
	}
	m.probeUntil = now.Add(lease)
	return true
}

func (l *localState) SetSticky(_ context.Context, key, model string, requests int, period time.Duration) {
	e := &localSticky{model: model, requests: requests}
	if requests <= 0 {
		e.requests = 0
		e.until = l.now().Add(period)
	}
	l.mu.Lock()
	l.sticky[key] = e
	l.mu.Unlock()
}

// keyBudget is one key's retry budget counters: two atomics.
type keyBudget struct {
	requests atomic.Int64
	retries  atomic.Int64
}

func (l *keyBudget) tryRetry(b *RetryBudget) bool {
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
