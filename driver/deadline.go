package driver

import (
	"context"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// The stream driver's deadlines. Each fails with a *[DeadlineError] naming
// it (abi.Deadline), so a condition can tell them apart from each other and
// from the caller's cancellation, which surfaces as the caller context's
// cause and never as a DeadlineError. FirstContent and Gap are the stream
// driver's own ([WithFirstContentTimeout], [WithGapTimeout]); Attempt and
// Total are the Runner's ([WithAttemptTimeout], [WithBudget]).
//
// Whether a deadline can be recovered (the conditions may fail over)
// depends on when it fires, as in ai-retry's timeout table (reference §7.5):
//
//	deadline       fires                          recoverable
//	first content  before the first content part  yes: the attempt fails, the rules decide
//	attempt        before commit                  yes
//	attempt        after commit                   no: the stream ends with it (truncated)
//	total          any time                       no: the request ends with it
//	gap            after commit only              no: the stream ends with it (truncated)
//	caller cancel  any time                       no: a hard stop, its cause is returned as is
//
// Every attempt gets fresh first-content, attempt and gap deadlines.

// clock is the time source of deadlines and hold caps; tests replace it.
type clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) stopper
}

// stopper is the part of *time.Timer the driver uses.
type stopper interface {
	Stop() bool
	Reset(d time.Duration) bool
}

type realClock struct{}

func (realClock) Now() time.Time                              { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }

// armDeadline cancels ctx with a DeadlineError after d; zero d arms nothing.
func armDeadline(c clock, d time.Duration, which abi.Deadline, cancel context.CancelCauseFunc) stopper {
	if d <= 0 {
		return nil
	}
	err := &DeadlineError{Deadline: which, Limit: d}
	return c.AfterFunc(d, func() { cancel(err) })
}

func stop(s stopper) {
	if s != nil {
		s.Stop()
	}
}
