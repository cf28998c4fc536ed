package driver

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// Match is a predicate over a finished attempt: the "when" of a rule. Build
// one with the functions of this file ([OnStatus], [OnClass], [Timeout],
// [OnFinish], …) and combine them with [And], [Or] and [Not]; turn it into a
// [Rule] with [Match.Switch], [Match.Retry] or [Match.GiveUp].
//
// Error predicates never match a result attempt (one whose call succeeded,
// judged for example on its finish reason), and result predicates never
// match an error attempt.
//
// The zero Match is invalid; [New] rejects rules built on it, and rules
// built on a Match given values no policy file would accept (a status
// outside 100-599, an empty list, an unknown class): a mistake in Go is
// reported where the same mistake in a policy file is, at load, never
// silently matching nothing. A Match is immutable and safe for concurrent
// use if its functions are.
type Match struct {
	f    func(a *Attempt) bool
	name string
	err  error // a builder mistake, reported by New
}

// Err reports the builder mistake m carries (for example OnStatus(4290)),
// or nil. [New] returns it for a rule or a cooldown built on m.
func (m Match) Err() error { return m.err }

func (m Match) invalid(format string, args ...any) Match {
	if m.err == nil {
		m.err = fmt.Errorf("retryhost: %s: "+format, append([]any{m.name}, args...)...)
	}
	return m
}

// firstErr carries the first mistake of ms into m.
func (m Match) firstErr(ms []Match) Match {
	for _, x := range ms {
		if x.err != nil {
			m.err = x.err
			break
		}
	}
	return m
}

// Matches reports whether a satisfies the predicate. The zero Match matches nothing.
func (m Match) Matches(a *Attempt) bool { return m.f != nil && m.f(a) }

// String describes the predicate, for logs and errors.
func (m Match) String() string { return m.name }

func errMatch(name string, f func(a *Attempt) bool) Match {
	return Match{name: name, f: func(a *Attempt) bool { return a.Class != abi.ClassNone && f(a) }}
}

// AnyError matches every error attempt.
func AnyError() Match { return errMatch("any error", func(*Attempt) bool { return true }) }

// OnStatus matches an error attempt whose HTTP status is one of codes.
// Every code must be an HTTP status (100-599) and at least one is needed:
// [New] rejects OnStatus(4290) and OnStatus() as a policy file does.
func OnStatus(codes ...int) Match {
	codes = slices.Clone(codes)
	m := errMatch(fmt.Sprintf("status %v", codes), func(a *Attempt) bool {
		return a.Status != 0 && slices.Contains(codes, a.Status)
	})
	if len(codes) == 0 {
		return m.invalid("no status code (it would match nothing)")
	}
	for _, c := range codes {
		if c < 100 || c > 599 {
			return m.invalid("%d is not an HTTP status (100-599)", c)
		}
	}
	return m
}

// OnStatusRange matches an error attempt whose HTTP status s is lo <= s <= hi,
// such as OnStatusRange(500, 599). [New] rejects a range that is not
// 100 <= lo <= hi <= 599.
func OnStatusRange(lo, hi int) Match {
	m := errMatch(fmt.Sprintf("status %d-%d", lo, hi), func(a *Attempt) bool {
		return a.Status != 0 && a.Status >= lo && a.Status <= hi
	})
	if lo < 100 || hi > 599 || lo > hi {
		return m.invalid("want 100 <= lo <= hi <= 599")
	}
	return m
}

// OnClass matches an error attempt of one of the classes, as the driver
// classified it (see [ErrorClass]). [New] rejects OnClass() and a class
// that is not one of the Class constants.
func OnClass(classes ...abi.ErrorClass) Match {
	classes = slices.Clone(classes)
	m := errMatch(fmt.Sprintf("class %v", classes), func(a *Attempt) bool {
		return slices.Contains(classes, a.Class)
	})
	if len(classes) == 0 {
		return m.invalid("no class (it would match nothing)")
	}
	for _, c := range classes {
		if _, ok := abi.ParseErrorClass(c.String()); !ok || c == abi.ClassNone || c.String() == "unknown" && c != abi.ClassUnknown {
			return m.invalid("%d is not an error class", uint8(c))
		}
	}
	return m
}

// OnError matches an error attempt whose error satisfies pred.
func OnError(pred func(err error) bool) Match {
	return errMatch("error predicate", func(a *Attempt) bool { return pred != nil && pred(a.Err) })
}

// OnErrorIs matches an error attempt when errors.Is(err, target).
func OnErrorIs(target error) Match {
	return errMatch(fmt.Sprintf("error is %v", target), func(a *Attempt) bool { return errors.Is(a.Err, target) })
}

// OnErrorAs matches an error attempt whose error chain holds an error of type T
// (errors.As), such as OnErrorAs[*abi.RefusalError]().
func OnErrorAs[T error]() Match {
	var zero T
	return errMatch(fmt.Sprintf("error as %T", zero), func(a *Attempt) bool {
		var t T
		return errors.As(a.Err, &t)
	})
}

// OnMessage matches an error attempt whose message contains one of subs,
// ignoring case. [New] rejects OnMessage() and an empty substring (which
// would match every message).
func OnMessage(subs ...string) Match {
	lower := make([]string, len(subs))
	for i, s := range subs {
		lower[i] = strings.ToLower(s)
	}
	m := errMatch(fmt.Sprintf("message %q", subs), func(a *Attempt) bool {
		msg := strings.ToLower(a.Message)
		for _, s := range lower {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	})
	if len(subs) == 0 {
		return m.invalid("no substring (it would match nothing)")
	}
	if slices.Contains(subs, "") {
		return m.invalid("an empty substring matches every message")
	}
	return m
}

// OnMessageRegexp matches an error attempt whose message matches re.
func OnMessageRegexp(re *regexp.Regexp) Match {
	return errMatch(fmt.Sprintf("message =~ %v", re), func(a *Attempt) bool {
		return re != nil && re.MatchString(a.Message)
	})
}

// Timeout matches an attempt that failed on a deadline: the driver's own
// (a *DeadlineError other than the total budget, which is never recovered)
// or one the call reported (context.DeadlineExceeded, a network timeout, HTTP 408).
func Timeout() Match {
	return errMatch("timeout", func(a *Attempt) bool { return a.Class == abi.ClassTimeout })
}

// Canceled matches an attempt that failed with context.Canceled from
// something other than the caller (whose cancellation is a hard stop that
// no rule sees), for example a canceled sub-operation.
func Canceled() Match {
	return errMatch("canceled", func(a *Attempt) bool { return a.Class == abi.ClassCanceled })
}

// Retryable matches an error attempt whose provider flagged it retryable
// (flag true) or not retryable (flag false); see [ProviderError.Retryable].
func Retryable(flag bool) Match {
	return errMatch(fmt.Sprintf("retryable=%v", flag), func(a *Attempt) bool {
		var pe *ProviderError
		return errors.As(a.Err, &pe) && a.Retryable == flag
	})
}

// OnFinish matches a result attempt whose unified finish reason is one of
// reasons, such as OnFinish(abi.ReasonContentFilter).
//
// Result predicates apply where the driver sees a result's finish reason:
// [Runner.Generate] and the stream driver (before commit). [Do] treats a
// result as final and never judges it: its results are opaque.
//
// [New] rejects OnFinish() and a reason that is not one of the Reason constants.
func OnFinish(reasons ...abi.Reason) Match {
	reasons = slices.Clone(reasons)
	m := Match{name: fmt.Sprintf("finish %v", reasons), f: func(a *Attempt) bool {
		return a.Class == abi.ClassNone && slices.Contains(reasons, a.Finish.Unified)
	}}
	if len(reasons) == 0 {
		return m.invalid("no finish reason (it would match nothing)")
	}
	for _, r := range reasons {
		if _, ok := abi.ParseReason(r.String()); !ok || r.String() == "unknown" && r != abi.ReasonUnknown {
			return m.invalid("%d is not a finish reason", uint8(r))
		}
	}
	return m
}

// OnResult matches a result attempt that satisfies pred.
func OnResult(pred func(a *Attempt) bool) Match {
	return Match{name: "result predicate", f: func(a *Attempt) bool {
		return a.Class == abi.ClassNone && pred != nil && pred(a)
	}}
}

// And matches when every m matches, evaluated in order, stopping at the
// first that does not. And() matches everything.
func And(ms ...Match) Match {
	ms = slices.Clone(ms)
	return Match{name: joinNames("and", ms), f: func(a *Attempt) bool {
		for _, m := range ms {
			if !m.Matches(a) {
				return false
			}
		}
		return true
	}}.firstErr(ms)
}

// Or matches when any m matches, evaluated in order, stopping at the first
// that does. Or() matches nothing.
func Or(ms ...Match) Match {
	ms = slices.Clone(ms)
	return Match{name: joinNames("or", ms), f: func(a *Attempt) bool {
		for _, m := range ms {
			if m.Matches(a) {
				return true
			}
		}
		return false
	}}.firstErr(ms)
}

// Not matches when m does not. Note that Not(OnStatus(429)) also matches
// result attempts; write And(AnyError(), Not(…)) for "any other error".
func Not(m Match) Match {
	return Match{name: "not " + m.name, f: func(a *Attempt) bool { return !m.Matches(a) }, err: m.err}
}

func joinNames(op string, ms []Match) string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.name
	}
	return op + "(" + strings.Join(names, ", ") + ")"
}

// Rule is a native condition: when its Match matches a failed attempt, it
// switches to a model, retries the attempt's model or gives up, with the
// attempt budget, backoff, timeout and overrides it carries. It satisfies
// [Condition], so native rules and Wasm conditions mix in one list.
//
// Rule's methods return a modified copy, so a base rule can be shared and
// refined. A builder mistake (such as Retry().Attempts(1)) is kept in the
// rule and reported by [New], never at request time.
//
// A Rule is immutable and safe for concurrent use.
type Rule struct {
	match         Match
	action        abi.Action
	target        Model  // ActionSwitch by Switch; nil for SwitchKey
	targetKey     string // ActionSwitch
	maxAttempts   int
	delay         time.Duration
	factor        float64
	timeout       time.Duration
	useRetryAfter bool
	overrides     *Overrides
	err           error
}

// Switch builds a rule that, when m matches, tries model next. The
// model's budget is one attempt per request unless [Rule.Attempts] raises it;
// a model already tried that often is skipped and the next rule is asked.
func (m Match) Switch(model Model) *Rule {
	r := &Rule{match: m, action: abi.ActionSwitch, target: model, maxAttempts: 1}
	if model == nil {
		r.err = fmt.Errorf("retryhost: rule %q switches to a nil model", m.name)
	} else {
		r.targetKey = model.Key()
	}
	return r
}

// SwitchKey is [Match.Switch] for a model named by its key, as in a
// configuration file. The key must name a model the [Runner] knows (the
// base, a model of another rule, or one declared with [WithModels]);
// otherwise [New] fails.
func (m Match) SwitchKey(key string) *Rule {
	r := &Rule{match: m, action: abi.ActionSwitch, targetKey: key, maxAttempts: 1}
	if key == "" {
		r.err = fmt.Errorf("retryhost: rule %q switches to an empty model key", m.name)
	}
	return r
}

// Retry builds a rule that, when m matches, tries the failed attempt's
// model again: 2 attempts on that model per request (the first counts)
// unless [Rule.Attempts] says otherwise. A request the model rejected (HTTP
// 400, 401, 403, 404, 413, 422) is never resent to it unchanged: without
// [Rule.Override] the rule is skipped for it as if it did not match. It waits what the server's
// Retry-After asks (capped by [WithRetryAfterCap]) instead of its delay,
// unless [Rule.IgnoreRetryAfter].
func (m Match) Retry() *Rule {
	return &Rule{match: m, action: abi.ActionRetry, maxAttempts: 2, useRetryAfter: true}
}

// GiveUp builds a rule that, when m matches, fails the request at once
// without asking the rules after it: put it first to keep, for example,
// authentication errors from reaching a catch-all fallback.
func (m Match) GiveUp() *Rule { return &Rule{match: m, action: abi.ActionGiveUp} }

// Fallback builds a rule that switches to model on any error, once per
// request. Like the reference's bare fallback model, it never fires on a
// result attempt.
func Fallback(model Model) *Rule { return AnyError().Switch(model) }

func (r *Rule) clone() *Rule { c := *r; return &c }

func (r *Rule) fail(format string, args ...any) *Rule {
	c := r.clone()
	if c.err == nil {
		c.err = fmt.Errorf("retryhost: rule %q: "+format, append([]any{r.match.name}, args...)...)
	}
	return c
}

// Attempts sets the attempt budget on the target model per request,
// counting every earlier attempt on it including the first. Retry rules
// need at least 2 (1 would never retry); switch rules at least 1.
func (r *Rule) Attempts(n int) *Rule {
	switch {
	case r.action == abi.ActionRetry && n < 2:
		return r.fail("Retry needs Attempts(n) with n >= 2, got %d", n)
	case n < 1:
		return r.fail("Attempts(n) needs n >= 1, got %d", n)
	}
	c := r.clone()
	c.maxAttempts = n
	return c
}

// Delay sets the base wait before the next attempt. Default: the
// [Backoff.Delay] of [WithBackoff], else none.
func (r *Rule) Delay(d time.Duration) *Rule {
	if d < 0 {
		return r.fail("negative delay %v", d)
	}
	c := r.clone()
	c.delay = d
	return c
}

// Backoff sets the factor the delay is multiplied by per earlier wait for
// the same target model in this request: Delay(time.Second).Backoff(2)
// waits 1 s, 2 s, 4 s. Default: [Backoff.Factor], else 1.
func (r *Rule) Backoff(factor float64) *Rule {
	if factor < 1 || factor != factor {
		return r.fail("backoff factor %v is below 1", factor)
	}
	c := r.clone()
	c.factor = factor
	return c
}

// Timeout sets the next attempt's own deadline. Default: [WithAttemptTimeout].
func (r *Rule) Timeout(d time.Duration) *Rule {
	if d <= 0 {
		return r.fail("timeout %v is not positive", d)
	}
	c := r.clone()
	c.timeout = d
	return c
}

// Override sets request overrides for the next attempt (see [Overrides]).
// The rule keeps its own copy.
func (r *Rule) Override(o Overrides) *Rule {
	c := r.clone()
	c.overrides = &o
	return c
}

// IgnoreRetryAfter makes a retry rule use its own delay even when the
// server sent Retry-After.
func (r *Rule) IgnoreRetryAfter() *Rule {
	c := r.clone()
	c.useRetryAfter = false
	return c
}

// UseRetryAfter makes a switch rule wait what the failed attempt's
// Retry-After asks (retry rules do by default).
func (r *Rule) UseRetryAfter() *Rule {
	c := r.clone()
	c.useRetryAfter = true
	return c
}

// String describes the rule.
func (r *Rule) String() string {
	if r.action == abi.ActionSwitch {
		return fmt.Sprintf("%s → switch %s", r.match.name, r.targetKey)
	}
	return fmt.Sprintf("%s → %s", r.match.name, r.action)
}

// validate reports a builder mistake.
func (r *Rule) validate() error {
	if r.err != nil {
		return r.err
	}
	if r.match.err != nil {
		return r.match.err
	}
	if r.match.f == nil {
		return errors.New("retryhost: a rule has a zero Match (build it with OnStatus, AnyError, …)")
	}
	return nil
}

// decision is the rule's verdict on a, with its target model, if it matches.
func (r *Rule) decision(a *Attempt) (abi.Decision, bool) {
	if !r.match.Matches(a) {
		return abi.Decision{}, false
	}
	d := abi.Decision{
		Action: r.action, MaxAttempts: r.maxAttempts, Delay: r.delay,
		BackoffFactor: r.factor, Timeout: r.timeout, UseRetryAfter: r.useRetryAfter,
	}
	if r.action == abi.ActionSwitch {
		d.Model = r.targetKey
	}
	return d, true
}

// Decide implements [Condition]: the rule's decision if its Match matches
// a, else no opinion. It never fails.
func (r *Rule) Decide(_ context.Context, a *Attempt) (Decision, error) {
	d, _ := r.decision(a)
	return d, nil
}

// ConditionFunc adapts a function to [Condition], for conditions that are
// easier to write as code than as a [Match] (and for tests). A switch
// decision names its model by key; declare the model with [WithModels].
// The function must be safe for concurrent use.
type ConditionFunc func(ctx context.Context, a *Attempt) (Decision, error)

// Decide calls f.
func (f ConditionFunc) Decide(ctx context.Context, a *Attempt) (Decision, error) { return f(ctx, a) }
