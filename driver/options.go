package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Option configures a [Runner] at [New]. An Option is a plain function value,
// safe to reuse for several Runners.
type Option func(*config) error

// Jitter says how a backoff delay is randomised, so that many clients
// failing together do not retry together. It is a plain value.
type Jitter uint8

const (
	// JitterNone waits the computed delay exactly. The default.
	JitterNone Jitter = iota
	// JitterFull waits a uniform random duration in [0, delay).
	JitterFull
	// JitterEqual waits delay/2 plus a uniform random duration in [0, delay/2).
	JitterEqual
)

// Backoff holds the request-wide backoff settings. Rules set their own
// delay and factor; these are the defaults for rules (and Wasm decisions)
// that leave them zero, plus the cap and jitter that no rule can escape.
// It is a plain value; the Runner keeps its own copy.
type Backoff struct {
	// Delay is the base wait before an attempt chosen by a rule that sets
	// none. Default 0: no wait.
	Delay time.Duration
	// Factor multiplies the delay per earlier wait for the same target model
	// in the request. Default 1 (constant); values below 1 are an error.
	Factor float64
	// MaxDelay caps a computed delay (before jitter). Default 0: no cap.
	// A server's Retry-After is capped by WithRetryAfterCap instead.
	MaxDelay time.Duration
	// Jitter randomises computed delays (not Retry-After waits). Default JitterNone.
	Jitter Jitter
	// Seed, when not zero, makes the jitter deterministic (for tests and
	// reproducible simulations). Default 0: seeded randomly.
	Seed uint64
}

// Sticky is the sticky fallback policy: after a request succeeds on a model
// other than the one it started on, later requests start on that model
// for a while. The zero value is the default, "after-request": every
// request starts on the base model.
//
// Sticky state is shared by the requests of one Runner (and of the Runners
// that share its [State] and state key, [WithStateKey]), but each request
// reads it once, when it starts, and keeps its own current model: a request
// never redirects another that is in flight. A Sticky is an immutable value.
type Sticky struct {
	kind     stickyKind
	requests int
	period   time.Duration
}

type stickyKind uint8

const (
	stickyNone stickyKind = iota // after-request
	stickyCount
	stickyPeriod
)

// StickyRequests keeps a successful fallback as the start model of the
// next n requests ("after-n-requests"); n must be at least 1.
func StickyRequests(n int) Sticky { return Sticky{kind: stickyCount, requests: n} }

// StickyFor keeps a successful fallback as the start model of the requests
// that start within d of its success ("after-d-seconds"); d must be positive.
func StickyFor(d time.Duration) Sticky { return Sticky{kind: stickyPeriod, period: d} }

// ParseSticky reads the reference's spelling: "after-request",
// "after-N-requests" or "after-N-seconds".
func ParseSticky(s string) (Sticky, error) {
	if s == "after-request" {
		return Sticky{}, nil
	}
	if rest, ok := strings.CutPrefix(s, "after-"); ok {
		if num, unit, ok := strings.Cut(rest, "-"); ok {
			n, err := strconv.Atoi(num)
			if err == nil && n > 0 {
				switch unit {
				case "requests":
					return StickyRequests(n), nil
				case "seconds":
					return StickyFor(time.Duration(n) * time.Second), nil
				}
			}
		}
	}
	return Sticky{}, fmt.Errorf("retryhost: unknown sticky policy %q (want after-request, after-N-requests or after-N-seconds)", s)
}

// String returns the policy's name, such as "after-3-requests" or "after-30s".
func (s Sticky) String() string {
	switch s.kind {
	case stickyPeriod:
		return "after-" + s.period.String()
	case stickyCount:
		return fmt.Sprintf("after-%d-requests", s.requests)
	}
	return "after-request"
}

func (s Sticky) validate() error {
	if (s.kind == stickyCount && s.requests < 1) || (s.kind == stickyPeriod && s.period <= 0) {
		return fmt.Errorf("retryhost: invalid sticky policy %s: need a positive count or duration", s)
	}
	return nil
}

// RetryInfo is what the OnRetry callback receives before an attempt other
// than the first. It is valid only during the callback.
type RetryInfo struct {
	// Failed is the attempt that failed (or whose result a rule rejected);
	// the driver reuses it, so copy what you keep.
	Failed *Attempt
	Next   Model         // the model the next attempt runs on
	Number int           // the next attempt's number
	Delay  time.Duration // the wait that was just observed
	// Overrides are the overrides the next attempt will be sent with
	// unless the callback returns its own (the matched rule's); the
	// callback's replace them field by field.
	Overrides Overrides
	// FailedOverrides are the overrides the failed attempt was sent with.
	FailedOverrides Overrides
}

// Outcome is what the OnSuccess and OnFailure callbacks receive. Its
// Attempts slice is shared with the request's *RetryError: read it, do not
// modify it.
type Outcome struct {
	// Model is the model of the last attempt: the one that answered on success.
	Model Model
	// Attempts lists every attempt, oldest first, including the last.
	Attempts []AttemptRecord
	// Err is the error the caller receives (OnFailure only).
	Err     error
	Elapsed time.Duration
}

type config struct {
	rules          []Condition
	models         []Model
	backoff        Backoff
	maxAttempts    int
	budget         time.Duration
	attemptTimeout time.Duration
	sticky         Sticky
	retryAfterCap  time.Duration
	onError        func(context.Context, *Attempt)
	onRetry        func(context.Context, RetryInfo) *Overrides
	onSuccess      func(context.Context, Outcome)
	onFailure      func(context.Context, Outcome)
	disabled       func() bool
	logger         *slog.Logger
	observer       Observer
	cooldown       *Cooldown
	retryBudget    *RetryBudget
	state          State
	stateKey       string
	now            func() time.Time
	sleep          func(context.Context, time.Duration) error
}

// WithRules sets the conditions asked, in order, after each failed attempt
// (native [Rule]s and Wasm conditions alike). The first that names a model
// with attempts left wins; a matching rule whose model is exhausted falls
// through to the next. Calling it again appends. Default: none, which
// means "never retry": the driver then adds only deadlines and callbacks.
func WithRules(rules ...Condition) Option {
	return func(c *config) error {
		for i, r := range rules {
			if r == nil {
				return fmt.Errorf("retryhost: rule %d is nil", len(c.rules)+i)
			}
		}
		c.rules = append(c.rules, rules...)
		return nil
	}
}

// WithModels declares models that conditions may name by key (Wasm
// conditions answer with a key, not a Model). Models named by native rules
// and the base model are known without it. Two different models with the
// same key are an error.
func WithModels(models ...Model) Option {
	return func(c *config) error {
		c.models = append(c.models, models...)
		return nil
	}
}

// WithBackoff sets the request-wide backoff defaults, cap and jitter (see
// [Backoff]). Default: no delay, no cap, no jitter.
func WithBackoff(b Backoff) Option {
	return func(c *config) error {
		switch {
		case b.Delay < 0 || b.MaxDelay < 0:
			return fmt.Errorf("retryhost: negative backoff delay (%v, max %v)", b.Delay, b.MaxDelay)
		case b.Factor != 0 && !(b.Factor >= 1):
			return fmt.Errorf("retryhost: backoff factor %v is below 1", b.Factor)
		case b.Jitter > JitterEqual:
			return fmt.Errorf("retryhost: unknown jitter %d", b.Jitter)
		}
		c.backoff = b
		return nil
	}
}

// WithMaxAttempts caps the attempts of one request across all models,
// whatever the rules say (a guard against conditions that keep switching).
// Default 10.
func WithMaxAttempts(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("retryhost: max attempts %d is below 1", n)
		}
		c.maxAttempts = n
		return nil
	}
}

// WithBudget bounds the wall-clock time of one request, attempts and
// waits together. When it runs out the request fails with a *DeadlineError
// for abi.DeadlineTotal, which no rule can recover; a backoff that would
// end past it is not started. Default 0: no budget.
func WithBudget(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("retryhost: negative budget %v", d)
		}
		c.budget = d
		return nil
	}
}

// WithAttemptTimeout sets the default deadline of each attempt; a rule's
// [Rule.Timeout] (or a decision's Timeout) replaces it for the attempt it
// chooses. Every attempt gets a fresh deadline. Default 0: none.
func WithAttemptTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("retryhost: negative attempt timeout %v", d)
		}
		c.attemptTimeout = d
		return nil
	}
}

// WithSticky sets the sticky fallback policy. Default: after-request (no
// stickiness).
func WithSticky(s Sticky) Option {
	return func(c *config) error {
		if err := s.validate(); err != nil {
			return err
		}
		c.sticky = s
		return nil
	}
}

// WithRetryAfterCap caps the wait a server's Retry-After may impose.
// Default 60 s.
func WithRetryAfterCap(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("retryhost: negative retry-after cap %v", d)
		}
		c.retryAfterCap = d
		return nil
	}
}

// WithOnError sets a callback fired for every failed attempt (not for a
// result a rule rejects), before the rules are asked. It runs synchronously
// on the request's goroutine; it must be fast and safe for concurrent use.
// The attempt is only valid during the call.
func WithOnError(f func(ctx context.Context, a *Attempt)) Option {
	return func(c *config) error { c.onError = f; return nil }
}

// WithOnRetry sets a callback fired before every attempt but the first,
// after the backoff wait. It may return overrides for that attempt, which
// take precedence over the rule's. It runs synchronously on the request's
// goroutine; it must be safe for concurrent use.
func WithOnRetry(f func(ctx context.Context, info RetryInfo) *Overrides) Option {
	return func(c *config) error { c.onRetry = f; return nil }
}

// WithOnSuccess sets a callback fired once when a request succeeds. Exactly
// one of OnSuccess and OnFailure fires per request (none when disabled).
func WithOnSuccess(f func(ctx context.Context, o Outcome)) Option {
	return func(c *config) error { c.onSuccess = f; return nil }
}

// WithOnFailure sets a callback fired once when a request fails, with the
// error the caller receives.
func WithOnFailure(f func(ctx context.Context, o Outcome)) Option {
	return func(c *config) error { c.onFailure = f; return nil }
}

// WithDisabled turns retrying off while f returns true, evaluated once per
// request: the call then runs once on the base model, with its deadlines
// but without rules, callbacks or sticky state (which it neither reads nor
// updates). Default: never disabled.
func WithDisabled(f func() bool) Option {
	return func(c *config) error { c.disabled = f; return nil }
}

// WithLogger sets where the driver logs what it skips (an unknown model key
// from a condition, a condition's own failure). Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("retryhost: nil logger")
		}
		c.logger = l
		return nil
	}
}

// withClock replaces the clock and the backoff sleep, for tests.
func withClock(now func() time.Time, sleep func(context.Context, time.Duration) error) Option {
	return func(c *config) error { c.now, c.sleep = now, sleep; return nil }
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return causeOf(ctx)
	}
}
