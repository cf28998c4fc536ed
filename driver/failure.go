package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// ErrMaxAttempts is the cause recorded in a [RetryError] when a rule chose a
// next attempt but the request had already made as many attempts as
// [WithMaxAttempts] allows.
var ErrMaxAttempts = errors.New("retryhost: total attempt cap reached")

// ErrGaveUp is the cause recorded in a [RetryError] when a condition answered
// [abi.ActionGiveUp].
var ErrGaveUp = errors.New("retryhost: a condition gave up")

// DeadlineError reports that one of the driver's own deadlines fired: the
// per-attempt timeout, the request's overall budget, or (in the stream
// driver) the first-content and gap deadlines. The driver installs it as the
// cause of the context it hands to an attempt (context.WithTimeoutCause), so
// context.Cause tells it apart from the caller's own deadline or
// cancellation.
//
// It matches context.DeadlineExceeded with errors.Is, and the [Timeout]
// condition matches it. A DeadlineError is immutable and safe to share.
type DeadlineError struct {
	Deadline abi.Deadline // which deadline fired
	Limit    time.Duration
}

func (e *DeadlineError) Error() string {
	return fmt.Sprintf("retryhost: %s deadline of %v exceeded", e.Deadline, e.Limit)
}

// Is makes errors.Is(err, context.DeadlineExceeded) true.
func (e *DeadlineError) Is(target error) bool { return target == context.DeadlineExceeded }

// Timeout reports true, like net.Error, so code that checks for timeouts
// the usual way recognises it.
func (e *DeadlineError) Timeout() bool { return true }

// Recoverable reports whether a failed attempt with this deadline may fail
// over: the request's total budget never is.
func (e *DeadlineError) Recoverable() bool { return e.Deadline != abi.DeadlineTotal }

// AttemptRecord is one finished attempt of a request, as kept in a
// [RetryError] and handed to the outcome callbacks. It is a plain value.
type AttemptRecord struct {
	Number int   // 1-based
	Model  Model // the model the attempt ran on
	// Err is the attempt's error; nil for an attempt that returned a result
	// (a result a rule rejected, or the successful last attempt).
	Err error
	// Finish is the result's finish reason (result attempts only).
	Finish   FinishReason
	Class    abi.ErrorClass
	Status   int
	Duration time.Duration
	// Overrides are the request overrides the attempt was sent with (the
	// matched rule's, merged with the OnRetry callback's); zero for the
	// first attempt and for attempts no rule or callback changed.
	Overrides Overrides
	// ConditionErr holds what went wrong with the conditions asked about
	// this attempt and treated as no opinion (fail-open): a condition's
	// error or panic, or an *[UnknownModelError] for a switch to a model
	// the Runner does not know (errors.Join when several). Nil when every
	// condition answered.
	ConditionErr error
}

// ErrUnknownModel matches (errors.Is) an [*UnknownModelError].
var ErrUnknownModel = errors.New("retryhost: a condition switched to an unknown model")

// UnknownModelError reports that a condition (a Wasm plugin, or any
// Condition that names its target by key) chose to switch to a model key
// the Runner does not know: declare that model with [WithModels]. It is a
// failure of the condition: with a fail-closed condition it fails the
// request; otherwise the condition counts as no opinion, the driver logs
// it at Warn, keeps it in the attempt's [AttemptRecord.ConditionErr] (and
// the observer's AttemptEndEvent), and, when no other rule matches, makes
// it the Cause of the request's *[RetryError]. It is never silent.
type UnknownModelError struct {
	Condition int    // the condition's index in the Runner's rules
	Model     string // the key it named
}

func (e *UnknownModelError) Error() string {
	return fmt.Sprintf("retryhost: condition %d switched to unknown model %q (declare it with WithModels)", e.Condition, e.Model)
}

// Is makes errors.Is(err, ErrUnknownModel) true.
func (e *UnknownModelError) Is(target error) bool { return target == ErrUnknownModel }

func (r *AttemptRecord) describe(b *strings.Builder) {
	fmt.Fprintf(b, "#%d %s (%v): ", r.Number, r.Model.Key(), r.Duration)
	switch {
	case r.Err != nil:
		b.WriteString(r.Err.Error())
	case r.Finish.Raw != "" && r.Finish.Raw != r.Finish.Unified.String():
		fmt.Fprintf(b, "result rejected, finish %s (%s)", r.Finish.Unified, r.Finish.Raw)
	default:
		fmt.Fprintf(b, "result rejected, finish %s", r.Finish.Unified)
	}
}

// RetryError is the final error of a request that made more than one
// attempt, or that stopped for a reason of its own (a budget, a cap, a
// give-up, the caller's cancellation) after its first failure. A request
// whose only attempt failed and matched no rule returns that attempt's raw
// error instead, so a driver with no matching rule is transparent.
//
// errors.Is and errors.As see every attempt's error, newest first, and then
// the Cause: errors.As(err, &providerErr) finds the *ProviderError of the
// newest attempt that had one (what finally failed, as failsafe-go's
// LastError), an older attempt's only when no newer one matches, and
// errors.Is(err, context.Canceled) reports a cancellation, also one with a
// cause (context.WithCancelCause), whose cause errors.Is finds as well.
// Attempts still lists every attempt oldest first; [RetryError.Last] is
// the newest attempt's error.
//
// A RetryError is not modified after it is returned; its slices are owned
// by the error.
type RetryError struct {
	// Attempts lists every attempt, oldest first.
	Attempts []AttemptRecord
	// Cause says why the request stopped when it was not "no rule
	// matched": ErrMaxAttempts, ErrGaveUp, a *DeadlineError for the total
	// budget, the caller's context cause, or a fail-closed condition's error.
	Cause error
}

func (e *RetryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "retryhost: %d attempt", len(e.Attempts))
	if len(e.Attempts) != 1 {
		b.WriteByte('s')
	}
	b.WriteString(" failed")
	if e.Cause != nil {
		b.WriteString(" (stopped: ")
		b.WriteString(e.Cause.Error())
		b.WriteByte(')')
	}
	for i := range e.Attempts {
		b.WriteString("; ")
		e.Attempts[i].describe(&b)
	}
	return b.String()
}

// Unwrap returns every attempt's error, newest first, then the Cause, so
// that errors.As and errors.Is find what finally failed before what failed
// earlier.
func (e *RetryError) Unwrap() []error {
	errs := make([]error, 0, len(e.Attempts)+1)
	for i := len(e.Attempts) - 1; i >= 0; i-- {
		if e.Attempts[i].Err != nil {
			errs = append(errs, e.Attempts[i].Err)
		}
	}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// Last returns the last attempt's error, or nil if it returned a result.
func (e *RetryError) Last() error {
	if len(e.Attempts) == 0 {
		return nil
	}
	return e.Attempts[len(e.Attempts)-1].Err
}

// causeOf explains why ctx is done: its cause (context.Cause), wrapped so
// that errors.Is also finds ctx.Err() when the cause does not match it
// already. A caller that cancels with context.WithCancelCause gets an error
// that is both context.Canceled and its cause; one that cancels without a
// cause, or whose cause already matches (a *DeadlineError is
// context.DeadlineExceeded), gets the cause as is. Nil when ctx is not done.
func causeOf(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, err) {
		if cause == nil {
			return err
		}
		return cause
	}
	return &causeError{err: err, cause: cause}
}

// causeError is a context's error with the cause it was canceled with.
type causeError struct{ err, cause error }

func (e *causeError) Error() string   { return e.err.Error() + ": " + e.cause.Error() }
func (e *causeError) Unwrap() []error { return []error{e.cause, e.err} }

// Is makes two explanations of the same ended context equal, so that the
// lone attempt that failed on the caller's cancellation is returned as is.
func (e *causeError) Is(target error) bool {
	t, ok := target.(*causeError)
	return ok && t.err == e.err && t.cause == e.cause
}
