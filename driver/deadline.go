package driver

import (
	"context"
	"sync"
	"sync/atomic"
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

// gapTicks is how many times per gap the gap watch looks for progress.
const gapTicks = 4

// gapWatch enforces the gap deadline without touching a timer per part: the
// stream bumps a counter for each content part (one atomic add), and a
// timer that ticks every gap/gapTicks fires the deadline after gapTicks
// ticks in a row without progress. Resetting a runtime timer per part cost
// ~190 ns; this costs a few. The price is precision: the deadline fires
// after between Gap and Gap+Gap/gapTicks of silence.
type gapWatch struct {
	seq atomic.Uint64 // content parts delivered

	mu      sync.Mutex // the ticks vs stop
	t       stopper
	seen    uint64
	idle    int
	every   time.Duration
	stopped bool
	fire    func()
}

func startGapWatch(c clock, gap time.Duration, cancel context.CancelCauseFunc) *gapWatch {
	err := &DeadlineError{Deadline: abi.DeadlineGap, Limit: gap}
	g := &gapWatch{every: max(gap/gapTicks, 1), fire: func() { cancel(err) }}
	g.mu.Lock()
	g.t = c.AfterFunc(g.every, g.tick)
	g.mu.Unlock()
	return g
}

func (g *gapWatch) tick() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	if s := g.seq.Load(); s != g.seen {
		g.seen, g.idle = s, 0
	} else if g.idle++; g.idle >= gapTicks {
		g.stopped = true
		g.fire()
		return
	}
	g.t.Reset(g.every)
}

func (g *gapWatch) stop() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.stopped = true
	g.t.Stop()
	g.mu.Unlock()
}
