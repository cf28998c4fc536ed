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

// Every timer here follows one rule: a timer that fires just as it is
// stopped must not act on what the stop already decided. time.Timer.Stop
// cannot promise that (the callback may already be running), so each timer's
// callback and its stopper race on a state word or a flag under a lock, and
// exactly one of them wins: the first-content deadline either fires before
// commit or never ([firstWatch]); the gap watch never fires once stopped
// ([gapWatch]); a hold-time wait is a fresh channel per wait, so a late
// fire is never seen by the next one (chain.waitHeld). The attempt and total
// deadlines are contexts (their cancel is atomic with their cause), and the
// backoff waits in a select on a timer of its own (sleepCtx), after which
// the engine checks the caller's context again, so a timer that wins the
// select as the caller cancels still ends in a hard stop. Cooldowns have no
// timer: they compare times under their lock.

// The states of a firstWatch.
const (
	firstArmed uint32 = iota
	firstDisarmed
	firstFired
)

// firstWatch is the first-content deadline of one attempt: a timer that
// cancels the attempt's context with a *DeadlineError, unless commit
// disarms it first. Its state decides who won, so a deadline that fires
// right at commit either fails the attempt before anything reaches the
// caller, or is ignored: it never ends a committed stream.
type firstWatch struct {
	state  atomic.Uint32
	t      stopper
	limit  time.Duration
	cancel context.CancelCauseFunc
	// err is the deadline's error, made when it fires (it rarely does):
	// written before the state says fired, read only after.
	err *DeadlineError
}

// armFirstContent arms the first-content deadline d; zero d arms nothing.
func armFirstContent(c clock, d time.Duration, cancel context.CancelCauseFunc) *firstWatch {
	if d <= 0 {
		return nil
	}
	w := &firstWatch{}
	w.arm(c, d, cancel)
	return w
}

// arm arms w, a zero firstWatch (one held in an attemptStream, so that an
// attempt allocates its watches with itself), for the deadline d > 0.
func (w *firstWatch) arm(c clock, d time.Duration, cancel context.CancelCauseFunc) {
	w.limit, w.cancel = d, cancel
	w.t = c.AfterFunc(d, w.fire)
}

func (w *firstWatch) fire() {
	if w.state.Load() != firstArmed {
		return
	}
	err := &DeadlineError{Deadline: abi.DeadlineFirstContent, Limit: w.limit}
	w.err = err
	if w.state.CompareAndSwap(firstArmed, firstFired) {
		w.cancel(err)
	}
}

// disarm stops the deadline at commit. It reports false when the deadline
// fired first: the attempt must then fail with it, uncommitted.
func (w *firstWatch) disarm() bool {
	if w == nil {
		return true
	}
	ok := w.state.CompareAndSwap(firstArmed, firstDisarmed) || w.state.Load() == firstDisarmed
	w.t.Stop()
	return ok
}

// gapTicks is how many times per gap the gap watch looks for progress.
const gapTicks = 4

// gapWatch enforces the gap deadline without touching a timer per part,
// and counts only the time spent waiting on the upstream, never the
// caller's: a caller that reads slowly, or starts reading late, is not a
// silent provider. The stream adds 1 to seq before it waits on
// the upstream and, when the wait ends, 1 more for a content part or -1 for
// anything else; so seq/2 counts content parts and an odd seq means "waiting
// on the upstream". A timer ticking every gap/gapTicks fires the deadline
// after gapTicks ticks that found the stream waiting with no new content
// since the last content part; a tick that finds the caller holding the
// stream neither counts nor resets. Resetting a runtime timer per part cost
// ~190 ns; this costs two atomic adds. The price is precision: the deadline
// fires after between Gap and Gap+Gap/gapTicks of waiting.
type gapWatch struct {
	seq atomic.Uint64

	mu      sync.Mutex // the ticks vs stop
	t       stopper
	seen    uint64 // the content count at the last progress
	idle    int
	every   time.Duration
	stopped bool
	limit   time.Duration
	cancel  context.CancelCauseFunc
}

func startGapWatch(c clock, gap time.Duration, cancel context.CancelCauseFunc) *gapWatch {
	g := &gapWatch{}
	g.start(c, gap, cancel)
	return g
}

// start starts g, a zero gapWatch (one held in an attemptStream), for the
// gap deadline gap > 0.
func (g *gapWatch) start(c clock, gap time.Duration, cancel context.CancelCauseFunc) {
	g.every, g.limit, g.cancel = max(gap/gapTicks, 1), gap, cancel
	g.mu.Lock()
	g.t = c.AfterFunc(g.every, g.tick)
	g.mu.Unlock()
}

// waiting marks the start of a wait on the upstream.
func (g *gapWatch) waiting() { g.seq.Add(1) }

// received marks its end, with a content part or not.
func (g *gapWatch) received(content bool) {
	if content {
		g.seq.Add(1)
	} else {
		g.seq.Add(^uint64(0))
	}
}

func (g *gapWatch) tick() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	s := g.seq.Load()
	if c := s >> 1; c != g.seen {
		g.seen, g.idle = c, 0
	} else if s&1 == 1 {
		if g.idle++; g.idle >= gapTicks {
			g.stopped = true
			g.cancel(&DeadlineError{Deadline: abi.DeadlineGap, Limit: g.limit})
			return
		}
	}
	g.t.Reset(g.every)
}

// stop disarms the watch: a tick that runs after it (a timer that fired
// just as it was stopped) does nothing. The timer is stopped outside the
// lock, so a tick blocked on it cannot deadlock the stop.
func (g *gapWatch) stop() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.stopped = true
	t := g.t
	g.mu.Unlock()
	t.Stop()
}
