package policy

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
)

func (b *builder) rule(ctx context.Context, i int, rs *RuleSpec) (driver.Condition, error) {
	at := fmt.Sprintf("rules[%d]", i)
	if (rs.When == nil) == (rs.Plugin == nil) {
		return nil, b.errf(at, "give exactly one of when (a native condition) or plugin (a Wasm condition)")
	}
	if rs.Plugin != nil {
		if rs.Action == "" { // before the load: a config that cannot work costs no compile
			if err := b.checkTargets(at+".plugin", rs.Plugin); err != nil {
				return nil, err
			}
		}
		p, err := b.plugin(ctx, at+".plugin", rs.Plugin)
		if err != nil {
			return nil, err
		}
		if !p.IsCondition() {
			return nil, b.errf(at+".plugin", "plugin %q is not a condition (it exports no retryhost_decide)", p.Name())
		}
		if rs.Action == "" {
			if err := b.noActionFields(at, rs); err != nil {
				return nil, err
			}
			if b.retryDelay > 0 {
				return &retryFloor{plugin: p, delay: b.retryDelay}, nil
			}
			return p, nil
		}
		r, err := b.action(at, rs, driver.And()) // the plugin is the matcher
		if err != nil {
			return nil, err
		}
		return &gated{plugin: p, rule: r}, nil
	}
	m, err := b.match(at+".when", rs.When)
	if err != nil {
		return nil, err
	}
	if rs.Action == "" {
		return nil, b.errf(at+".action", "required (switch, retry or give-up)")
	}
	return b.action(at, rs, m)
}

func (b *builder) noActionFields(at string, rs *RuleSpec) error {
	for _, f := range []string{"model", "attempts", "delay", "backoff", "timeout", "retry_after"} {
		if b.doc.Has(b.path(at + "." + f)) {
			return b.errf(at+"."+f, "only with an action (a plugin rule without one decides for itself)")
		}
	}
	return nil
}

func (b *builder) action(at string, rs *RuleSpec, m driver.Match) (*driver.Rule, error) {
	var r *driver.Rule
	switch rs.Action {
	case "switch":
		if rs.Model == "" {
			return nil, b.errf(at+".model", "required for a switch")
		}
		target := b.p.Models[rs.Model]
		if target == nil {
			return nil, b.errf(at+".model", "unknown model %q (declare it under models)", rs.Model)
		}
		r = m.Switch(target)
	case "retry":
		if rs.Model != "" {
			return nil, b.errf(at+".model", "only for a switch (retry stays on the failed attempt's model)")
		}
		r = m.Retry()
	case "give-up":
		for _, f := range []string{"model", "attempts", "delay", "backoff", "timeout", "retry_after"} {
			if b.doc.Has(b.path(at + "." + f)) {
				return nil, b.errf(at+"."+f, "not allowed with give-up")
			}
		}
		return m.GiveUp(), nil
	default:
		return nil, b.errf(at+".action", "unknown action %q (want switch, retry or give-up)", rs.Action)
	}
	if rs.Attempts != 0 || b.doc.Has(b.path(at+".attempts")) { // given (a DefaultRules rule is in no document)
		min := 1
		if rs.Action == "retry" {
			min = 2
		}
		if rs.Attempts < min {
			return nil, b.errf(at+".attempts", "%s needs at least %d attempts (the first counts), got %d", rs.Action, min, rs.Attempts)
		}
		r = r.Attempts(rs.Attempts)
	}
	if rs.Delay != nil {
		r = r.Delay(dur(rs.Delay))
	} else if rs.Action == "retry" && b.retryDelay > 0 {
		r = r.Delay(b.retryDelay)
	}
	if rs.Backoff != 0 || b.doc.Has(b.path(at+".backoff")) {
		if !(rs.Backoff >= 1) {
			return nil, b.errf(at+".backoff", "factor %v is below 1", rs.Backoff)
		}
		r = r.Backoff(rs.Backoff)
	}
	if rs.Timeout != nil {
		if dur(rs.Timeout) <= 0 {
			return nil, b.errf(at+".timeout", "must be positive")
		}
		r = r.Timeout(dur(rs.Timeout))
	}
	if rs.RetryAfter != nil {
		if *rs.RetryAfter {
			r = r.UseRetryAfter()
		} else {
			r = r.IgnoreRetryAfter()
		}
	}
	return r, nil
}

// match builds a rule's match: the criteria ms sets, all of which must
// hold, in a fixed order.
func (b *builder) match(at string, ms *MatchSpec) (driver.Match, error) {
	var ms2 []driver.Match
	if ms.Any {
		ms2 = append(ms2, driver.AnyError())
	}
	var err error
	if ms2, err = b.matchStatus(at, ms, ms2); err != nil {
		return driver.Match{}, err
	}
	if ms2, err = b.matchClass(at, ms, ms2); err != nil {
		return driver.Match{}, err
	}
	if ms2, err = b.matchMessage(at, ms, ms2); err != nil {
		return driver.Match{}, err
	}
	ms2 = matchFlags(ms, ms2)
	if ms2, err = b.matchFinish(at, ms, ms2); err != nil {
		return driver.Match{}, err
	}
	switch len(ms2) {
	case 0:
		return driver.Match{}, b.errf(at, "no criterion (use {\"any\": true} to match every error)")
	case 1:
		return ms2[0], nil
	}
	return driver.And(ms2...), nil
}

// matchStatus adds the status list's and the status range's criteria.
func (b *builder) matchStatus(at string, ms *MatchSpec, out []driver.Match) ([]driver.Match, error) {
	if ms.Status != nil {
		if len(ms.Status) == 0 {
			return nil, b.errf(at+".status", "empty list")
		}
		for j, s := range ms.Status {
			if s < 100 || s > 599 {
				return nil, b.errf(fmt.Sprintf("%s.status[%d]", at, j), "%d is not an HTTP status (100-599)", s)
			}
		}
		out = append(out, driver.OnStatus(ms.Status...))
	}
	if ms.StatusRange != nil {
		r := ms.StatusRange
		if len(r) != 2 || r[0] < 100 || r[1] > 599 || r[0] > r[1] {
			return nil, b.errf(at+".status_range", "want [lo, hi] with 100 <= lo <= hi <= 599, got %v", r)
		}
		out = append(out, driver.OnStatusRange(r[0], r[1]))
	}
	return out, nil
}

// matchClass adds the error classes' criterion.
func (b *builder) matchClass(at string, ms *MatchSpec, out []driver.Match) ([]driver.Match, error) {
	if ms.Class == nil {
		return out, nil
	}
	if len(ms.Class) == 0 {
		return nil, b.errf(at+".class", "empty list")
	}
	cs := make([]abi.ErrorClass, len(ms.Class))
	for j, s := range ms.Class {
		c, ok := abi.ParseErrorClass(s)
		if !ok || c == abi.ClassNone {
			return nil, b.errf(fmt.Sprintf("%s.class[%d]", at, j), "unknown error class %q (want one of %s)", s, classList())
		}
		cs[j] = c
	}
	return append(out, driver.OnClass(cs...)), nil
}

// matchMessage adds the message substrings' criterion.
func (b *builder) matchMessage(at string, ms *MatchSpec, out []driver.Match) ([]driver.Match, error) {
	if ms.Message == nil {
		return out, nil
	}
	for j, s := range ms.Message {
		if s == "" {
			return nil, b.errf(fmt.Sprintf("%s.message[%d]", at, j), "empty substring (it would match every message)")
		}
	}
	if len(ms.Message) == 0 {
		return nil, b.errf(at+".message", "empty list")
	}
	return append(out, driver.OnMessage(ms.Message...)), nil
}

// matchFlags adds the timeout, canceled and retryable criteria; false
// asks for the error not to be one.
func matchFlags(ms *MatchSpec, out []driver.Match) []driver.Match {
	flag := func(p *bool, m driver.Match) {
		if p == nil {
			return
		}
		if *p {
			out = append(out, m)
		} else {
			out = append(out, driver.Not(m))
		}
	}
	flag(ms.Timeout, driver.Timeout())
	flag(ms.Canceled, driver.Canceled())
	if ms.Retryable != nil {
		out = append(out, driver.Retryable(*ms.Retryable))
	}
	return out
}

// matchFinish adds the finish reasons' criterion.
func (b *builder) matchFinish(at string, ms *MatchSpec, out []driver.Match) ([]driver.Match, error) {
	if ms.Finish == nil {
		return out, nil
	}
	if len(ms.Finish) == 0 {
		return nil, b.errf(at+".finish", "empty list")
	}
	rs := make([]abi.Reason, len(ms.Finish))
	for j, s := range ms.Finish {
		r, ok := abi.ParseReason(s)
		if !ok {
			return nil, b.errf(fmt.Sprintf("%s.finish[%d]", at, j), "unknown finish reason %q", s)
		}
		rs[j] = r
	}
	return append(out, driver.OnFinish(rs...)), nil
}

func classList() string {
	var names []string
	for c := abi.ClassUnknown; ; c++ {
		s := c.String()
		if _, ok := abi.ParseErrorClass(s); !ok || (s == "unknown" && c != abi.ClassUnknown) {
			break
		}
		names = append(names, s)
	}
	return strings.Join(names, ", ")
}

// gated is a Wasm condition used as a matcher: any opinion it gives counts
// as a match for the rule's own action.
type gated struct {
	plugin *host.Plugin
	rule   *driver.Rule
}

func (g *gated) Decide(ctx context.Context, a *driver.Attempt) (driver.Decision, error) {
	d, err := g.plugin.Decide(ctx, a)
	if err != nil || d.Action == abi.ActionNone {
		return driver.Decision{}, err
	}
	return g.rule.Decide(ctx, a)
}

// FailPolicy is the plugin's.
func (g *gated) FailPolicy() abi.FailPolicy { return g.plugin.FailPolicy() }

// retryFloor is a plugin condition that decides its own action, in a
// policy with a default backoff (Options.DefaultBackoff): a retry it
// decides without a delay waits the default's.
type retryFloor struct {
	plugin *host.Plugin
	delay  time.Duration
}

func (r *retryFloor) Decide(ctx context.Context, a *driver.Attempt) (driver.Decision, error) {
	d, err := r.plugin.Decide(ctx, a)
	if err == nil && d.Action == abi.ActionRetry && d.Delay == 0 {
		d.Delay = r.delay
	}
	return d, err
}

// FailPolicy is the plugin's.
func (r *retryFloor) FailPolicy() abi.FailPolicy { return r.plugin.FailPolicy() }

// switchesModel reports whether a rule may move a request to another
// model: a switch rule, or a plugin rule that decides its own action. A
// policy without one has nowhere to send a request while its model cools
// down, so a default cooldown would only reroute it to a model no rule
// names.
func switchesModel(rules []RuleSpec) bool {
	for _, r := range rules {
		if r.Action == "switch" || (r.Plugin != nil && r.Action == "") {
			return true
		}
	}
	return false
}

// hedgesByDefault reports whether Options.DefaultHedge applies to a file
// under the given rules: one that may switch models, and another model to
// switch to. In a file of one model a hedge could only send the same
// request twice to it, which the default does not do.
func hedgesByDefault(f *File, rules []RuleSpec) bool {
	return len(f.Models) > 1 && switchesModel(rules)
}
