package driver

import (
	"context"
	"time"

	"github.com/retryhost/retryhost/abi"
)

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
