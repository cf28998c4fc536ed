package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// defaultMaxAttempts is the total attempt cap per request unless
// WithMaxAttempts says otherwise.
const defaultMaxAttempts = 10

// Runner runs requests with retry and model fail-over: it holds the base
// model, the rules, the backoff and budgets, the callbacks and the sticky
// fallback state. Build one with [New] and share it; [Do] runs one request.
//
// A Runner is safe for concurrent use by multiple goroutines. Each request
// keeps its own state (current model, attempt counts); the only state
// requests share is in the Runner's [State] (its own, or one given with
// [WithState]): the sticky fallback and the models' cooldowns, read when a
// request starts, and the retry budget's counters (WithRetryBudget).
type Runner struct {
	cfg    config
	base   Model
	models map[string]Model // every model a condition may name, by key
	rules  []*Rule          // rules[i] is cfg.rules[i] when it is a native rule

	randMu sync.Mutex
	rand   *rand.Rand // nil unless Backoff.Seed is set

	// What requests share, in state (shared.go).
	state       State
	local       bool // state is a *localState, which ignores its ctx
	stateKey    string
	shared      bool           // a request calls state.Begin: a cooldown, a sticky policy or a retry budget
	stateModels []string       // the keys Begin asks about (models and deployments); nil without a cooldown
	stateIdx    map[string]int // their index in stateModels
	scopes      []string       // the distinct rate-limit scopes of stateModels
	scopeOf     []int          // scopeOf[i]: stateModels[i]'s index in scopes, or -1
	coolOrder   []Model        // where a request may start instead of a cooling model, in order
}

// New builds a Runner whose requests start on base.
//
// # Errors
//
// New reports every configuration mistake here, never at request time: a
// nil model or rule, a rule built wrongly (a nil switch target, Retry with
// fewer than 2 attempts, a negative delay …), a negative duration, an
// invalid sticky policy, two different models sharing a key.
func New(base Model, opts ...Option) (*Runner, error) {
	if base == nil {
		return nil, fmt.Errorf("retryhost: nil base model")
	}
	r := &Runner{base: base, cfg: config{
		maxAttempts:   defaultMaxAttempts,
		retryAfterCap: defaultRetryAfterCap,
		now:           time.Now,
		sleep:         sleepCtx,
	}}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("retryhost: nil option")
		}
		if err := o(&r.cfg); err != nil {
			return nil, err
		}
	}
	if r.cfg.logger == nil {
		r.cfg.logger = slog.New(slog.DiscardHandler)
	}
	if r.cfg.backoff.Factor == 0 {
		r.cfg.backoff.Factor = 1
	}
	if s := r.cfg.backoff.Seed; s != 0 {
		r.rand = rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
	}
	r.models = make(map[string]Model)
	if err := r.addModel(base); err != nil {
		return nil, err
	}
	r.rules = make([]*Rule, len(r.cfg.rules))
	for i, c := range r.cfg.rules {
		rule, ok := c.(*Rule)
		if !ok {
			continue
		}
		if rule == nil {
			return nil, fmt.Errorf("retryhost: rule %d is nil", i)
		}
		if err := rule.validate(); err != nil {
			return nil, err
		}
		if rule.target != nil {
			if err := r.addModel(rule.target); err != nil {
				return nil, err
			}
		}
		r.rules[i] = rule
	}
	for _, m := range r.cfg.models {
		if m == nil {
			return nil, fmt.Errorf("retryhost: nil model in WithModels")
		}
		if err := r.addModel(m); err != nil {
			return nil, err
		}
	}
	for _, rule := range r.rules {
		if rule != nil && rule.action == abi.ActionSwitch && r.models[rule.targetKey] == nil {
			return nil, fmt.Errorf("retryhost: rule %q switches to unknown model key %q (declare it with WithModels)",
				rule.match.name, rule.targetKey)
		}
	}
	r.setupState()
	return r, nil
}

func (r *Runner) addModel(m Model) error {
	if g, ok := m.(*DeploymentGroup); ok {
		if g.err != nil {
			return g.err
		}
		for _, d := range g.deps {
			if err := r.addModel(d); err != nil {
				return err
			}
		}
	}
	k := m.Key()
	if k == "" {
		return fmt.Errorf("retryhost: model %T has an empty key", m)
	}
	if old, ok := r.models[k]; ok && !sameModel(old, m) {
		return fmt.Errorf("retryhost: two different models share the key %q", k)
	}
	r.models[k] = m
	return nil
}

// sameModel reports whether a and b are the same model. Comparing two
// interfaces panics when their dynamic type is not comparable (a Model
// implemented by a struct value that holds a map or a slice), so such
// models are the same when their keys are: a Runner resolves models by
// key anyway.
func sameModel(a, b Model) (same bool) {
	defer func() {
		if recover() != nil {
			same = a.Key() == b.Key()
		}
	}()
	return a == b
}

// Base returns the model every request starts on (unless a sticky fallback is active).
func (r *Runner) Base() Model { return r.base }

var errNilDo = errors.New("retryhost: Do needs a Runner from New and a function")

// Call describes one attempt to the function [Do] runs. The driver reuses
// it for the next attempt: it is valid only until the function returns.
type Call struct {
	// Model is the model to call for this attempt.
	Model Model
	// Number is the attempt's 1-based number within the request.
	Number int
	// Timeout is the attempt's own deadline, already applied to the ctx the
	// function receives; 0 when the attempt has none. It is here for calls
	// that take a timeout of their own as well.
	Timeout time.Duration
	// Overrides are the request changes for this attempt (from the matched
	// rule and the OnRetry callback); apply them with [Call.Request].
	Overrides Overrides
}

// Request returns req with the attempt's overrides applied, without
// modifying req.
func (c *Call) Request(req *Request) *Request { return c.Overrides.Apply(req) }

// Do runs one request: it calls fn for the first attempt on the start model
// and, each time fn fails, asks the runner's rules what to do next, waits
// the backoff and calls fn again, until fn succeeds or the request fails.
//
// fn receives a ctx derived from the caller's, carrying the attempt's
// deadline (a *DeadlineError as its cause, see context.Cause), and the
// attempt's [Call]. A result fn returns with a nil error is final and
// returned as is. Do calls fn on the caller's goroutine, one attempt at a
// time.
//
// # Errors
//
// When the only attempt fails and no rule matches, Do returns fn's error
// unchanged. Otherwise it returns a *[RetryError] holding every attempt.
// The caller's cancellation (ctx done) is a hard stop: no rule is asked, no
// backoff waits, no further attempt starts.
func Do[R any](ctx context.Context, r *Runner, fn func(ctx context.Context, c *Call) (R, error)) (R, error) {
	if r == nil || fn == nil {
		var zero R
		return zero, errNilDo
	}
	var q request
	st := q.start(ctx, r)
	defer q.release() // also when fn panics: a request must not stay counted
	for {
		actx, cancel := q.attemptContext(ctx, &st)
		res, err := fn(actx, q.call())
		err = q.attemptErr(actx, err)
		cancel()
		if err == nil {
			q.succeed(ctx)
			return res, nil
		}
		var final error
		if st, final = q.fail(ctx, err); final != nil {
			var zero R
			return zero, final
		}
		if final = q.advance(ctx, &st); final != nil {
			var zero R
			return zero, final
		}
	}
}

// Generate makes one non-streaming call with retry and fail-over: each
// attempt calls the attempt's model with req and the attempt's overrides
// applied. Unlike [Do], it judges each response: a result rule (such as
// OnFinish(abi.ReasonContentFilter).Switch(m)) may reject it and try
// another model. A rejected response whose rules have no model left is
// returned as the answer, as the reference does.
//
// Errors are as for [Do]. req is not modified.
func (r *Runner) Generate(ctx context.Context, req *Request) (*Response, error) {
	return r.generate(ctx, req, nil)
}

// generate is Generate with an optional check of each response before the
// rules judge it (RetryableModel runs its transform chain there): an error
// from check fails the attempt like the model's own error would.
func (r *Runner) generate(ctx context.Context, req *Request,
	check func(ctx context.Context, c *Call, resp *Response) (*Response, error)) (*Response, error) {
	if req == nil {
		return nil, errors.New("retryhost: Generate needs a request")
	}
	q := request{op: opGenerate}
	st := q.start(ctx, r)
	defer q.release() // also when a model panics
	for {
		actx, cancel := q.attemptContext(ctx, &st)
		c := q.call()
		resp, err := c.Model.Generate(actx, c.Request(req))
		if err == nil && resp == nil {
			err = fmt.Errorf("retryhost: %s returned neither a response nor an error", c.Model.Key())
		}
		if err == nil && check != nil {
			if resp, err = check(actx, c, resp); err == nil && resp == nil {
				err = fmt.Errorf("retryhost: the response check of %s returned nothing", c.Model.Key())
			}
		}
		err = q.attemptErr(actx, err)
		cancel()
		var final error
		if err == nil {
			if q.obs != nil {
				q.observeResult(resp.Finish, resp.Usage)
				q.obs.respModel = resp.Meta.ModelID
			}
			var retry bool
			if st, retry, final = q.judge(ctx, resp.Finish, resp.Usage); final != nil {
				return nil, final
			}
			if !retry {
				q.succeed(ctx)
				return resp, nil
			}
		} else if st, final = q.fail(ctx, err); final != nil {
			return nil, final
		}
		if final = q.advance(ctx, &st); final != nil {
			return nil, final
		}
	}
}
