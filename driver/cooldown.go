package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// Cooldown takes a model that keeps failing out of rotation for a while,
// across the Runner's requests: a circuit breaker per model. Without it
// every request pays for a dead model's failure (a timeout, often) before
// the rules move it on; with it, once a model has failed Failures times in
// a row, requests start on the next model and rules do not send attempts
// to it until For has passed. Then one attempt probes it: a success puts
// it back in rotation, a failure cools it down again.
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
// A Cooldown is a plain value; the Runner keeps its own copy and the
// state, safe for concurrent requests.
type Cooldown struct {
	// Failures is how many consecutive counted failures on a model (in any
	// of the Runner's requests) start its cooldown. Required, at least 1.
	Failures int
	// For is how long a cooldown lasts. Required, positive. A failure that
	// starts a cooldown with a longer Retry-After (capped by
	// WithRetryAfterCap) cools the model down for that long instead.
	For time.Duration
	// When says which failures count. The zero Match means the failures
	// that speak of the model's health: timeouts of the attempt's own
	// deadlines, rate limits, overloads, server and network errors. A
	// refusal, a content filter, a bad request, an auth error, the
	// caller's cancellation or the request's total budget never say the
	// model is down, and do not count by default.
	When Match
	// OnChange, when set, is told when a model starts a cooldown (until
	// is its end) and when a probe's success ends one (until is zero). It
	// runs on the goroutine of the request that caused the change and
	// must not block.
	OnChange func(model string, until time.Time)
}

// WithCooldown turns on per-model cooldowns (see [Cooldown]). Default: off.
func WithCooldown(c Cooldown) Option {
	return func(cfg *config) error {
		if c.Failures < 1 || c.For <= 0 {
			return errors.New("retryhost: a cooldown needs Failures ≥ 1 and a positive For")
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

// coolState is one model's cooldown state.
type coolState struct {
	failures int       // consecutive counted failures
	until    time.Time // the cooldown's end; zero when the model is in rotation
}

// coolers is a Runner's cooldown state, by model key.
type coolers struct {
	mu     sync.Mutex
	states map[string]*coolState
	order  []Model // where a request may start instead, in order
}

// cooling reports whether key cools down at now. The caller holds mu.
func (c *coolers) cooling(key string, now time.Time) bool {
	s := c.states[key]
	return s != nil && now.Before(s.until)
}

// coolingModel reports whether m cools down at now: a group when every
// deployment of it does. The caller holds mu.
func (c *coolers) coolingModel(m Model, now time.Time) bool {
	if g, ok := m.(*DeploymentGroup); ok {
		for _, d := range g.deps {
			if !c.cooling(d.Key(), now) {
				return false
			}
		}
		return true
	}
	return c.cooling(m.Key(), now)
}

// coolStart returns the model a request that would start on m starts on.
func (r *Runner) coolStart(m Model, now time.Time) Model {
	c := r.cool
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.coolingModel(m, now) {
		return m
	}
	for _, o := range c.order {
		if !c.coolingModel(o, now) {
			return o
		}
	}
	return m
}

// coolSkip reports whether a rule must not send an attempt to m now.
func (r *Runner) coolSkip(m Model, now time.Time) bool {
	c := r.cool
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.coolingModel(m, now)
}

// coolFailed counts a failed attempt a against its model.
func (r *Runner) coolFailed(ctx context.Context, a *Attempt, now time.Time) {
	cd := r.cfg.cooldown
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
	c := r.cool
	c.mu.Lock()
	s := c.states[a.Model]
	if s == nil {
		s = &coolState{}
		c.states[a.Model] = s
	}
	s.failures++
	var until time.Time
	if s.failures >= cd.Failures && !now.Before(s.until) {
		d := cd.For
		if ra := min(a.RetryAfter, r.cfg.retryAfterCap); ra > d {
			d = ra
		}
		s.until = now.Add(d)
		// After the cooldown one failure starts the next: the probe.
		s.failures = cd.Failures - 1
		until = s.until
	}
	c.mu.Unlock()
	if !until.IsZero() {
		r.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "retryhost: model cools down",
			slog.String("model", a.Model), slog.Time("until", until))
		if f := cd.OnChange; f != nil {
			f(a.Model, until)
		}
	}
}

// coolSucceeded puts m back in rotation after a success.
func (r *Runner) coolSucceeded(m Model) {
	c := r.cool
	key := m.Key()
	c.mu.Lock()
	s := c.states[key]
	if s == nil || s.failures == 0 {
		c.mu.Unlock()
		return
	}
	ended := !s.until.IsZero()
	s.failures, s.until = 0, time.Time{}
	c.mu.Unlock()
	if f := r.cfg.cooldown.OnChange; ended && f != nil {
		f(key, time.Time{})
	}
}
