package driver

// The retry engine: one request's state machine, shared by Do (the call
// driver) and the stream driver. It knows nothing about what an attempt
// does; the loop that runs attempts drives it.
//
// # Internal API (for the loops in this package)
//
//	var q request                         // zero value; one per request, one goroutine
//	st := q.start(ctx, r)                 // resolves the start model (sticky), the budget
//	for {
//		actx, cancel := q.attemptContext(ctx, &st) // marks the attempt start; applies
//		                                   // st.timeout and the budget as a *DeadlineError cause
//		... run the attempt on st.model with st.overrides (q.call() builds the *Call) ...
//		err = q.attemptErr(actx, err)      // tags an error caused by our deadline
//		cancel()
//		success:        q.succeed(ctx)     // sticky update + OnSuccess; the request is over
//		result to judge: next, retry, final := q.judge(ctx, finish, usage)
//		                 // !retry && final == nil: accept the result, then q.succeed(ctx)
//		                 // final != nil: return it (OnFailure has fired)
//		failure:        next, final := q.fail(ctx, err)
//		                 // final != nil: return it (OnFailure has fired, or the driver is
//		                 // disabled and final is err itself)
//		if final = q.advance(ctx, &next); final != nil { return final } // backoff + OnRetry
//		st = next
//	}
//
// Contract: after start, exactly one of succeed, or a non-nil final error
// from fail/judge/advance, ends the request; each fires exactly one outcome
// callback (none when disabled). fail and judge never sleep; advance sleeps
// next.delay on the CALLER's ctx (never the failed attempt's, see §12.3),
// then fires OnRetry, whose overrides it merges into next.overrides.
// A caller's ctx that is done makes fail/advance stop at once (hard stop).
// An attempt error that is (or wraps) a *DeadlineError for
// abi.DeadlineTotal is never recovered. The stream driver reuses
// *DeadlineError for its first-content and gap deadlines: return it (or
// wrap it) as the attempt's error and fail classifies it as ClassTimeout
// with that Deadline.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// step is what one attempt runs with.
type step struct {
	model     Model // what the attempt runs on: a model, or a group's deployment
	target    Model // the model or group a rule (or the start) chose; nil: model
	group     *DeploymentGroup
	idx       int           // the deployment's index in group
	number    int           // 1-based
	timeout   time.Duration // the attempt's own deadline; 0: none
	delay     time.Duration // the wait before it (advance observes it)
	overrides Overrides
}

// keyCount counts, per model key, a request's attempts and backoff waits.
type keyCount struct {
	key      string
	attempts int
	waits    int
}

type request struct {
	r          *Runner
	disabled   bool
	begun      time.Time
	budgetAt   time.Time // zero: no budget
	startModel Model
	named      bool // the caller named the start model (StartOn): no sticky
	cur        step
	attemptAt  time.Time
	deadline   *DeadlineError // the cause installed on the current attempt's ctx
	records    []AttemptRecord
	counts     []keyCount
	a          *abi.Attempt // the latest judged attempt, handed to conditions and callbacks
	condErrs   []error      // the conditions that failed open while judging it
	accepted   error        // the ConditionErr of an accepted result, for its success record
	callv      *Call        // reused between attempts; separate so q itself can stay on the stack

	sctx       context.Context // the request's ctx, for the State's calls (shared.go)
	cooled     bool            // the request reads cooldowns (view, scopeUntil)
	view       []coolView      // its view of its models' cooldowns; nil: all clean
	scopeUntil []time.Time     // and of its rate-limit scopes; nil: none blocked

	inBudget  bool // counted as a request in flight by the retry budget
	retrySlot bool // holds a retry-in-flight slot of the retry budget
	busy      bool // the current attempt counts as in flight on its group's deployment
	fed       bool // the current attempt's latency was fed to its group

	op  opCode    // which API runs the request; set before start
	obs *observed // telemetry state (observer.go); nil without an Observer
}

// start begins the request and returns its first step.
func (q *request) start(ctx context.Context, r *Runner) step {
	q.r = r
	q.begun = r.cfg.now()
	q.disabled = r.cfg.disabled != nil && r.cfg.disabled()
	q.startModel = r.base
	if m := startFrom(ctx); m != nil {
		q.startModel, q.named = m, true
	}
	if !q.disabled && r.shared {
		q.begin(ctx) // sticky fallback, cooldowns, budget: one call to the State
	}
	if r.cfg.budget > 0 {
		q.budgetAt = q.begun.Add(r.cfg.budget)
	}
	q.cur = step{number: 1, timeout: r.cfg.attemptTimeout}
	q.aim(&q.cur, q.startModel, false)
	q.attemptAt = q.begun // the first attempt starts now: one clock read fewer
	if o := r.cfg.observer; o != nil {
		q.observeStart(ctx, o)
	}
	return q.cur
}

// call returns the *Call describing st; it is reused between attempts.
func (q *request) call() *Call {
	if q.callv == nil {
		q.callv = new(Call)
	}
	*q.callv = Call{Model: q.cur.model, Number: q.cur.number, Timeout: q.cur.timeout, Overrides: q.cur.overrides}
	return q.callv
}

// attemptContext marks the start of the attempt st and derives its ctx:
// the attempt's timeout, or the budget's remainder if that is sooner, with
// a *DeadlineError as the cause. Without either it returns ctx itself.
func (q *request) attemptContext(ctx context.Context, st *step) (context.Context, context.CancelFunc) {
	q.cur = *st
	if len(q.records) > 0 || st.number > 1 { // a hedge starts with no record yet
		q.attemptAt = q.r.cfg.now()
	}
	q.depStart()
	if q.obs != nil {
		ctx = q.observeAttempt()
	}
	q.deadline = nil
	limit := st.timeout
	if limit > 0 {
		q.deadline = &DeadlineError{Deadline: abi.DeadlineAttempt, Limit: limit}
	}
	if !q.budgetAt.IsZero() {
		if rest := q.budgetAt.Sub(q.attemptAt); limit <= 0 || rest < limit {
			limit = rest
			q.deadline = &DeadlineError{Deadline: abi.DeadlineTotal, Limit: q.r.cfg.budget}
		}
	}
	if q.deadline == nil {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, limit, q.deadline)
}

// attemptErr tags err with the attempt's *DeadlineError when that deadline
// is what ended the attempt, so that errors.As and classification see it
// even if the call only returned context.DeadlineExceeded.
func (q *request) attemptErr(actx context.Context, err error) error {
	if err == nil || q.deadline == nil || actx.Err() == nil || context.Cause(actx) != q.deadline {
		return err
	}
	var de *DeadlineError
	if errors.As(err, &de) {
		return err
	}
	return fmt.Errorf("%w: %w", q.deadline, err)
}

func (q *request) count(key string) *keyCount {
	for i := range q.counts {
		if q.counts[i].key == key {
			return &q.counts[i]
		}
	}
	q.counts = append(q.counts, keyCount{key: key})
	return &q.counts[len(q.counts)-1]
}

// record fills q.a for the attempt that just ended and appends its record.
func (q *request) record(err error, finish FinishReason, usage Usage) {
	now := q.r.cfg.now()
	earlier := make([]abi.AttemptSummary, len(q.records))
	for i, rec := range q.records {
		earlier[i] = abi.AttemptSummary{Model: rec.Model.Key(), Class: rec.Class, Status: rec.Status, Duration: rec.Duration}
	}
	if q.a == nil {
		q.a = new(abi.Attempt)
	}
	*q.a = abi.Attempt{
		Number: q.cur.number, Model: q.cur.model.Key(),
		Elapsed: now.Sub(q.begun), Duration: now.Sub(q.attemptAt),
		Finish: finish, Usage: usage, Earlier: earlier,
	}
	classify(err, q.a, now, q.r.cfg.retryAfterCap)
	q.depDone(err == nil, err != nil && healthFailure.Matches(q.a))
	q.records = append(q.records, AttemptRecord{
		Number: q.cur.number, Model: q.cur.model, Err: err, Finish: finish,
		Class: q.a.Class, Status: q.a.Status, Duration: q.a.Duration, Overrides: q.cur.overrides,
	})
	q.count(q.cur.logical().Key()).attempts++
	q.budgetRelease() // the attempt is over; the next must take a slot again
}

// fail judges a failed attempt: it fires OnError, then asks the rules. It
// returns the next step, or the request's final error.
func (q *request) fail(ctx context.Context, err error) (step, error) {
	if q.disabled {
		if q.obs != nil {
			q.record(err, FinishReason{}, Usage{})
			q.observeFinal(err)
		}
		q.depDone(false, false)
		return step{}, err
	}
	q.record(err, FinishReason{}, Usage{})
	if f := q.r.cfg.onError; f != nil {
		f(ctx, q.a)
	}
	if ctx.Err() != nil {
		return step{}, q.final(ctx, causeOf(ctx))
	}
	q.coolFailed(ctx, q.a, q.r.cfg.now())
	var de *DeadlineError
	if errors.As(err, &de) && !de.Recoverable() {
		return step{}, q.final(ctx, de)
	}
	if next, ok := q.failOverInGroup(); ok {
		if !q.budgetTake() {
			return step{}, q.final(ctx, ErrBudgetExhausted)
		}
		if q.obs != nil {
			q.observeEnd(AttemptFailed, err, &next)
		}
		return next, nil
	}
	next, ok, stop := q.choose(ctx)
	if !ok {
		return step{}, q.final(ctx, stop)
	}
	if q.obs != nil {
		q.observeEnd(AttemptFailed, err, &next)
	}
	return next, nil
}

// judge asks the rules about a result (a call that succeeded). retry
// reports that a rule rejected it: the result attempt is recorded and next
// is the attempt to run instead. final is non-nil when the request must
// fail (a condition gave up on the result, a cap).
func (q *request) judge(ctx context.Context, finish FinishReason, usage Usage) (next step, retry bool, final error) {
	if q.disabled || len(q.r.cfg.rules) == 0 {
		return step{}, false, nil
	}
	q.record(nil, finish, usage)
	next, ok, stop := q.choose(ctx)
	if ok {
		if q.obs != nil {
			q.observeEnd(AttemptRejected, nil, &next)
		}
		return next, true, nil
	}
	var ue *UnknownModelError
	if stop != nil && !errors.As(stop, &ue) && stop != ErrBudgetExhausted {
		return step{}, false, q.final(ctx, stop)
	}
	// Accepted (a condition that named an unknown model does not turn a
	// good answer into a failure; it was logged and stays on the record of
	// the successful attempt; nor does a spent retry budget): the result
	// attempt is the successful one.
	q.accepted = q.records[len(q.records)-1].ConditionErr
	q.records = q.records[:len(q.records)-1]
	q.count(q.cur.logical().Key()).attempts--
	return step{}, false, nil
}

// choose walks the rules in order (reference §3.3): the first that names a
// model with attempts left wins. ok false with a nil stop means no rule
// matched. A condition that fails open (its error, its panic, a switch to
// a model the Runner does not know) is no opinion: it is logged and kept
// in the attempt's record (ConditionErr); when no other rule matches, an
// unknown model is the stop's cause, so the request's error names it.
func (q *request) choose(ctx context.Context) (next step, ok bool, stop error) {
	defer q.keepConditionErrs()
	r := q.r
	var unknown *UnknownModelError
	for i, c := range r.cfg.rules {
		d, err := q.decide(ctx, i, c)
		if err != nil {
			if stop := q.conditionFailed(ctx, i, c, err, &unknown); stop != nil {
				return step{}, false, stop
			}
			continue
		}
		target, maxAttempts, match, stop := q.target(ctx, i, &d)
		if stop != nil {
			return step{}, false, stop
		}
		if !match {
			continue
		}
		rule := r.rules[i] // non-nil for a native rule: its overrides apply
		if rejectedAsIs(q.a) && sameModel(target, q.cur.logical()) && (rule == nil || rule.overrides.IsZero()) {
			// A rejected request is never resent unchanged: as if the rule did not match.
			r.cfg.logger.LogAttrs(ctx, slog.LevelDebug, "retryhost: the model rejected the request; a rule that would resend it unchanged is skipped",
				slog.Int("condition", i), slog.String("model", target.Key()), slog.Int("status", q.a.Status))
			continue
		}
		kc := q.count(target.Key())
		if kc.attempts >= maxAttempts {
			continue // exhausted: fall through to the next rule
		}
		if q.cooled {
			if now := r.cfg.now(); !q.invited(&d, target, now) && !q.modelUsable(target, now) {
				continue // cooling down: as if exhausted
			}
		}
		if skip := skipFrom(ctx); skip != nil && skip(target) {
			continue // ineligible for this request (SkipModels): as if exhausted
		}
		return q.plan(ctx, &d, rule, target, kc)
	}
	if unknown != nil {
		// Nothing else matched: the request stops because a condition's
		// choice could not be followed, and says so.
		return step{}, false, unknown
	}
	return step{}, false, nil
}

// decide asks condition i, c, about the attempt. Native rules and foreign
// conditions alike run under a panic guard: a user's predicate must not
// take the request down.
func (q *request) decide(ctx context.Context, i int, c Condition) (abi.Decision, error) {
	d, err := safeDecide(ctx, c, q.a)
	if err == nil && d.Action == abi.ActionSwitch && q.r.models[d.Model] == nil {
		// Native rules' keys were checked by New; a foreign
		// condition's may be unknown: a failure of the condition,
		// never a silent skip.
		err = &UnknownModelError{Condition: i, Model: d.Model}
	}
	return d, err
}

// conditionFailed handles condition i's failure, err: the request's stop
// when the condition fails closed; otherwise nil, the failure logged and
// kept, and the first unknown model it named noted in *unknown.
func (q *request) conditionFailed(ctx context.Context, i int, c Condition, err error, unknown **UnknownModelError) error {
	if fp, ok := c.(FailPolicyer); ok && fp.FailPolicy() == abi.FailClosed {
		return fmt.Errorf("retryhost: condition %d failed (fail-closed): %w", i, err)
	}
	var ue *UnknownModelError
	if errors.As(err, &ue) {
		q.r.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "retryhost: condition named an unknown model; treated as no opinion",
			slog.Int("condition", i), slog.String("model", ue.Model))
		if *unknown == nil {
			*unknown = ue
		}
	} else {
		q.r.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "retryhost: condition failed; treated as no opinion",
			slog.Int("condition", i), slog.String("error", err.Error()))
	}
	q.condErrs = append(q.condErrs, err)
	return nil
}

// target is the model condition i's decision d aims at and the attempts
// it allows there; match false for no opinion (or an unknown action), a
// stop for a give-up.
func (q *request) target(ctx context.Context, i int, d *abi.Decision) (target Model, maxAttempts int, match bool, stop error) {
	maxAttempts = d.MaxAttempts
	switch d.Action {
	case abi.ActionNone:
		return nil, 0, false, nil
	case abi.ActionGiveUp:
		return nil, 0, false, ErrGaveUp
	case abi.ActionRetry:
		target = q.cur.logical()
		if maxAttempts <= 0 {
			maxAttempts = 2
		}
	case abi.ActionSwitch:
		target = q.r.models[d.Model] // known: checked by decide
		if maxAttempts <= 0 {
			maxAttempts = 1
		}
	default:
		q.r.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "retryhost: condition answered an unknown action; skipped",
			slog.Int("condition", i), slog.Int("action", int(d.Action)))
		return nil, 0, false, nil
	}
	return target, maxAttempts, true, nil
}

// plan is the next step to target, as the decision d and its rule (nil: a
// foreign condition) say: unless the request's attempts, its total budget,
// the caller's deadline or the retry budget stop it.
func (q *request) plan(ctx context.Context, d *abi.Decision, rule *Rule, target Model, kc *keyCount) (next step, ok bool, stop error) {
	r := q.r
	if len(q.records) >= r.cfg.maxAttempts {
		return step{}, false, ErrMaxAttempts
	}
	next = step{number: len(q.records) + 1, timeout: r.cfg.attemptTimeout}
	q.aim(&next, target, false)
	if d.Timeout > 0 {
		next.timeout = d.Timeout
	}
	if rule != nil && rule.overrides != nil {
		next.overrides = *rule.overrides
	}
	next.delay = q.r.delay(d, kc, q.a.RetryAfter)
	now := r.cfg.now()
	if !q.budgetAt.IsZero() && !now.Add(next.delay).Before(q.budgetAt) {
		return step{}, false, &DeadlineError{Deadline: abi.DeadlineTotal, Limit: r.cfg.budget}
	}
	// ctx deadlines are on the real clock, whatever r.cfg.now is.
	if dl, ok := ctx.Deadline(); ok && next.delay > 0 && time.Until(dl) <= next.delay {
		return step{}, false, fmt.Errorf("retryhost: a backoff of %v would outlive the caller's deadline: %w",
			next.delay, context.DeadlineExceeded)
	}
	if !q.budgetTake() {
		return step{}, false, ErrBudgetExhausted
	}
	return next, true, nil
}

// rejectedAsIs reports whether a is a failure the model will repeat for
// the same request: HTTP 400 (bad request), 404 (no such model or
// endpoint), 413 (too large) and 422 (unprocessable) reject the request
// itself, and 401 and 403 reject the credentials, none of which a resend
// changes. A rule that would resend such a request unchanged to the model
// that rejected it (a retry, or a switch to that same model, carrying no
// overrides) is skipped as if it did not match, whatever its Match says:
// the next rule decides, and a switch to another model is still allowed.
// Overrides from [WithOnRetry] are computed after the choice and do not
// exempt a rule; put the change on the rule ([Rule.Override]).
func rejectedAsIs(a *abi.Attempt) bool {
	switch a.Status {
	case 400, 401, 403, 404, 413, 422:
		return a.Class != abi.ClassNone
	}
	return false
}

// keepConditionErrs stores the condition failures of the latest judgement
// in the attempt's record.
func (q *request) keepConditionErrs() {
	if len(q.condErrs) == 0 {
		return
	}
	err := q.condErrs[0]
	if len(q.condErrs) > 1 {
		err = errors.Join(q.condErrs...)
	}
	q.records[len(q.records)-1].ConditionErr = err
	q.condErrs = q.condErrs[:0]
}

// safeDecide asks c, turning a panic into an error: a broken condition
// must not take the request down.
func safeDecide(ctx context.Context, c Condition, a *Attempt) (d abi.Decision, err error) {
	defer func() {
		if p := recover(); p != nil {
			d, err = abi.Decision{}, fmt.Errorf("retryhost: condition panicked: %v", p)
		}
	}()
	return c.Decide(ctx, a)
}

// delay computes the wait before an attempt on kc's model: the server's
// Retry-After when the decision honours it, else delay × factor^k with k the
// number of earlier waits for that model in this request (so the first
// retry waits exactly delay, reference defect §12.2), capped, jittered.
func (r *Runner) delay(d *abi.Decision, kc *keyCount, retryAfter time.Duration) time.Duration {
	k := kc.waits
	kc.waits++
	if d.UseRetryAfter && retryAfter >= 0 {
		return retryAfter
	}
	b := &r.cfg.backoff
	base := d.Delay
	if base <= 0 {
		base = b.Delay
	}
	if base <= 0 {
		return 0
	}
	f := d.BackoffFactor
	if !(f >= 1) {
		f = b.Factor
	}
	x := float64(base) * math.Pow(f, float64(k))
	if b.MaxDelay > 0 && x > float64(b.MaxDelay) {
		x = float64(b.MaxDelay)
	}
	if x > math.MaxInt64/2 {
		x = math.MaxInt64 / 2
	}
	switch b.Jitter {
	case JitterFull:
		x *= r.float64()
	case JitterEqual:
		x = x/2 + x/2*r.float64()
	}
	return time.Duration(x)
}

func (r *Runner) float64() float64 {
	if r.rand == nil {
		return rand.Float64()
	}
	r.randMu.Lock()
	defer r.randMu.Unlock()
	return r.rand.Float64()
}

// advance waits next's delay on the caller's ctx, then fires OnRetry and
// merges its overrides. A non-nil error is the request's final error.
func (q *request) advance(ctx context.Context, next *step) error {
	if next.delay > 0 {
		if err := q.r.cfg.sleep(ctx, next.delay); err != nil {
			if ctx.Err() != nil {
				err = causeOf(ctx)
			}
			return q.final(ctx, err)
		}
	}
	if f := q.r.cfg.onRetry; f != nil {
		ov := f(ctx, RetryInfo{Failed: q.a, Next: next.model, Number: next.number, Delay: next.delay,
			Overrides: next.overrides, FailedOverrides: q.records[len(q.records)-1].Overrides})
		next.overrides = next.overrides.over(ov)
	}
	if ctx.Err() != nil {
		return q.final(ctx, causeOf(ctx))
	}
	q.cur = *next
	return nil
}

// succeed ends the request with the current attempt's success.
func (q *request) succeed(ctx context.Context) {
	q.budgetEnd()
	q.depDone(true, false)
	if q.obs != nil {
		q.observeSuccess()
	}
	if q.disabled {
		return
	}
	q.coolSucceeded(ctx, q.cur.model)
	switched, f := !sameModel(q.cur.logical(), q.startModel), q.r.cfg.onSuccess
	if !switched && f == nil {
		return // the common case reads no clock
	}
	now := q.r.cfg.now()
	if switched && !q.named {
		q.stickySet(ctx, q.cur.logical())
	}
	if f != nil {
		q.records = append(q.records, AttemptRecord{
			Number: q.cur.number, Model: q.cur.model, Duration: now.Sub(q.attemptAt),
			Overrides: q.cur.overrides, ConditionErr: q.accepted,
		})
		f(ctx, Outcome{Model: q.cur.model, Attempts: q.records, Elapsed: now.Sub(q.begun)})
	}
}

// final ends the request with a failure: the raw error of a lone attempt
// when nothing else explains the stop, else a *RetryError. It fires OnFailure.
func (q *request) final(ctx context.Context, cause error) error {
	q.budgetEnd()
	var err error
	if last := q.records[len(q.records)-1].Err; len(q.records) == 1 && last != nil &&
		(cause == nil || errors.Is(last, cause)) {
		err = last
	} else {
		err = &RetryError{Attempts: q.records, Cause: cause}
	}
	if f := q.r.cfg.onFailure; f != nil {
		f(ctx, Outcome{Model: q.cur.model, Attempts: q.records, Err: err, Elapsed: q.r.cfg.now().Sub(q.begun)})
	}
	if q.obs != nil {
		q.observeFinal(err)
	}
	return err
}
