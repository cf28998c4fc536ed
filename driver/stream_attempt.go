package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
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

// ErrAnswerTooLarge fails an attempt that commits at its end
// ([CommitAtEnd]) when the answer it holds outgrows [WithMaxAnswerBytes].
// The rules judge it like any other failure (its class is unknown).
var ErrAnswerTooLarge = errors.New("retryhost: the answer is too large to hold until its end")

// partOverhead is what a held part counts beside its payload (abi.Part.Size):
// the part itself and what it points to that Size does not count, such as
// a raw chunk.
const partOverhead = 256

// atEndParts is the capacity an attempt that commits at its end starts its
// held parts with: a short answer (stream start, metadata, a block's
// start, delta and end, a finish, and a raw chunk beside each chunk's part)
// fits without the slice growing from one part by doubling. A longer
// answer is held in segments (attemptStream.held), each twice the last up
// to atEndSegment parts, so holding it never copies what it holds and
// allocates about what it holds, not up to twice that; the replay lets
// go of each segment as it is read.
const (
	atEndParts   = 16
	atEndSegment = 1024
)

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
	// atEnd moves the commit to the end of the stream ([CommitAtEnd]):
	// the first content part disarms the first-content deadline and arms
	// the gap deadline, and every failure up to the end fails the attempt.
	atEnd bool
	// maxAnswer bounds what an attempt that commits at its end holds
	// ([WithMaxAnswerBytes]).
	maxAnswer int64
	// emptyFails fails an answer that finishes with no content
	// ([WithEmptyAnswerFails]).
	emptyFails bool
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
	// whole reports a commit at the end of a stream ([CommitAtEnd]): the
	// stream holds the whole answer, which the rules judge like a result.
	whole bool
	err   error
}

// emptyFinish reports whether a stream that finished so, with no content,
// is an empty answer ([WithEmptyAnswerFails]): a finish for stop or an
// unnamed reason.
func emptyFinish(f *abi.Finish) bool {
	if f == nil {
		return false
	}
	switch f.Reason.Unified {
	case abi.ReasonStop, abi.ReasonOther, abi.ReasonUnknown:
		return true
	}
	return false
}

// runAttempt opens the model's stream and pulls it through the transform
// chain into the commit gate until the first content part (commit) or a
// failure. On failure the upstream is closed before runAttempt returns.
// ctx is the attempt's context from the engine (its attempt and total
// deadlines are causes of it); the first-content and gap deadlines are
// added here.
func runAttempt(ctx context.Context, sp *attemptSpec) attemptResult {
	s := newAttemptStream(ctx, sp)
	if err := s.openUp(sp); err != nil {
		return s.fail(err)
	}
	var g gateScan
	for {
		if err := s.advance(sp); err != nil {
			return s.fail(err)
		}
		if r, done := s.scanGate(sp, &g); done {
			return r
		}
		if s.upDone {
			return s.endOfStream(sp, &g)
		}
		if sp.atEnd && len(s.out) == cap(s.out) {
			s.held = append(s.held, s.out)
			s.out = make([]Part, 0, min(2*cap(s.out), atEndSegment))
			g.scanned = 0
		}
	}
}

// newAttemptStream is an attempt's stream under its own context, a child
// of ctx, with the first-content deadline armed.
func newAttemptStream(ctx context.Context, sp *attemptSpec) *attemptStream {
	actx, cancel := context.WithCancelCause(ctx)
	s := &attemptStream{
		ctx:    actx,
		parent: ctx,
		cancel: cancel,
		commit: sp.commit,
		gap:    sp.gap,
		clock:  sp.clock,
	}
	if sp.firstContent > 0 {
		s.firstV.arm(sp.clock, sp.firstContent, cancel)
		s.first = &s.firstV
	}
	return s
}

// fail ends an attempt that failed before its commit with err, or with
// the cause of its context's end, and releases what it holds.
func (s *attemptStream) fail(err error) attemptResult {
	if s.ctx.Err() != nil {
		err = s.cause()
	}
	s.release()
	return attemptResult{err: err}
}

// openUp opens the transform chain and the model's stream.
func (s *attemptStream) openUp(sp *attemptSpec) error {
	info := abi.StreamInfo{ID: streamIDs.Add(1), Model: sp.model.Key(), Attempt: sp.number}
	ch := &s.chainV
	if err := ch.open(s.ctx, sp.clock, sp.transformers, info); err != nil {
		return err
	}
	s.ch = ch
	ch.commit = sp.commit
	up, err := openStream(s.ctx, sp.model, sp.req)
	if err != nil {
		return err
	}
	s.up = up
	s.stopAF = context.AfterFunc(s.ctx, s.closeUp)
	// What the gate holds before commit, usually a preamble (stream start,
	// response metadata, a text start, and with chunk fields on, as a
	// gateway has them, the first chunk's raw part) and the first content:
	// one allocation rather than growing ones (four parts, then eight, was
	// 1.7 KB a gateway request); recv lets it go once replayed. An attempt
	// that commits at its end holds the whole answer.
	gateParts := 6
	if sp.atEnd {
		gateParts = atEndParts
	}
	s.out = make([]Part, 0, gateParts)
	return nil
}

// advance takes the next part from upstream (or a transform's expiry, or
// the upstream's end) through the chain into s.out.
func (s *attemptStream) advance(sp *attemptSpec) error {
	ch := s.ch
	p, expired, err := s.next()
	switch {
	case expired:
		return ch.expire(sp.clock.Now(), &s.out)
	case err == io.EOF:
		if err := ch.end(&s.out); err != nil {
			return err
		}
		s.upDone = true
		return nil
	case err != nil:
		return err
	case ch.active == 0:
		s.out = append(s.out, p)
		return nil
	default:
		return ch.push(0, p, &s.out)
	}
}

// gateScan is what the gate has seen of an attempt's parts so far.
type gateScan struct {
	scanned int         // the parts of s.out scanned
	content bool        // a content part was seen (committing at the end)
	finish  *abi.Finish // the last finish part scanned
	held    int64       // what the attempt holds, committing at its end
}

// scanGate scans the parts added to s.out: done with a failure (an error
// part, too much held) or, at the first content part, the commit.
func (s *attemptStream) scanGate(sp *attemptSpec, g *gateScan) (r attemptResult, done bool) {
	for ; g.scanned < len(s.out); g.scanned++ {
		q := &s.out[g.scanned]
		if q.Kind == abi.KindError {
			return s.fail(partError(q)), true
		}
		if q.Kind == abi.KindFinish {
			g.finish = q.Finish
		}
		if sp.atEnd {
			if g.held += int64(q.Size()) + partOverhead; g.held > sp.maxAnswer {
				return s.fail(fmt.Errorf("%w: more than %d bytes held before the end of the stream", ErrAnswerTooLarge, sp.maxAnswer)), true
			}
		}
		if sp.commit.IsContent(q) {
			if sp.atEnd {
				if !g.content {
					g.content = true
					if err := s.firstContent(); err != nil {
						return s.fail(err), true
					}
				}
				continue
			}
			if err := s.commitNow(); err != nil {
				return s.fail(err), true
			}
			return attemptResult{stream: s}, true
		}
	}
	return attemptResult{}, false
}

// endOfStream commits an attempt whose upstream ended before any content
// (or, committing at the end, after it), unless it is an empty answer
// that fails.
func (s *attemptStream) endOfStream(sp *attemptSpec, g *gateScan) attemptResult {
	if !g.content && sp.emptyFails && emptyFinish(g.finish) {
		p, _ := Describe(sp.model)
		return s.fail(&ProviderError{Provider: p, Message: ErrEmptyAnswer.Error(), Retryable: true,
			Class: abi.ClassServer, Err: ErrEmptyAnswer})
	}
	r := attemptResult{stream: s, empty: !g.content, whole: sp.atEnd, finish: g.finish}
	if err := s.commitNow(); err != nil {
		return s.fail(err)
	}
	if len(s.held) > 0 { // the replay starts at the first segment
		s.held = append(s.held, s.out)
		s.out, s.held[0] = s.held[0], nil
		s.held = s.held[1:]
	}
	return r
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

	first  *firstWatch // &firstV when armed, else nil
	gapW   *gapWatch   // &gapV once armed, else nil
	stopAF func() bool
	// upClose closes the upstream once: a deadline's cancel (the
	// AfterFunc) and release may both get there, at the same moment, and
	// a provider's Close need not be safe against itself.
	upClose sync.Once

	// The watches and the chain live in the attemptStream, so that an
	// attempt allocates them with it rather than one by one.
	firstV firstWatch
	gapV   gapWatch
	chainV chain

	// rd reads the upstream while a transform holds parts (see next);
	// inflight reports a Recv it runs whose result next has not taken yet
	// (a hold time ran out first). At most one Recv is ever in flight.
	rd        *holdReader
	inflight  bool
	committed bool // set by commitNow, on the pulling goroutine

	mu     sync.Mutex // the slow path of Recv vs a concurrent Close
	out    []Part
	held   [][]Part // an answer held to its end: the segments that follow out, in order (see atEndSegment)
	head   int
	upDone bool        // the upstream ended cleanly and the chain was resolved
	fast   atomic.Bool // nothing queued, every transform detached
	err    error       // terminal: io.EOF or the stream's error
	onEnd  func(error) // the request's outcome: nil when drained
	fired  atomic.Bool
	finish atomic.Pointer[abi.Finish]       // the last finish part delivered, for the observer
	meta   atomic.Pointer[abi.ResponseMeta] // likewise the response metadata (the model that answered)
}

// commitNow disarms the first-content deadline and arms the gap deadline.
// It fails (and commits nothing) when a deadline fired first: the first
// content's, even if its timer's cancel has not run yet, or the attempt's
// or the caller's, which is still before commit and so still recoverable.
// Once it returns nil, the first-content deadline can no longer fire.
func (s *attemptStream) commitNow() error {
	if !s.first.disarm() {
		return s.first.err
	}
	if err := s.ctx.Err(); err != nil {
		return context.Cause(s.ctx)
	}
	// Disarmed for good: its timer and error are not kept for the
	// stream's life (release and the deadline's own func need no more).
	s.first = nil
	if s.gapW != nil { // armed by firstContent: the stream is over
		s.gapW.stop()
	} else if s.gap > 0 && !s.upDone {
		s.gapV.start(s.clock, s.gap, s.cancel)
		s.gapW = &s.gapV
	}
	s.committed = true
	return nil
}

// firstContent is commitNow's deadline half for a stream that commits at
// its end: at the first content part the first-content deadline is
// disarmed (it fails the attempt when it fired first) and the gap deadline
// armed; a gap that fires before the end fails the attempt, uncommitted.
func (s *attemptStream) firstContent() error {
	if !s.first.disarm() {
		return s.first.err
	}
	if s.gap > 0 {
		s.gapV.start(s.clock, s.gap, s.cancel)
		s.gapW = &s.gapV
	}
	return nil
}

// cause explains why the attempt's context ended: the caller's cause or the
// total deadline when the request's context is done, else the attempt's
// own deadline.
func (s *attemptStream) cause() error {
	if s.parent.Err() != nil {
		return causeOf(s.parent)
	}
	return context.Cause(s.ctx)
}

// closeUp closes the upstream, once; a second caller waits for the first.
func (s *attemptStream) closeUp() { s.upClose.Do(func() { _ = s.up.Close() }) }

// release ends the attempt: timers, upstream and transforms. Idempotent.
func (s *attemptStream) release() {
	s.first.disarm()
	s.gapW.stop()
	if s.stopAF != nil {
		s.stopAF()
	}
	s.cancel(errAttemptOver)
	if s.up != nil {
		s.closeUp() // waits for a close the AfterFunc started
	}
	s.rd.stop()
	if s.ch != nil {
		s.ch.close()
	}
}

// Recv returns the next part, io.EOF after the last, or the error that
// ended the stream.
//
// Recv is every part's path, and a held stream spends its life blocked in
// the upstream's Recv below it, on the caller's goroutine, with every frame
// above the wait kept (thousands of held streams each keep their handler's
// stack). So the fast path (nothing queued, every transform detached) waits
// on the upstream from Recv's own frame, which stays small: the part is
// returned in place, and what is rare (the locked path before the stream
// goes fast, and the end) runs in calls that take pointers to it rather
// than copies, never inlined here.
func (s *attemptStream) Recv() (p Part, err error) {
	if !s.fast.Load() && !s.recvLocked(&p, &err) {
		return p, err
	}
	// The fast path touches no state of its own, so it needs no lock: a
	// concurrent Close only closes the upstream (which the Stream contract
	// allows) and the error that follows takes the locked path
	// (recvFastEnd).
	g := s.gapW // set at commit and never changed
	if g != nil {
		g.waiting()
	}
	p, err = s.up.Recv()
	if g != nil {
		g.received(err == nil && s.commit.IsContent(&p))
	}
	switch {
	case err != nil || p.Kind == abi.KindError:
		err = s.recvFastEnd(&p, err)
	case p.Kind == abi.KindFinish:
		s.finish.Store(p.Finish)
	case p.Kind == abi.KindResponseMeta:
		s.meta.Store(p.Meta)
	}
	return p, err
}

// recvFastEnd handles what the fast path's upstream Recv handed back, an
// error or an error part, in place: *p becomes the part to return.
//
//go:noinline
func (s *attemptStream) recvFastEnd(p *Part, err error) error {
	s.mu.Lock()
	s.fast.Store(false)
	if s.err == nil {
		*p, err = s.recvSlow(*p, err)
	} else {
		*p, err = Part{}, s.err
	}
	s.mu.Unlock()
	s.fireOutcome()
	return err
}

// recvLocked is Recv's slow path, under the lock; it sets *p and *err to
// what Recv returns, and reports false. It reports true, and sets nothing,
// when nothing is queued and no transform is left: Recv is to wait on the
// upstream through its fast path (as every later Recv will), without the
// lock.
//
//go:noinline
func (s *attemptStream) recvLocked(p *Part, err *error) (fast bool) {
	s.mu.Lock()
	q, e := s.recv()
	ended := s.err != nil
	s.mu.Unlock()
	if ended {
		s.fireOutcome()
	}
	if e == errGoFast {
		return true
	}
	*p, *err = q, e
	return false
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

// errGoFast is recv's word for "wait on the upstream through the fast
// path"; it never leaves the stream.
var errGoFast = errors.New("retryhost: fast path")

// recv returns the next part the slow path has, or errGoFast: the
// upstream is next, with nothing between.
func (s *attemptStream) recv() (Part, error) {
	for {
		if s.head < len(s.out) {
			p := s.out[s.head]
			s.out[s.head] = Part{}
			s.head++
			return s.deliver(p)
		}
		if len(s.held) > 0 { // the next segment of an answer held to its end
			s.out, s.held[0], s.head = s.held[0], nil, 0
			s.held = s.held[1:]
			continue
		}
		if s.err != nil {
			return Part{}, s.err
		}
		if s.head != 0 {
			s.out, s.head = s.out[:0], 0
			if s.ch.active == 0 {
				s.out = nil // replayed, and no transform will hold parts in it again: a held stream keeps none
			}
		}
		if !s.upDone && s.ch.active == 0 && !s.inflight {
			// From here on every part goes straight through (Recv's fast path),
			// and the queue stays empty: its array (the gate's preamble
			// and first content) is not kept for the stream's life.
			s.out = nil
			s.fast.Store(true)
			return Part{}, errGoFast
		}
		if s.upDone {
			s.end(io.EOF)
			continue
		}
		p, expired, err := s.next()
		if expired {
			if err := s.ch.expire(s.clock.Now(), &s.out); err != nil {
				if s.ctx.Err() != nil {
					err = s.cause()
				}
				s.end(err)
			}
			continue
		}
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
		s.out, s.held, s.head = s.out[:0], nil, 0
		s.end(partError(&p))
		return Part{}, s.err
	}
	if p.Kind == abi.KindFinish {
		s.finish.Store(p.Finish)
	} else if p.Kind == abi.KindResponseMeta {
		s.meta.Store(p.Meta)
	}
	return p, nil
}

// pull waits for the next upstream part. With a gap deadline it tells the
// gap watch that the time is the upstream's, not the caller's.
func (s *attemptStream) pull() (Part, error) {
	g := s.gapW
	if g == nil {
		return s.up.Recv()
	}
	g.waiting()
	p, err := s.up.Recv()
	g.received(err == nil && s.commit.IsContent(&p))
	return p, err
}

// upPart is the result of one upstream Recv.
type upPart struct {
	p   Part
	err error
}

// next waits for the next upstream part through the transform chain's
// eyes: while no transform holds a part it is pull, on this goroutine.
// While one does, the wait is bounded by the oldest held part's
// MaxHoldTime, so held text never waits on a silent provider longer than
// the cap promises: the upstream Recv then runs on the attempt's reader
// goroutine, and when the hold time runs out first next reports expired
// and keeps that Recv in flight for the next call (one Recv in flight at
// most, so back-pressure holds, and no part is lost or reordered). A hold
// timer that fires just as the part arrives leaves at most a stale wake-up
// behind; the caller's expire checks the clock, so a stale wake-up
// flushes nothing early.
func (s *attemptStream) next() (p Part, expired bool, err error) {
	due, held := s.ch.holdDue(s.committed)
	if !held && !s.inflight {
		p, err = s.pull()
		return p, false, err
	}
	rd := s.reader()
	if !s.inflight {
		rd.req <- struct{}{}
		s.inflight = true
	}
	var fired chan struct{}
	if held {
		wait := due.Sub(s.clock.Now())
		if wait <= 0 {
			return Part{}, true, nil
		}
		select {
		case <-rd.fired: // a stale wake-up of an earlier wait
		default:
		}
		if rd.t == nil {
			rd.t = s.clock.AfterFunc(wait, rd.fire)
		} else {
			rd.t.Reset(wait)
		}
		fired = rd.fired
	}
	g := s.gapW
	if g != nil {
		g.waiting()
	}
	select {
	case r := <-rd.res:
		s.inflight = false
		if rd.t != nil {
			rd.t.Stop()
		}
		if g != nil {
			g.received(r.err == nil && s.commit.IsContent(&r.p))
		}
		return r.p, false, r.err
	case <-fired: // nil, and so never ready, when nothing is held
		if g != nil {
			g.received(false)
		}
		return Part{}, true, nil
	}
}

// holdReader reads the upstream on a goroutine of its own, one Recv per
// request, for the waits that a hold time bounds. An attempt starts one the
// first time a transform holds a part, and release ends it; its channels
// and timer are reused by every wait.
type holdReader struct {
	req    chan struct{} // one Recv, please; closed by stop
	res    chan upPart
	fired  chan struct{} // the hold timer's wake-up
	fire   func()
	t      stopper
	closed bool
}

// reader returns the attempt's hold reader, starting it on first use.
func (s *attemptStream) reader() *holdReader {
	if s.rd != nil {
		return s.rd
	}
	rd := &holdReader{req: make(chan struct{}, 1), res: make(chan upPart, 1), fired: make(chan struct{}, 1)}
	rd.fire = func() {
		select {
		case rd.fired <- struct{}{}:
		default:
		}
	}
	go func(up Stream) {
		for range rd.req { // ends when stop closes req; a Recv in flight ends when release closes up
			p, err := up.Recv()
			rd.res <- upPart{p, err}
		}
	}(s.up)
	s.rd = rd
	return rd
}

// stop ends the reader goroutine (once its Recv in flight, if any, has
// returned) and its timer. It runs where the stream ends: on the pulling
// goroutine or under the stream's lock, never beside a request.
func (rd *holdReader) stop() {
	if rd == nil || rd.closed {
		return
	}
	rd.closed = true
	close(rd.req)
	if rd.t != nil {
		rd.t.Stop()
	}
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

var _ HeaderStream = (*attemptStream)(nil)

// Header returns the HTTP response headers of the attempt's upstream when
// it carries them ([HeaderStream]), else nil. It reads no per-part state.
func (s *attemptStream) Header() http.Header {
	if hs, ok := s.up.(interface{ Header() http.Header }); ok {
		return hs.Header()
	}
	return nil
}

// Close abandons the stream: the upstream is closed at once (also when a
// Recv is blocked in another goroutine). Closing before the end makes the
// outcome ErrStreamClosed. It may be called more than once.
func (s *attemptStream) Close() error {
	s.cancel(ErrStreamClosed) // unblocks a Recv waiting on the upstream
	s.mu.Lock()
	if s.err == nil {
		clear(s.out)
		s.out, s.held, s.head = nil, nil, 0
		s.end(ErrStreamClosed)
	}
	s.mu.Unlock()
	s.fireOutcome()
	return nil
}
