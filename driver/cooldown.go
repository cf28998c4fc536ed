package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// Cooldown takes a model that keeps failing out of rotation for a while,
// across the Runner's requests: a circuit breaker per model. Without it
// every request pays for a dead model's failure (a timeout, often) before
// the rules move it on; with it, once a model has failed Failures times in
// a row, requests start on the next model and rules do not send attempts
// to it until For has passed. Then one attempt probes it: a success puts
// it back in rotation, a failure cools it down again. Exactly one request
// takes the probe, among all the Runners that share the [State]
// ([WithState]); the others keep treating the model as cooling down until
// the probe's outcome, or until the probe's lease (the attempt timeout,
// else For) runs out, so that a prober that crashed or whose caller gave
// up does not keep the model out for ever.
//
// A failure with a Retry-After (a 429 or 503 that says when to come back)
// cools the model down at once, whatever Failures says, for the
// Retry-After (capped by WithRetryAfterCap), or lengthens a shorter
// cooldown: the server has said the model is unavailable until then, for
// every request that shares the State. When the model declares a
// rate-limit scope ([RateLimitScoper]: the account and API key its limits
// are counted on) every model of that scope is kept out until then too.
// The request that heard the Retry-After still comes back when it said: a
// retry rule that waits it out is not skipped, unless the model cools down
// for longer than that.
//
// While a model cools down:
//   - a request that would start on it (the base model, or a sticky
//     fallback) starts on the first model in the Runner's order that is
//     not cooling down: the base model, then the rules' targets in rule
//     order, then WithModels' models in order. When every model cools
//     down, it starts where it would have: a cooldown never refuses a
//     request by itself;
//   - a rule that would retry it or switch to it is skipped, as if the
//     model's attempts were exhausted, and the next rule decides. A
//     Runner with a single model therefore fails fast while it cools down.
//
// A request reads the cooldowns once, when it starts (the one call to the
// State), and keeps that view, updated by its own failures, for its
// lifetime: a cooldown that another request starts meanwhile applies to
// the requests that start after it.
//
// A Cooldown is a plain value; the Runner keeps its own copy, and the
// state in its State, safe for concurrent requests.
type Cooldown struct {
	// Failures is how many consecutive counted failures on a model (in any
	// of the Runner's requests) start its cooldown. Required, at least 1.
	Failures int
	// For is how long a cooldown lasts. Required, positive. A failure
	// with a longer Retry-After (capped by WithRetryAfterCap) cools the
	// model down for that long instead.
	For time.Duration
	// Max, when above For, makes the cooldown adapt: one that a failed
	// probe starts lasts twice the one before it, up to Max, so that a
	// model back after a short outage is probed (and used) within For or
	// so while one that stays down is probed every Max. Any other
	// cooldown lasts For. Default 0: every cooldown lasts For.
	Max time.Duration
	// When says which failures count. The zero Match means the failures
	// that speak of the model's health: timeouts of the attempt's own
	// deadlines, rate limits, overloads, server and network errors. A
	// refusal, a content filter, a bad request, an auth error, the
	// caller's cancellation or the request's total budget never say the
	// model is down, and do not count by default.
	When Match
	// OnChange, when set, is told when a model starts a cooldown (until
	// is its end) or a Retry-After lengthens one, and when a success ends
	// one (until is zero). It runs on the goroutine of the request that
	// caused the change, in the process of that request (a Runner sharing
	// the State with other processes is not told of their changes), and
	// must not block.
	OnChange func(model string, until time.Time)
}

// WithCooldown turns on per-model cooldowns (see [Cooldown]). Default: off.
func WithCooldown(c Cooldown) Option {
	return func(cfg *config) error {
		if c.Failures < 1 || c.For <= 0 {
			return errors.New("retryhost: a cooldown needs Failures ≥ 1 and a positive For")
		}
		if c.Max < 0 {
			return errors.New("retryhost: a cooldown's Max cannot be negative")
		}
		if err := c.When.Err(); err != nil {
			return fmt.Errorf("retryhost: cooldown When: %w", err)
		}
		cfg.cooldown = &c
		return nil
	}
}

// healthFailure is the default Cooldown.When.
var healthFailure = OnClass(abi.ClassTimeout, abi.ClassRateLimit, abi.ClassOverloaded, abi.ClassServer, abi.ClassNetwork)

// coolView is what a request knows of one model's cooldown: its [State]'s
// snapshot when the request began, and what the request's own calls
// learnt since. Times are on the Runner's clock.
type coolView struct {
	failures int
	until    time.Time // the cooldown's end; zero when none was seen
	halfOpen bool      // the snapshot said half-open
	probing  bool      // another request holds the probe lease
	mine     bool      // this request may send attempts to it (TakeProbe said so)
}

// clean reports whether a success on the model has nothing to report.
func (v *coolView) clean() bool {
	return v.failures == 0 && v.until.IsZero() && !v.halfOpen && !v.mine
}

// coolness is a model's availability to a request.
type coolness uint8

const (
	inRotation coolness = iota
	coolingDown
	probeDue // half-open without a known lease: TakeProbe decides
)

// loadView fills the request's view of its Runner's models from snap,
// taken at now. A snapshot of clean models allocates nothing: the view
// stays nil (every model clean) until the request learns otherwise.
func (q *request) loadView(snap *Snapshot, now time.Time) {
	r := q.r
	q.cooled = true
	for i := range min(len(snap.Models), len(r.stateModels)) {
		if s := &snap.Models[i]; *s != (ModelState{}) {
			v := q.viewSet(i)
			v.failures, v.halfOpen, v.probing = s.Failures, s.HalfOpen, s.Probing
			if s.Cooling > 0 {
				v.until = now.Add(s.Cooling)
			}
		}
	}
	for i := range min(len(snap.Scopes), len(r.scopes)) {
		if d := snap.Scopes[i]; d > 0 {
			q.blockScope(i, now.Add(d))
		}
	}
}

// viewSet returns the request's view of the model with state index i, to
// change it.
func (q *request) viewSet(i int) *coolView {
	if q.view == nil {
		q.view = make([]coolView, len(q.r.stateModels))
	}
	return &q.view[i]
}

// blockScope records that scope s is blocked until end.
func (q *request) blockScope(s int, end time.Time) {
	if q.scopeUntil == nil {
		q.scopeUntil = make([]time.Time, len(q.r.scopes))
	}
	if end.After(q.scopeUntil[s]) {
		q.scopeUntil[s] = end
	}
}

// coolOf says whether the model with state index i is available at now.
func (q *request) coolOf(i int, now time.Time) coolness {
	if q.scopeUntil != nil {
		if s := q.r.scopeOf[i]; s >= 0 && now.Before(q.scopeUntil[s]) {
			return coolingDown
		}
	}
	if q.view == nil {
		return inRotation
	}
	v := &q.view[i]
	switch {
	case v.mine:
		return inRotation
	case now.Before(v.until):
		return coolingDown
	case v.until.IsZero() && !v.halfOpen:
		return inRotation
	case v.probing:
		return coolingDown
	}
	return probeDue
}

// usable reports whether the request may send an attempt to the model
// with state index i at now, taking its probe if one is due.
func (q *request) usable(i int, now time.Time) bool {
	switch q.coolOf(i, now) {
	case inRotation:
		return true
	case coolingDown:
		return false
	}
	return q.takeProbe(i)
}

// takeProbe asks the State for the probe of the model with state index i.
func (q *request) takeProbe(i int) bool {
	r := q.r
	lease := r.cfg.attemptTimeout
	if lease <= 0 {
		lease = max(r.cfg.cooldown.For, r.cfg.cooldown.Max)
	}
	v := q.viewSet(i)
	if r.state.TakeProbe(q.sctx, r.stateModels[i], lease) {
		v.mine = true
		return true
	}
	v.probing = true
	return false
}

// modelUsable reports whether the request may send an attempt to m at
// now (taking a probe if one is due): for a group, to one of its
// deployments, preferring those in rotation.
func (q *request) modelUsable(m Model, now time.Time) bool {
	if !q.cooled {
		return true
	}
	r := q.r
	g, ok := m.(*DeploymentGroup)
	if !ok {
		i, ok := r.stateIdx[m.Key()]
		return !ok || q.usable(i, now)
	}
	due := false
	for _, d := range g.deps {
		switch q.coolOf(r.stateIdx[d.Key()], now) {
		case inRotation:
			return true
		case probeDue:
			due = true
		}
	}
	if due {
		for _, d := range g.deps {
			if i := r.stateIdx[d.Key()]; q.coolOf(i, now) == probeDue && q.takeProbe(i) {
				return true
			}
		}
	}
	return false
}

// invited reports whether the attempt d chooses on target is the one a
// Retry-After asked for: d waits the failed attempt's Retry-After, on the
// model that sent it, and the model's cooldown (and its scope's block)
// ends by then. The cooldown that Retry-After started does not stop that
// attempt: the server said when to come back, and the request waits it.
func (q *request) invited(d *abi.Decision, target Model, now time.Time) bool {
	a := q.a
	if !d.UseRetryAfter || a.RetryAfter <= 0 || target.Key() != a.Model {
		return false
	}
	i, ok := q.r.stateIdx[a.Model]
	if !ok {
		return false
	}
	at := now.Add(a.RetryAfter)
	if q.scopeUntil != nil {
		if s := q.r.scopeOf[i]; s >= 0 && q.scopeUntil[s].After(at) {
			return false
		}
	}
	return q.view == nil || !q.view[i].until.After(at)
}

// coolStart returns the model a request that would start on m starts on:
// m when it may, else the first of the Runner's models in order that may,
// else m (a cooldown never refuses a request by itself).
func (q *request) coolStart(m Model, now time.Time) Model {
	if q.modelUsable(m, now) {
		return m
	}
	for _, o := range q.r.coolOrder {
		if o != m && q.modelUsable(o, now) {
			return o
		}
	}
	return m
}

// groupCooling returns the deployments of g the request must avoid at
// now (bit j for g.deps[j]), and one it must pick, or -1: a deployment
// whose probe the request holds (it took it, so it sends it), else one
// whose probe is due and that it takes now.
func (q *request) groupCooling(g *DeploymentGroup, tried uint64, now time.Time) (cooling uint64, probe int) {
	if !q.cooled || (q.view == nil && q.scopeUntil == nil) {
		return 0, -1 // every deployment is clean
	}
	r := q.r
	probe = -1
	for j, d := range g.deps {
		i := r.stateIdx[d.Key()]
		c := q.coolOf(i, now)
		if tried&(1<<j) != 0 {
			if c != inRotation {
				cooling |= 1 << j
			}
			continue
		}
		switch {
		case c == inRotation && q.view != nil && q.view[i].mine && probe < 0:
			probe = j
		case c == probeDue:
			if probe < 0 && q.takeProbe(i) {
				probe = j
			} else {
				cooling |= 1 << j
			}
		case c == coolingDown:
			cooling |= 1 << j
		}
	}
	return cooling, probe
}

// coolFailed counts a failed attempt a against its model.
func (q *request) coolFailed(ctx context.Context, a *Attempt, now time.Time) {
	r := q.r
	cd := r.cfg.cooldown
	if cd == nil || !q.cooled {
		return
	}
	if a.Class == abi.ClassTimeout && a.Deadline == abi.DeadlineTotal {
		return // the request's budget, not the model's health
	}
	if when := cd.When; when.f != nil {
		if !when.Matches(a) {
			return
		}
	} else if !healthFailure.Matches(a) {
		return
	}
	f := Failure{Model: a.Model, Failures: cd.Failures, For: cd.For, Max: cd.Max}
	if a.RetryAfter > 0 {
		f.RetryAfter = min(a.RetryAfter, r.cfg.retryAfterCap)
	}
	i, known := r.stateIdx[a.Model]
	if known {
		if s := r.scopeOf[i]; s >= 0 {
			f.Scope = r.scopes[s]
			if f.RetryAfter > 0 {
				q.blockScope(s, now.Add(f.RetryAfter))
			}
		}
	}
	st, cooled := r.state.Failed(ctx, f)
	var until time.Time
	if st.Cooling > 0 {
		until = now.Add(st.Cooling)
	}
	if known {
		*q.viewSet(i) = coolView{failures: st.Failures, until: until, halfOpen: st.HalfOpen, probing: st.Probing}
	}
	if cooled && !until.IsZero() {
		r.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "retryhost: model cools down",
			slog.String("model", a.Model), slog.Time("until", until))
		if f := cd.OnChange; f != nil {
			f(a.Model, until)
		}
	}
}

// coolSucceeded reports a success on m, unless the request knows it clean.
func (q *request) coolSucceeded(ctx context.Context, m Model) {
	if q.view == nil {
		return // every model clean: the common case calls nothing
	}
	r := q.r
	key := m.Key()
	i, ok := r.stateIdx[key]
	if !ok || q.view[i].clean() {
		return // the common case calls nothing
	}
	q.view[i] = coolView{}
	if r.state.Succeeded(ctx, key) {
		if f := r.cfg.cooldown.OnChange; f != nil {
			f(key, time.Time{})
		}
	}
}
