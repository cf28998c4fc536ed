package driver

// How a Runner uses its State (state.go): the options, the state key, and
// the request's one call when it starts.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"

	"github.com/retryhost/retryhost/abi"
)

// WithState makes the Runner keep what its requests share (cooldowns and
// probes, Retry-After scopes, the sticky fallback, the retry budget's
// counters) in s, so that every Runner given the same s (in this process
// with [NewLocalState], across replicas with a State on a shared store)
// shares it. Default: a [NewLocalState] of the Runner's own.
func WithState(s State) Option {
	return func(c *config) error {
		if s == nil {
			return errors.New("retryhost: nil State")
		}
		c.state = s
		return nil
	}
}

// WithStateKey names the Runner's sticky fallback and retry budget in its
// [State]: Runners (and replicas) with the same key share them. Model
// cooldowns are shared by model key whatever the state key. Default: a
// name derived from the Runner's base model, the keys of all its models
// and its sticky policy, so that replicas running the same policy share
// them and two different policies on one State do not.
func WithStateKey(key string) Option {
	return func(c *config) error {
		if key == "" {
			return errors.New("retryhost: empty state key")
		}
		c.stateKey = key
		return nil
	}
}

// StateKey returns the Runner's state key (see [WithStateKey]).
func (r *Runner) StateKey() string { return r.stateKey }

// setupState prepares the Runner's use of its State (New calls it last).
func (r *Runner) setupState() {
	r.state = r.cfg.state
	if r.state == nil {
		r.state = newLocalState(r.cfg.now)
	}
	_, r.local = r.state.(*localState)
	r.stateKey = r.cfg.stateKey
	if r.stateKey == "" {
		r.stateKey = r.derivedStateKey()
	}
	r.shared = r.cfg.cooldown != nil || r.cfg.sticky.kind != stickyNone || r.cfg.retryBudget != nil
	if r.cfg.cooldown == nil {
		return
	}
	seen := map[string]bool{}
	add := func(m Model) {
		if k := m.Key(); !seen[k] {
			seen[k] = true
			r.coolOrder = append(r.coolOrder, m)
		}
	}
	add(r.base)
	for _, rule := range r.rules {
		if rule != nil && rule.action == abi.ActionSwitch {
			add(r.models[rule.targetKey])
		}
	}
	for _, m := range r.cfg.models {
		add(m)
	}
	// Every model an attempt can run on: the plain models and the
	// groups' deployments, in the order above, then any other key.
	r.stateIdx = map[string]int{}
	var addKey func(m Model)
	addKey = func(m Model) {
		if g, ok := m.(*DeploymentGroup); ok {
			for _, d := range g.deps {
				addKey(d)
			}
			return
		}
		k := m.Key()
		if _, ok := r.stateIdx[k]; ok {
			return
		}
		r.stateIdx[k] = len(r.stateModels)
		r.stateModels = append(r.stateModels, k)
		scope := ""
		if s, ok := m.(RateLimitScoper); ok {
			scope = s.RateLimitScope()
		}
		j := -1
		if scope != "" {
			if j = slices.Index(r.scopes, scope); j < 0 {
				j = len(r.scopes)
				r.scopes = append(r.scopes, scope)
			}
		}
		r.scopeOf = append(r.scopeOf, j)
	}
	for _, m := range r.coolOrder {
		addKey(m)
	}
	rest := make([]string, 0, len(r.models))
	for k := range r.models {
		rest = append(rest, k)
	}
	slices.Sort(rest)
	for _, k := range rest {
		addKey(r.models[k])
	}
}

// derivedStateKey is the default state key: a hash of the base model's
// key, every model key (sorted) and the sticky policy.
func (r *Runner) derivedStateKey() string {
	keys := make([]string, 0, len(r.models))
	for k := range r.models {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	h.Write([]byte(r.base.Key()))
	for _, k := range keys {
		h.Write([]byte{0})
		h.Write([]byte(k))
	}
	h.Write([]byte{0})
	h.Write([]byte(r.cfg.sticky.String()))
	return "runner-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// begin makes the request's one call to the State when it starts: it
// counts the request in the budget, reads the sticky fallback (unless the
// caller named the start model) and the cooldowns, and picks the start
// model from them.
func (q *request) begin(ctx context.Context) {
	r := q.r
	q.sctx = ctx
	b := BeginRequest{
		Key: r.stateKey, Models: r.stateModels, Scopes: r.scopes,
		Sticky: r.cfg.sticky.kind != stickyNone && !q.named,
		Budget: r.cfg.retryBudget != nil,
	}
	if !b.Sticky && !b.Budget && b.Models == nil {
		return // only a sticky policy, and the caller named the start model
	}
	snap := r.state.Begin(ctx, b)
	q.inBudget = b.Budget
	if snap.Sticky != "" && b.Sticky {
		// A key this Runner does not know (another policy's, under the
		// same state key) is no sticky fallback.
		if m := r.models[snap.Sticky]; m != nil {
			q.startModel = m
		}
	}
	if r.cfg.cooldown != nil {
		q.loadView(&snap, q.begun)
		q.startModel = q.coolStart(q.startModel, q.begun)
	}
}

// stickySet records that the request succeeded on m, which it did not
// start on.
func (q *request) stickySet(ctx context.Context, m Model) {
	s := q.r.cfg.sticky
	if s.kind == stickyNone {
		return
	}
	q.r.state.SetSticky(ctx, q.r.stateKey, m.Key(), s.requests, s.period)
}
