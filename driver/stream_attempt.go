package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// ErrStreamClosed is the outcome of a committed stream the caller closed
// before its end, and what Recv returns after such a Close.
var ErrStreamClosed = errors.New("retryhost: stream closed by the caller")

// errAttemptOver is the cause of an attempt context the driver ended itself.
var errAttemptOver = errors.New("retryhost: attempt over")

// ErrorPartError wraps the error of a [abi.KindError] part that carried
// none, so that an error part always fails with an error.
var errEmptyErrorPart = errors.New("retryhost: the stream reported an error part without an error")

var streamIDs atomic.Uint64

// attemptSpec is what one attempt of the stream driver runs with.
type attemptSpec struct {
	model        Model
	req          *Request
	number       int
	transformers []abi.Transformer
	commit       CommitRule
	firstContent time.Duration
	gap          time.Duration
	clock        clock
}

// attemptResult is how one attempt ended before the caller saw anything:
// committed (stream set) or failed (err set).
type attemptResult struct {
	stream *attemptStream
	// empty reports a commit at the end of a stream that carried no
	// content; finish is its finish part, if it had one, for result
	// conditions to judge.
	empty  bool
	finish *abi.Finish
	err    error
}

// runAttempt opens the model's stream and pulls it through the transform
// chain into the commit gate until the first content part (commit) or a
// failure. On failure the upstream is closed before runAttempt returns.
// ctx is the attempt's context from the engine (its attempt and total
// deadlines are causes of it); the first-content and gap deadlines are
// added here.
func runAttempt(ctx context.Context, sp *attemptSpec) attemptResult {
	actx, cancel := context.WithCancelCause(ctx)
	s := &attemptStream{
		ctx:    actx,
		parent: ctx,
		cancel: cancel,
		commit: sp.commit,
		gap:    sp.gap,
		clock:  sp.clock,
	}
	s.firstT = armDeadline(sp.clock, sp.firstContent, abi.DeadlineFirstContent, cancel)

	fail := func(err error) attemptResult {
		if actx.Err() != nil {
			err = s.cause()
		}
		s.release()
		return attemptResult{err: err}
	}

	info := abi.StreamInfo{ID: streamIDs.Add(1), Model: sp.model.Key(), Attempt: sp.number}
	ch, err := openChain(actx, sp.clock, sp.transformers, info)
	if err != nil {
		return fail(err)
	}
	s.ch = ch
	up, err := openStream(actx, sp.model, sp.req)
	if err != nil {
		return fail(err)
	}
	s.up = up
	s.stopAF = context.AfterFunc(actx, func() { _ = up.Close() })

	scanned := 0
	for {
		p, err := up.Recv()
		if err != nil {
			if err != io.EOF {
				return fail(err)
			}
			if err := ch.end(&s.out); err != nil {
				return fail(err)
			}
			s.upDone = true
		} else if ch.active == 0 {
			s.out = append(s.out, p)
		} else if err := ch.push(0, p, &s.out); err != nil {
			return fail(err)
		}
		for ; scanned < len(s.out); scanned++ {
			q := &s.out[scanned]
			if q.Kind == abi.KindError {
				return fail(partError(q))
			}
			if sp.commit.IsContent(q) {
				if actx.Err() != nil {
					// A deadline fired as the content arrived: still
					// before commit, so still recoverable.
					return fail(context.Cause(actx))
				}
				s.commitNow()
				return attemptResult{stream: s}
			}
		}
		if s.upDone {
			r := attemptResult{stream: s, empty: true}
			for i := range s.out {
				if s.out[i].Kind == abi.KindFinish {
					r.finish = s.out[i].Finish
				}
			}
			s.commitNow()
			return r
		}
	}
}

func openStream(ctx context.Context, m Model, req *Request) (st Stream, err error) {
	defer func() {
		if r := recover(); r != nil {
			st, err = nil, fmt.Errorf("retryhost: model %s panicked opening a stream: %v", m.Key(), r)
		}
	}()
	st, err = m.Stream(ctx, req)
	if err == nil && st == nil {
		err = fmt.Errorf("retryhost: model %s returned no stream and no error", m.Key())
	}
	return st, err
}

func partError(p *Part) error {
	if p.Err != nil {
		return p.Err
	}
	return errEmptyErrorPart
}

// attemptStream is the committed stream of one attempt: it replays what the
// gate held (the preamble and the first content) and then keeps pulling the
// upstream through the transform chain, one part per Recv, so the caller's
// pace drives the provider. After commit it allocates nothing per part.
//
// Errors after commit end the stream: Recv returns them (an upstream error,
// a deadline, a transform's error, or the error of a [abi.KindError] part,
// which is never passed on as a part). The caller's cancellation returns
// the caller context's cause.
type attemptStream struct {
	ctx    context.Context // the attempt's
	parent context.Context // the request's
	cancel context.CancelCauseFunc
	up     Stream
	ch     *chain
	commit CommitRule
	clock  clock
	gap    time.Duration

	firstT stopper
	gapW   *gapWatch
	stopAF func() bool

	mu     sync.Mutex // the slow path of Recv vs a concurrent Close
	out    []Part
	head   int
	upDone bool        // the upstream ended cleanly and the chain was resolved
	fast   atomic.Bool // nothing queued, every transform detached
	err    error       // terminal: io.EOF or the stream's error
	onEnd  func(error) // the request's outcome: nil when drained
	fired  atomic.Bool
	finish atomic.Pointer[abi.Finish]       // the last finish part delivered, for the observer
	meta   atomic.Pointer[abi.ResponseMeta] // likewise the response metadata (the model that answered)
}

// commitNow stops the pre-commit deadline and arms the gap deadline.
func (s *attemptStream) commitNow() {
	stop(s.firstT)
	s.firstT = nil
	if s.gap > 0 && !s.upDone {
		s.gapW = startGapWatch(s.clock, s.gap, s.cancel)
	}
}

// cause explains why the attempt's context ended: the caller's cause or the
// total deadline when the request's context is done, else the attempt's
// own deadline.
func (s *attemptStream) cause() error {
	if s.parent.Err() != nil {
		return context.Cause(s.parent)
	}
	return context.Cause(s.ctx)
}

// release ends the attempt: timers, upstream and transforms. Idempotent.
func (s *attemptStream) release() {
	stop(s.firstT)
	s.gapW.stop()
	if s.stopAF != nil {
		s.stopAF()
	}
	s.cancel(errAttemptOver)
	if s.up != nil {
		_ = s.up.Close()
	}
	if s.ch != nil {
		s.ch.close()
	}
}

// Recv returns the next part, io.EOF after the last, or the error that
// ended the stream.
func (s *attemptStream) Recv() (p Part, err error) {
	if s.fast.Load() {
		// The common case after an early detach: nothing queued, no
		// transform; the part goes straight through. This path
		// touches no state of its own, so it needs no lock: a concurrent
		// Close only closes the upstream (which the Stream contract allows)
		// and the error that follows takes the locked path below.
		p, err = s.up.Recv()
		if err == nil && p.Kind != abi.KindError {
			if s.gapW != nil && s.commit.IsContent(&p) {
				s.gapW.seq.Add(1) // gapW is set before commit and never changes
			} else if p.Kind == abi.KindFinish {
				s.finish.Store(p.Finish)
			} else if p.Kind == abi.KindResponseMeta {
				s.meta.Store(p.Meta)
			}
			return p, nil
		}
		s.mu.Lock()
		s.fast.Store(false)
		if s.err == nil {
			p, err = s.recvSlow(p, err)
		} else {
			p, err = Part{}, s.err
		}
		s.mu.Unlock()
		s.fireOutcome()
		return p, err
	}
	s.mu.Lock()
	p, err = s.recv()
	ended := s.err != nil
	s.mu.Unlock()
	if ended {
		s.fireOutcome()
	}
	return p, err
}

// recvSlow handles what the fast path handed back: an error or an error part.
func (s *attemptStream) recvSlow(p Part, err error) (Part, error) {
	if err == nil {
		return s.deliver(p)
	}
	if err == io.EOF {
		s.upDone = true
		s.end(io.EOF)
		return Part{}, io.EOF
	}
	if s.ctx.Err() != nil {
		err = s.cause()
	}
	s.end(err)
	return Part{}, s.err
}

func (s *attemptStream) recv() (Part, error) {
	for {
		if s.head < len(s.out) {
			p := s.out[s.head]
			s.out[s.head] = Part{}
			s.head++
			return s.deliver(p)
		}
		if s.err != nil {
			return Part{}, s.err
		}
		if s.head != 0 {
			s.out, s.head = s.out[:0], 0
		}
		if !s.upDone && s.ch.active == 0 {
			s.fast.Store(true) // from the next Recv on
			p, err := s.up.Recv()
			if err != nil || p.Kind == abi.KindError {
				s.fast.Store(false)
				return s.recvSlow(p, err)
			}
			return s.deliver(p)
		}
		if s.upDone {
			s.end(io.EOF)
			continue
		}
		p, err := s.up.Recv()
		if err != nil {
			if err == io.EOF {
				s.upDone = true
				if err := s.ch.end(&s.out); err != nil {
					if s.ctx.Err() != nil {
						err = s.cause()
					}
					s.end(err)
				}
				continue
			}
			if s.ctx.Err() != nil {
				err = s.cause()
			}
			s.end(err)
			continue
		}
		if s.ch.active == 0 {
			return s.deliver(p)
		}
		if err := s.ch.push(0, p, &s.out); err != nil {
			if s.ctx.Err() != nil {
				err = s.cause() // a transform that saw the deadline or cancel first
			}
			s.end(err) // what the chain released before the error still reaches the caller
		}
	}
}

func (s *attemptStream) deliver(p Part) (Part, error) {
	if p.Kind == abi.KindError {
		clear(s.out[s.head:])
		s.out, s.head = s.out[:0], 0
		s.end(partError(&p))
		return Part{}, s.err
	}
	if s.gapW != nil && s.commit.IsContent(&p) {
		s.gapW.seq.Add(1)
	} else if p.Kind == abi.KindFinish {
		s.finish.Store(p.Finish)
	} else if p.Kind == abi.KindResponseMeta {
		s.meta.Store(p.Meta)
	}
	return p, nil
}

// end records the stream's terminal state and releases the attempt. The
// outcome hook fires later, outside the lock (see fireOutcome).
func (s *attemptStream) end(err error) {
	if s.err != nil {
		return
	}
	s.err = err
	s.fast.Store(false)
	s.release()
}

// fireOutcome calls the outcome hook exactly once, after the stream ended.
// It runs without the lock, so a hook may call Close. The caller must have
// observed the end under the lock (s.err never changes once set).
func (s *attemptStream) fireOutcome() {
	if s.onEnd == nil || s.err == nil || !s.fired.CompareAndSwap(false, true) {
		return
	}
	err := s.err
	if err == io.EOF {
		err = nil
	}
	s.onEnd(err)
}

// Close abandons the stream: the upstream is closed at once (also when a
// Recv is blocked in another goroutine). Closing before the end makes the
// outcome ErrStreamClosed. It may be called more than once.
func (s *attemptStream) Close() error {
	s.cancel(ErrStreamClosed) // unblocks a Recv waiting on the upstream
	s.mu.Lock()
	if s.err == nil {
		clear(s.out)
		s.out, s.head = nil, 0
		s.end(ErrStreamClosed)
	}
	s.mu.Unlock()
	s.fireOutcome()
	return nil
}
