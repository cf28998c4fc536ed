// Command errmatch is an error-matching condition plugin: an ordered list
// of rules over the failed attempt (HTTP status codes and ranges, error
// class, message pattern, model, attempt number) each with an action
// (retry with delay, backoff, max attempts and Retry-After; switch to
// another model; give up). The first rule that matches decides; when none
// does, the plugin has no opinion. Its JSON config is documented in
// README.md.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/sdk"
	"github.com/retryhost/retryhost/plugins/sdk/condition"
)

func init() {
	condition.Register(func(raw []byte) (condition.Decider, error) { return parse(raw) })
}

func main() {}

// config is the JSON config.
type config struct {
	Rules []ruleConfig `json:"rules"`
	// Fail is "open" (default: a failure of the plugin counts as no
	// opinion) or "closed" (it fails the request).
	Fail string `json:"fail"`
}

type ruleConfig struct {
	// Match: every field given must match (AND); within a list, any item
	// (OR). A rule with no match field matches every failed attempt.
	Status     []statusRange `json:"status"`      // 429, "500-599"
	Class      []string      `json:"class"`       // "rate-limit", "timeout", …
	Message    string        `json:"message"`     // RE2 pattern on the error message
	ErrorName  string        `json:"error_name"`  // RE2 pattern on the error's type name
	Model      string        `json:"model"`       // path.Match glob on the attempt's model, "openai/*"
	MinAttempt int           `json:"min_attempt"` // the attempt number is at least this
	MaxAttempt int           `json:"max_attempt"` // the attempt number is at most this (0 = any)

	// Action: exactly one.
	Retry  *actionConfig `json:"retry"`
	Switch *actionConfig `json:"switch"`
	GiveUp bool          `json:"give_up"`
}

type actionConfig struct {
	Model       string  `json:"model"`        // switch target (switch only, required)
	Delay       string  `json:"delay"`        // Go duration, "500ms"
	Backoff     float64 `json:"backoff"`      // factor per earlier attempt on the target
	MaxAttempts int     `json:"max_attempts"` // attempts on the target, counting earlier ones
	Timeout     string  `json:"timeout"`      // the next attempt's own deadline
	RetryAfter  bool    `json:"retry_after"`  // wait the server's Retry-After when it sent one
}

// statusRange is a status code (429 or "429") or a range ("500-599").
type statusRange struct{ lo, hi int }

func (s *statusRange) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	var txt string
	switch x := v.(type) {
	case float64:
		txt = strconv.FormatFloat(x, 'f', -1, 64)
	case string:
		txt = x
	default:
		return fmt.Errorf("status %s: want a code or a \"lo-hi\" range", b)
	}
	lo, hi, isRange := strings.Cut(txt, "-")
	var err1, err2 error
	s.lo, err1 = strconv.Atoi(strings.TrimSpace(lo))
	s.hi = s.lo
	if isRange {
		s.hi, err2 = strconv.Atoi(strings.TrimSpace(hi))
	}
	if err1 != nil || err2 != nil || s.lo < 100 || s.hi > 999 || s.lo > s.hi {
		return fmt.Errorf("status %s: want a code 100-999 or a \"lo-hi\" range", b)
	}
	return nil
}

// rule is a compiled rule.
type rule struct {
	status    []statusRange
	classes   []abi.ErrorClass
	message   *regexp.Regexp
	errorName *regexp.Regexp
	model     string
	min, max  int
	decision  abi.Decision
}

// rules is the plugin's condition: the compiled list, immutable.
type rules struct {
	list   []rule
	policy abi.TransformPolicy
}

func parse(raw []byte) (*rules, error) {
	var c config
	if err := sdk.DecodeJSON(raw, &c); err != nil {
		return nil, err
	}
	if len(c.Rules) == 0 {
		return nil, errors.New("config: no rules")
	}
	rs := &rules{}
	switch c.Fail {
	case "", "open":
	case "closed":
		rs.policy.Fail = abi.FailClosed
	default:
		return nil, errors.New(`config: fail must be "open" or "closed"`)
	}
	for i, rc := range c.Rules {
		r, err := compile(&rc)
		if err != nil {
			return nil, fmt.Errorf("config: rule %d: %w", i, err)
		}
		rs.list = append(rs.list, r)
	}
	return rs, nil
}

func compile(rc *ruleConfig) (rule, error) {
	r := rule{status: rc.Status, model: rc.Model, min: rc.MinAttempt, max: rc.MaxAttempt}
	for _, name := range rc.Class {
		c, ok := abi.ParseErrorClass(name)
		if !ok || c == abi.ClassNone {
			return r, fmt.Errorf("unknown class %q", name)
		}
		r.classes = append(r.classes, c)
	}
	var err error
	if rc.Message != "" {
		if r.message, err = regexp.Compile(rc.Message); err != nil {
			return r, fmt.Errorf("message: %w", err)
		}
	}
	if rc.ErrorName != "" {
		if r.errorName, err = regexp.Compile(rc.ErrorName); err != nil {
			return r, fmt.Errorf("error_name: %w", err)
		}
	}
	if rc.Model != "" {
		if _, err := path.Match(rc.Model, ""); err != nil {
			return r, fmt.Errorf("model: %w", err)
		}
	}
	if rc.MinAttempt < 0 || rc.MaxAttempt < 0 || (rc.MaxAttempt > 0 && rc.MaxAttempt < rc.MinAttempt) {
		return r, errors.New("min_attempt/max_attempt: want 0 <= min <= max")
	}
	n := 0
	if rc.Retry != nil {
		n++
		r.decision, err = decision(abi.ActionRetry, rc.Retry)
	}
	if rc.Switch != nil {
		n++
		r.decision, err = decision(abi.ActionSwitch, rc.Switch)
	}
	if rc.GiveUp {
		n++
		r.decision = abi.Decision{Action: abi.ActionGiveUp}
	}
	if n != 1 {
		return r, errors.New("want exactly one of retry, switch, give_up")
	}
	return r, err
}

func decision(a abi.Action, ac *actionConfig) (abi.Decision, error) {
	d := abi.Decision{Action: a, Model: ac.Model, BackoffFactor: ac.Backoff,
		MaxAttempts: ac.MaxAttempts, UseRetryAfter: ac.RetryAfter}
	switch {
	case a == abi.ActionSwitch && ac.Model == "":
		return d, errors.New("switch: model is required")
	case a == abi.ActionRetry && ac.Model != "":
		return d, errors.New("retry: model is for switch")
	case ac.Backoff < 0:
		return d, errors.New("backoff must not be negative")
	case ac.MaxAttempts < 0:
		return d, errors.New("max_attempts must not be negative")
	}
	var err error
	if d.Delay, err = duration("delay", ac.Delay); err != nil {
		return d, err
	}
	d.Timeout, err = duration("timeout", ac.Timeout)
	return d, err
}

func duration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s: want a non-negative Go duration such as \"500ms\"", field)
	}
	return d, nil
}

// Policy declares the fail policy.
func (rs *rules) Policy() abi.TransformPolicy { return rs.policy }

// Decide returns the first matching rule's decision, or no opinion. A
// result attempt (no error) is never matched: see the finish plugin.
func (rs *rules) Decide(a *abi.Attempt) (abi.Decision, error) {
	if a.Class == abi.ClassNone {
		return abi.Decision{}, nil
	}
	for i := range rs.list {
		if rs.list[i].matches(a) {
			return rs.list[i].decision, nil
		}
	}
	return abi.Decision{}, nil
}

func (r *rule) matches(a *abi.Attempt) bool {
	if len(r.status) > 0 {
		ok := false
		for _, s := range r.status {
			ok = ok || (s.lo <= a.Status && a.Status <= s.hi)
		}
		if !ok {
			return false
		}
	}
	if len(r.classes) > 0 {
		ok := false
		for _, c := range r.classes {
			ok = ok || c == a.Class
		}
		if !ok {
			return false
		}
	}
	if a.Number < r.min || (r.max > 0 && a.Number > r.max) {
		return false
	}
	if r.model != "" {
		if ok, _ := path.Match(r.model, a.Model); !ok {
			return false
		}
	}
	if r.message != nil && !r.message.MatchString(a.Message) {
		return false
	}
	if r.errorName != nil && !r.errorName.MatchString(a.ErrorName) {
		return false
	}
	return true
}
