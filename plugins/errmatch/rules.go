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
	"github.com/retryhost/retryhost/plugins/internal/cfgrule"
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
	Model       string         `json:"model"`        // switch target (switch only, required)
	Delay       string         `json:"delay"`        // Go duration, "500ms"
	Backoff     cfgrule.Factor `json:"backoff"`      // factor per earlier attempt on the target
	MaxAttempts int            `json:"max_attempts"` // attempts on the target, counting earlier ones
	Timeout     string         `json:"timeout"`      // the next attempt's own deadline
	RetryAfter  bool           `json:"retry_after"`  // wait the server's Retry-After when it sent one
}

// statusRange is a status code (429 or "429") or a range ("500-599").
type statusRange struct{ lo, hi int }

func (s *statusRange) UnmarshalJSON(b []byte) error {
	bad := fmt.Errorf("status %s: want a code 100-999 or a \"lo-hi\" range", b)
	var txt string
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &txt); err != nil {
			return bad
		}
		// "429" or "500-599": three digits each, nothing else (the C
		// build's rule)
		lo, hi, isRange := strings.Cut(txt, "-")
		if !digits3(lo) || isRange && !digits3(hi) {
			return bad
		}
		s.lo, _ = strconv.Atoi(lo)
		s.hi = s.lo
		if isRange {
			s.hi, _ = strconv.Atoi(hi)
		}
	} else {
		// a JSON integer: no fraction, no exponent
		n, err := strconv.Atoi(string(b))
		if err != nil {
			return bad
		}
		s.lo, s.hi = n, n
	}
	if s.lo < 100 || s.hi > 999 || s.lo > s.hi {
		return bad
	}
	return nil
}

func digits3(s string) bool {
	return len(s) == 3 && s[0] >= '0' && s[0] <= '9' && s[1] >= '0' && s[1] <= '9' && s[2] >= '0' && s[2] <= '9'
}

// The limits the C build has too (plugins/README.md), so both builds
// accept the same configs; the regex limits are cfgrule's.
const (
	maxRules   = 64
	maxStatus  = 32      // items of "status"
	maxClasses = 16      // items of "class"
	maxStr     = 256     // bytes of a glob or a model
	maxCount   = 1000000 // attempts, attempt numbers
)

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
	if err := cfgrule.Size(raw); err != nil {
		return nil, err
	}
	if err := sdk.DecodeJSON(raw, &c); err != nil {
		return nil, err
	}
	if len(c.Rules) == 0 {
		return nil, errors.New("config: no rules")
	}
	if len(c.Rules) > maxRules {
		return nil, errors.New(`config: "rules": more than 64 rules`)
	}
	rs := &rules{}
	switch c.Fail {
	case "", "open":
	case "closed":
		rs.policy.Fail = abi.FailClosed
	default:
		return nil, errors.New(`config: fail must be "open" or "closed"`)
	}
	var pats cfgrule.Patterns // the regex limits are per config
	for i, rc := range c.Rules {
		r, err := compile(&rc, &pats)
		if err != nil {
			return nil, fmt.Errorf("config: rule %d: %w", i, err)
		}
		rs.list = append(rs.list, r)
	}
	return rs, nil
}

func compile(rc *ruleConfig, pats *cfgrule.Patterns) (rule, error) {
	r := rule{status: rc.Status, model: rc.Model, min: rc.MinAttempt, max: rc.MaxAttempt}
	if len(rc.Status) > maxStatus {
		return r, errors.New("status: more than 32 items")
	}
	if len(rc.Class) > maxClasses {
		return r, errors.New("class: more than 16 items")
	}
	for _, name := range rc.Class {
		c, ok := abi.ParseErrorClass(name)
		if !ok || c == abi.ClassNone {
			return r, fmt.Errorf("unknown class %q", name)
		}
		r.classes = append(r.classes, c)
	}
	var err error
	if r.message, err = pattern(pats, rc.Message); err != nil {
		return r, fmt.Errorf("message: %w", err)
	}
	if r.errorName, err = pattern(pats, rc.ErrorName); err != nil {
		return r, fmt.Errorf("error_name: %w", err)
	}
	if len(rc.Model) > maxStr {
		return r, errors.New("model: a glob is longer than 256 bytes")
	}
	if rc.Model != "" {
		if _, err := path.Match(rc.Model, ""); err != nil {
			return r, fmt.Errorf("model: %w", err)
		}
	}
	if rc.MinAttempt < 0 || rc.MaxAttempt < 0 || rc.MinAttempt > maxCount || rc.MaxAttempt > maxCount {
		return r, errors.New("min_attempt/max_attempt: want an integer 0-1000000")
	}
	if rc.MaxAttempt > 0 && rc.MaxAttempt < rc.MinAttempt {
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
	d := abi.Decision{Action: a, Model: ac.Model, BackoffFactor: float64(ac.Backoff),
		MaxAttempts: ac.MaxAttempts, UseRetryAfter: ac.RetryAfter}
	switch {
	case a == abi.ActionSwitch && ac.Model == "":
		return d, errors.New("switch: model is required")
	case a == abi.ActionRetry && ac.Model != "":
		return d, errors.New("retry: model is for switch")
	case ac.Backoff < 0:
		return d, errors.New("backoff must not be negative")
	case ac.MaxAttempts < 0 || ac.MaxAttempts > maxCount:
		return d, errors.New("max_attempts: want an integer 0-1000000")
	case len(ac.Model) > maxStr:
		return d, errors.New("model: longer than 256 bytes")
	}
	var err error
	if d.Delay, err = duration("delay", ac.Delay); err != nil {
		return d, err
	}
	d.Timeout, err = duration("timeout", ac.Timeout)
	return d, err
}

func duration(field, s string) (time.Duration, error) {
	d, err := cfgrule.Duration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: want a non-negative Go duration such as \"500ms\"", field)
	}
	return d, nil
}

// pattern compiles a message or error_name pattern ("" is none) after
// checking it is in the RE2 subset the C build implements.
func pattern(pats *cfgrule.Patterns, p string) (*regexp.Regexp, error) {
	if p == "" {
		return nil, nil
	}
	if err := pats.Check(p); err != nil {
		return nil, err
	}
	return regexp.Compile(p)
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
