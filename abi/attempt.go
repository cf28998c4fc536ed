package abi

import "time"

// ErrorClass is a coarse, language-neutral classification of why an attempt
// failed. Conditions, Wasm or Go, branch on it instead of on Go error types.
// The zero value, ClassNone, means the attempt did not fail with an error (a
// result attempt).
type ErrorClass uint8

// The error classes. Values are part of ABI v1; new classes are appended.
const (
	ClassNone          ErrorClass = 0
	ClassUnknown       ErrorClass = 1  // an error the driver could not classify
	ClassTimeout       ErrorClass = 2  // a driver deadline fired (see Attempt.Deadline)
	ClassCanceled      ErrorClass = 3  // the caller canceled
	ClassRateLimit     ErrorClass = 4  // HTTP 429 or the provider's rate-limit error
	ClassOverloaded    ErrorClass = 5  // HTTP 529, 503 or the provider's overloaded error
	ClassServer        ErrorClass = 6  // other 5xx
	ClassClient        ErrorClass = 7  // other 4xx (bad request, not found…)
	ClassAuth          ErrorClass = 8  // 401, 403
	ClassContextLength ErrorClass = 9  // the prompt does not fit the model's context
	ClassContentFilter ErrorClass = 10 // the provider's content filter rejected the request or output
	ClassRefusal       ErrorClass = 11 // the model refused (a transform's refusal verdict or a refusal stop)
	ClassNetwork       ErrorClass = 12 // connection refused, reset or cut
	ClassTransform     ErrorClass = 13 // a transform failed the attempt with an error other than a refusal
	ClassPlugin        ErrorClass = 14 // a plugin failed (trap, timeout) and its policy is fail-closed

	classCount = 15
)

var classNames = [classCount]string{
	"none", "unknown", "timeout", "canceled", "rate-limit", "overloaded", "server", "client",
	"auth", "context-length", "content-filter", "refusal", "network", "transform", "plugin",
}

// String returns the class's name, such as "rate-limit".
func (c ErrorClass) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "unknown"
}

// ParseErrorClass maps a name back to a class; unknown names give ClassUnknown and false.
func ParseErrorClass(s string) (ErrorClass, bool) {
	for i, n := range classNames {
		if n == s {
			return ErrorClass(i), true
		}
	}
	return ClassUnknown, false
}

// Deadline names a driver deadline.
type Deadline uint8

// The deadlines the driver enforces. Values are part of ABI v1.
const (
	DeadlineNone         Deadline = 0
	DeadlineFirstContent Deadline = 1 // no content within the limit from attempt start (recoverable)
	DeadlineAttempt      Deadline = 2 // the attempt as a whole ran too long (recoverable before commit)
	DeadlineTotal        Deadline = 3 // the request's overall budget ran out (never recoverable)
	DeadlineGap          Deadline = 4 // too long between two content parts (after commit: truncates)
)

var deadlineNames = [...]string{"none", "first-content", "attempt", "total", "gap"}

// String returns the deadline's name, such as "first-content".
func (d Deadline) String() string {
	if int(d) < len(deadlineNames) {
		return deadlineNames[d]
	}
	return "unknown"
}

// Attempt describes one finished attempt to a condition. It is what a Wasm
// condition receives (encoded by [EncodeAttempt]) and what a Go condition
// receives as is.
//
// An error attempt has Class != ClassNone; a result attempt (the call
// succeeded but a result condition may still judge it, for example on its
// finish reason) has Class == ClassNone and Finish set.
type Attempt struct {
	Number  int           // 1-based attempt number within the request
	Model   string        // key of the model this attempt ran on, "provider/model"
	Elapsed time.Duration // time since the request started
	// Duration is how long this attempt itself ran.
	Duration time.Duration

	Class      ErrorClass
	Status     int           // HTTP status, 0 if none
	ErrorName  string        // the error's type name, such as "RefusalError" or "*openai.Error"
	Message    string        // the error's message
	RetryAfter time.Duration // the server's Retry-After, capped; -1 when absent
	Deadline   Deadline      // which deadline fired, for ClassTimeout
	Retryable  bool          // the provider flagged the error as retryable

	Finish FinishReason // result attempts (and errors that came with a finish)
	Usage  Usage

	// Earlier lists the attempts made before this one in this request, oldest first.
	Earlier []AttemptSummary

	// Err is the Go error itself. It never crosses the Wasm boundary; Go
	// conditions use it with errors.Is and errors.As.
	Err error
}

// AttemptSummary is the short form of an earlier attempt.
type AttemptSummary struct {
	Model    string
	Class    ErrorClass
	Status   int
	Duration time.Duration
}

// Action is a condition's verdict. The zero value, ActionNone, means "no
// opinion: ask the next condition", so a zeroed decision is harmless.
type Action uint8

// The condition actions. Values are part of ABI v1.
const (
	ActionNone   Action = 0 // no opinion
	ActionRetry  Action = 1 // try the same model again
	ActionSwitch Action = 2 // try Decision.Model
	ActionGiveUp Action = 3 // stop: fail the request now, ask no further condition
)

var actionNames = [...]string{"none", "retry", "switch", "give-up"}

// String returns the action's name.
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "unknown"
}

// Decision is a condition's answer. Zero fields mean "use the default".
type Decision struct {
	Action Action
	// Model is the key of the model to switch to (ActionSwitch only).
	Model string
	// Delay is the base wait before the next attempt; 0 means none.
	Delay time.Duration
	// BackoffFactor multiplies Delay per earlier attempt on the target
	// model; values below 1 mean 1.
	BackoffFactor float64
	// MaxAttempts caps the attempts on the target model in this request,
	// counting every earlier one; 0 means the default (1 for a switch, 2 for
	// a retry).
	MaxAttempts int
	// Timeout is the next attempt's own deadline; 0 means the driver's default.
	Timeout time.Duration
	// UseRetryAfter makes the driver wait what the server's Retry-After asks
	// (capped) instead of Delay, when the failed attempt carried one.
	UseRetryAfter bool
}
