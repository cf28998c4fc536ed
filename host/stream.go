package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// Where a stream's state is (ABI.md §6.3, lazy open).
const (
	stUnopened  uint8 = iota // nothing in the guest yet: opened at the first call
	stOpen                   // opened in the guest: a retryhost_close is owed
	stForgotten              // the guest holds nothing: auto-closed, or closed after a static DETACH
)

// slot holds one instance position of the pool. Its mutex serialises every
// call into the instance; the generation changes whenever the instance is
// discarded, which is how a stream learns that its state is gone.
type slot struct {
	mu   sync.Mutex
	inst *instance
	gen  uint64

	// Parts waiting for this instance, combined into one retryhost_parts
	// call by whichever waiter gets mu first (flat combining). waiting is
	// len(queue), readable without qmu.
	qmu     sync.Mutex
	queue   []*request
	spare   []*request
	waiting atomic.Int32

	// calls counts calls into the slot's instances (the breaker's rate);
	// pinned counts the streams pinned to the slot when the plugin
	// declared a capacity (Plugin.maxStreams).
	calls  atomic.Uint64
	pinned atomic.Int32
}

// request is one stream's part waiting to be judged in a batch. It is owned
// by its stream; the combiner fills in the outcome under slot.mu.
type request struct {
	st   *stream
	rec  []byte
	v    abi.Verdict
	err  error
	done bool
}

// Open starts a stream of the transform. It makes no call into the guest:
// the stream is pinned to one of the plugin's instance slots and opened in
// the guest at its first call (ABI.md §6.3, lazy open), so a failure of the
// guest's open surfaces from the first Part or End that needs the guest.
// The returned StreamTransform must be closed.
//
// # Errors
//
// ctx.Err() if ctx is already done, or a [*PluginError] ([ErrWrongKind],
// [ErrClosed], [ErrDisabled]); the driver then applies Policy().Fail.
func (p *Plugin) Open(ctx context.Context, info abi.StreamInfo) (abi.StreamTransform, error) {
	o := p.rt.cfg.observer
	if o == nil {
		return p.openStream(ctx, info)
	}
	start := time.Now()
	st, err := p.openStream(ctx, info)
	observe(ctx, o, p.name, "open", start, err)
	return st, err
}

func (p *Plugin) openStream(ctx context.Context, info abi.StreamInfo) (abi.StreamTransform, error) {
	if !p.isTransform {
		return nil, p.perr("open", ErrWrongKind, nil)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !p.enter() {
		return nil, p.perr("open", ErrClosed, nil)
	}
	ok, probe := p.breaker.allow(p.rt.now())
	if !ok {
		p.leave()
		return nil, p.perr("open", ErrDisabled, nil)
	}
	st := &stream{p: p, info: info, probe: probe}
	if p.maxStreams <= 0 {
		st.slot = p.slots[int(p.rr.Add(1))%len(p.slots)]
		return st, nil
	}
	if st.slot = p.place(); st.slot == nil {
		if probe {
			p.breaker.release()
		}
		p.leave()
		return nil, p.perr("open", ErrNoCapacity, fmt.Errorf("%d instances with room for %d streams each are full", len(p.slots), p.maxStreams))
	}
	st.pinned = true
	return st, nil
}

// place pins a new stream to a slot with room under the plugin's declared
// capacity, round robin from the next slot, or returns nil if all are full.
func (p *Plugin) place() *slot {
	start := int(p.rr.Add(1))
	for i := range p.slots {
		s := p.slots[(start+i)%len(p.slots)]
		for {
			n := s.pinned.Load()
			if n >= p.maxStreams {
				break
			}
			if s.pinned.CompareAndSwap(n, n+1) {
				return s
			}
		}
	}
	return nil
}

// stream is one transform stream pinned to a slot; its state lives in the
// slot's instance of generation gen once opened. The driver uses it from
// one goroutine at a time.
type stream struct {
	p      *Plugin
	slot   *slot
	gen    uint64
	handle uint32
	state  uint8
	closed bool
	err    error // sticky: after a failure every call returns it
	info   abi.StreamInfo
	req    request

	probe  bool // the breaker's half-open probe: its first verdict decides
	pinned bool // counted in slot.pinned (declared capacity)

	// held are the framing parts (ABI.md §6.4) this transform has in the
	// driver's hold queue, in order: the driver owns them, so DROP and
	// REPLACE never discard them.
	held []abi.Part
	// What the stream sent through the transform and what its REPLACE
	// verdicts emitted, for the per-stream REPLACE caps.
	inParts, inBytes, outParts, outBytes int
}

// isFraming reports whether k is a part no verdict removes (ABI.md §6.4):
// the framing the driver owns (stream-start, response-metadata, finish)
// and, since v1.3, the provider's error part.
func isFraming(k abi.PartKind) bool {
	return k == abi.KindStreamStart || k == abi.KindResponseMeta || k == abi.KindFinish || k == abi.KindError
}

// isTrailer reports whether a kept part of kind k goes after a REPLACE
// list: the finish, and the provider's error, which ends the stream.
func isTrailer(k abi.PartKind) bool { return k == abi.KindFinish || k == abi.KindError }

// frame applies ABI.md §6.4 to the verdict v on part: it keeps track of
// the framing parts in the driver's hold queue and makes sure no verdict
// discards one (DROP of a framing part holds it; REPLACE re-emits them
// around its list).
func (st *stream) frame(part *abi.Part, v abi.Verdict) abi.Verdict {
	f := isFraming(part.Kind)
	switch v.Action {
	case abi.PartHold:
		if f {
			st.held = append(st.held, *part)
		}
	case abi.PartDrop:
		if f {
			st.held = append(st.held, *part)
			v.Action = abi.PartHold
		}
	case abi.PartPass:
		if part.Kind == abi.KindFinish {
			// The finish is always the stream's last part (ABI v1.3):
			// the guest may still add content at retryhost_end, so the
			// finish waits for it there, with what is held before it.
			st.held = append(st.held, *part)
			v.Action = abi.PartHold
		} else if len(st.held) > 0 {
			st.held = st.held[:0]
		}
	case abi.PartDetach:
		if len(st.held) > 0 {
			st.held = st.held[:0]
		}
	case abi.PartReplace:
		if f || len(st.held) > 0 {
			var cur *abi.Part
			if f {
				cur = part
			}
			v.Replace = st.reframe(v.Replace, cur)
		}
	}
	return v
}

// frameEnd applies ABI.md §6.4 to the verdict at the end of the stream.
func (st *stream) frameEnd(v abi.Verdict) abi.Verdict {
	switch v.Action {
	case abi.PartHold:
		v.Action = abi.PartPass
	case abi.PartDrop:
		if len(st.held) > 0 {
			v = abi.Verdict{Action: abi.PartReplace, Replace: st.reframe(nil, nil)}
		}
	case abi.PartReplace:
		if len(st.held) > 0 {
			v.Replace = st.reframe(v.Replace, nil)
		}
	}
	st.held = st.held[:0]
	return v
}

// reframe returns list with the held framing parts (and cur, a framing
// part being replaced, if not nil) around it: stream-start and metadata
// before, finish and error after. It empties held.
func (st *stream) reframe(list []abi.Part, cur *abi.Part) []abi.Part {
	all := st.held
	if cur != nil {
		all = append(all, *cur)
	}
	out := make([]abi.Part, 0, len(all)+len(list))
	for _, h := range all {
		if !isTrailer(h.Kind) {
			out = append(out, h)
		}
	}
	out = append(out, list...)
	for _, h := range all {
		if isTrailer(h.Kind) {
			out = append(out, h)
		}
	}
	clear(st.held)
	st.held = st.held[:0]
	return out
}

// fail makes err sticky and returns it.
func (st *stream) fail(err error) error {
	st.err = err
	return err
}

// live returns the stream's instance, or the error that lost it. The caller
// holds st.slot.mu.
func (st *stream) live(op string) (*instance, error) {
	if st.slot.gen == st.gen && st.slot.inst != nil {
		return st.slot.inst, nil
	}
	if st.p.released.Load() {
		return nil, st.p.perr(op, ErrClosed, nil)
	}
	return nil, st.p.perr(op, ErrInstanceLost, nil)
}

// Part judges one part (see abi.StreamTransform).
func (st *stream) Part(ctx context.Context, part *abi.Part) (abi.Verdict, error) {
	if st.p.rt.cfg.observer != nil {
		return st.observedPart(ctx, part)
	}
	return st.part(ctx, part)
}

func (st *stream) observedPart(ctx context.Context, part *abi.Part) (abi.Verdict, error) {
	start := time.Now()
	v, err := st.part(ctx, part)
	observe(ctx, st.p.rt.cfg.observer, st.p.name, "part", start, err)
	return v, err
}

// part is Part without the observer.
func (st *stream) part(ctx context.Context, part *abi.Part) (abi.Verdict, error) {
	if st.err != nil {
		return abi.Verdict{}, st.err
	}
	sz := part.Size()
	if sz > abi.MaxPartSize {
		// Never sent (ABI v1.3 §8.4): the provider's part, not the
		// guest's failure, so the breaker does not count it.
		return abi.Verdict{}, st.fail(st.p.perr("part", ErrLimit, &LimitError{Limit: "part size", Max: abi.MaxPartSize, Got: sz}))
	}
	st.inParts++
	st.inBytes += sz
	v, err := st.judge(ctx, part)
	if err != nil {
		return v, err
	}
	return st.frame(part, v), nil
}

// judge is the guest's (or a static) verdict on part.
func (st *stream) judge(ctx context.Context, part *abi.Part) (abi.Verdict, error) {
	if err := ctx.Err(); err != nil {
		return abi.Verdict{}, err
	}
	p := st.p
	if a := p.static[part.Kind]; a != abi.StaticCall {
		return st.staticVerdict(abi.PartAction(a))
	}
	switch st.state {
	case stUnopened:
		return st.openPart(ctx, part)
	case stForgotten:
		// The guest answered ERROR or DETACH: nothing more is sent to it.
		return abi.Verdict{Action: abi.PartDetach}, nil
	}
	// The hot path: an opened stream, one retryhost_part call, unless other
	// streams wait for the slot (then one retryhost_parts call for all).
	s := st.slot
	if !p.hasBatch {
		s.mu.Lock()
	} else if !s.mu.TryLock() {
		return st.partQueued(part)
	} else if s.waiting.Load() != 0 {
		r := st.enqueue(part)
		s.combine(p)
		s.mu.Unlock()
		return st.collect(r)
	}
	in := s.inst
	if s.gen != st.gen || in == nil {
		_, err := st.live("part")
		s.mu.Unlock()
		return abi.Verdict{}, st.fail(err)
	}
	rec := abi.AppendPart(in.scratch[:0], part)
	if cap(rec) != cap(in.scratch) {
		in.scratch = rec // grown; else rec shares its array (no write barrier)
	}
	in.writeInput(rec)
	in.stack[0], in.stack[1] = uint64(st.handle), uint64(len(rec))
	err := in.call(in.fnPart, 0)
	in.hasInput = false
	if a := in.stack[0]; err == nil && a < 8 && plainActions&(1<<a) != 0 {
		// PASS, HOLD, DROP or DETACH with no payload.
		st.settled(in, abi.PartAction(a))
		s.mu.Unlock()
		return abi.Verdict{Action: abi.PartAction(a)}, nil
	}
	v, err := st.verdict(in, "part", err)
	s.mu.Unlock()
	return v, err
}

// plainActions has bit a set for each action a that carries no payload.
const plainActions = 1<<abi.PartPass | 1<<abi.PartHold | 1<<abi.PartDrop | 1<<abi.PartDetach

// staticVerdict answers a part whose kind has a static verdict (ABI.md
// §8.7) without a call, as the guest would have.
func (st *stream) staticVerdict(a abi.PartAction) (abi.Verdict, error) {
	if st.p.released.Load() {
		return abi.Verdict{}, st.fail(st.p.perr("part", ErrClosed, nil))
	}
	if a == abi.PartDetach && st.state == stOpen {
		st.closeGuest()
	}
	return abi.Verdict{Action: a}, nil
}

// callPart judges one encoded part with retryhost_part; the caller holds
// the slot and has checked the stream is live.
func (st *stream) callPart(in *instance, rec []byte) (abi.Verdict, error) {
	in.writeInput(rec)
	in.stack[0], in.stack[1] = uint64(st.handle), uint64(len(rec))
	err := in.call(in.fnPart, 0)
	in.hasInput = false
	return st.verdict(in, "part", err)
}

// instance returns the slot's instance for the stream's lazy open; the
// caller holds the slot.
func (st *stream) instance(ctx context.Context) (*instance, error) {
	p := st.p
	if p.breaker.blocks(st.probe) {
		return nil, st.fail(p.perr("open", ErrDisabled, nil))
	}
	in, err := p.ready(ctx, st.slot, "open", st.probe)
	if err != nil {
		return nil, st.fail(err)
	}
	return in, nil
}

// openPart opens the stream in the guest and judges its first part: in
// one retryhost_open_part call when the guest exports it and both records
// fit the buffer, else retryhost_open then retryhost_part.
func (st *stream) openPart(ctx context.Context, part *abi.Part) (abi.Verdict, error) {
	p, s := st.p, st.slot
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := st.instance(ctx)
	if err != nil {
		return abi.Verdict{}, err
	}
	if in.fnOpenPart != nil {
		b := abi.AppendStreamInfo(in.scratch[:0], &st.info)
		infoLen := len(b)
		for len(b)&7 != 0 {
			b = append(b, 0)
		}
		off := len(b)
		b = abi.AppendPart(b, part)
		in.scratch = b
		if uint64(len(b)) <= uint64(in.bufCap) {
			h := in.handle()
			in.writeInput(b)
			in.stack[0], in.stack[1], in.stack[2] = uint64(h), uint64(infoLen), uint64(len(b)-off)
			err := in.call(in.fnOpenPart, 0)
			in.hasInput = false
			if err != nil {
				p.discard(s, "open", err)
				return abi.Verdict{}, st.fail(p.perr("open", kindOf(err), err))
			}
			if r := int64(in.stack[0]); r == int64(abi.OpenNoRoom) {
				// No room (ABI v1.2): not a failure of the plugin.
				in.release(h)
				return abi.Verdict{}, st.fail(p.perr("open", ErrNoCapacity, &ResultError{Export: abi.ExportOpenPart, Result: r}))
			}
			if _, _, err := abi.UnpackVerdict(in.stack[0]); err != nil {
				// The guest's open failed (ABI.md §6.3): it keeps no state
				// for the stream, so no close is owed.
				in.release(h)
				re := &ResultError{Export: abi.ExportOpenPart, Result: int64(in.stack[0])}
				p.failed("open", re)
				return abi.Verdict{}, st.fail(p.perr("open", ErrPluginFailed, re))
			}
			st.handle, st.gen, st.state = h, s.gen, stOpen
			return st.verdict(in, "part", nil)
		}
	}
	if err := st.openIn(in); err != nil {
		return abi.Verdict{}, err
	}
	in.scratch = abi.AppendPart(in.scratch[:0], part)
	return st.callPart(in, in.scratch)
}

// openIn opens the stream in the guest with retryhost_open; the caller
// holds the slot and in is its instance.
func (st *stream) openIn(in *instance) error {
	p, s := st.p, st.slot
	h := in.handle()
	in.scratch = abi.AppendStreamInfo(in.scratch[:0], &st.info)
	in.writeInput(in.scratch)
	in.stack[0], in.stack[1] = uint64(h), uint64(len(in.scratch))
	err := in.call(in.fnOpen, 0)
	in.hasInput = false
	if err != nil {
		p.discard(s, "open", err)
		return st.fail(p.perr("open", kindOf(err), err))
	}
	if r := int32(in.stack[0]); r < 0 {
		in.release(h)
		re := &ResultError{Export: abi.ExportOpen, Result: int64(r)}
		if r == abi.OpenNoRoom {
			// No room (ABI v1.2): not a failure of the plugin.
			return st.fail(p.perr("open", ErrNoCapacity, re))
		}
		p.failed("open", re)
		return st.fail(p.perr("open", ErrPluginFailed, re))
	}
	st.handle, st.gen, st.state = h, s.gen, stOpen
	return nil
}

// End resolves the end of a clean stream; HOLD becomes PASS.
func (st *stream) End(ctx context.Context) (abi.Verdict, error) {
	o := st.p.rt.cfg.observer
	if o == nil {
		return st.end(ctx)
	}
	start := time.Now()
	v, err := st.end(ctx)
	observe(ctx, o, st.p.name, "end", start, err)
	return v, err
}

func (st *stream) end(ctx context.Context) (abi.Verdict, error) {
	if st.err != nil {
		return abi.Verdict{}, st.err
	}
	if err := ctx.Err(); err != nil {
		return abi.Verdict{}, err
	}
	if st.state == stForgotten {
		st.held = st.held[:0]
		return abi.Verdict{}, nil // nothing held in the guest: PASS
	}
	s := st.slot
	s.mu.Lock()
	defer s.mu.Unlock()
	var in *instance
	var err error
	if st.state == stUnopened {
		// Reaching the end unopened: open first (ABI.md §6.3).
		if in, err = st.instance(ctx); err == nil {
			err = st.openIn(in)
		}
	} else if in, err = st.live("end"); err != nil {
		st.err = err
	}
	if err != nil {
		return abi.Verdict{}, err
	}
	in.stack[0] = uint64(st.handle)
	err = in.call(in.fnEnd, 0)
	v, err := st.verdict(in, "end", err)
	if err != nil {
		return v, err
	}
	return st.frameEnd(v), nil
}

// verdict turns a call's outcome into a Verdict; the caller holds the slot.
func (st *stream) verdict(in *instance, op string, callErr error) (abi.Verdict, error) {
	p := st.p
	if callErr != nil {
		p.discard(st.slot, op, callErr)
		return abi.Verdict{}, st.fail(p.perr(op, kindOf(callErr), callErr))
	}
	v, _, err := in.decodeVerdict(st, in.stack[0], 0)
	if err != nil {
		return abi.Verdict{}, st.fail(st.badVerdict(op, err))
	}
	st.settled(in, v.Action)
	if st.probe {
		st.probe = false
		p.succeeded()
	}
	return v, nil
}

// badVerdict handles a verdict the host cannot accept and returns the
// stream's error; the caller holds the slot. Over a REPLACE cap, only the
// stream fails (the guest is sound, its output too large); anything else
// is an ABI violation and discards the instance.
func (st *stream) badVerdict(op string, err error) error {
	p := st.p
	var le *LimitError
	if errors.As(err, &le) {
		p.failed(op, err)
		return p.perr(op, ErrLimit, le)
	}
	p.discard(st.slot, op, err)
	return p.perr(op, ErrABIViolation, err)
}

// settled notes that the guest forgot the stream by itself after answering
// a with auto_close (ABI.md §8.7): its handle is free and no close is owed.
// The caller holds the slot.
func (st *stream) settled(in *instance, a abi.PartAction) {
	if (a == abi.PartError || a == abi.PartDetach) && st.p.autoClose {
		in.release(st.handle)
		st.state = stForgotten
	}
}

// Close releases the stream's state in the guest, if it has any.
// Idempotent.
func (st *stream) Close() {
	if st.closed {
		return
	}
	st.closed = true
	if st.state == stOpen {
		st.closeGuest()
	}
	if st.probe {
		st.p.breaker.release() // closed before any verdict
	}
	if st.pinned {
		st.slot.pinned.Add(-1)
	}
	st.p.leave()
}

// closeGuest calls retryhost_close for an opened stream whose instance is
// still the one it opened on.
func (st *stream) closeGuest() {
	s := st.slot
	s.mu.Lock()
	if s.gen == st.gen && s.inst != nil {
		in := s.inst
		in.stack[0] = uint64(st.handle)
		if err := in.call(in.fnClose, 0); err != nil {
			st.p.discard(s, "close", err)
		} else {
			in.release(st.handle)
		}
	}
	s.mu.Unlock()
	st.state = stForgotten
}

// decodeVerdict decodes a packed verdict of stream st whose payload sits at
// offset off of the scratch buffer, and returns the payload's length. An
// error is an ABI violation, or a *LimitError for a REPLACE over its caps.
func (in *instance) decodeVerdict(st *stream, packed uint64, off uint32) (abi.Verdict, uint32, error) {
	name := st.p.name
	a, n, err := abi.UnpackVerdict(packed)
	v := abi.Verdict{Action: a}
	if err == nil {
		switch a {
		case abi.PartError:
			if n == 0 {
				v.Err = &abi.TransformError{Transform: name, Class: abi.ClassTransform}
				break
			}
			var b []byte
			if b, err = in.outputAt(off, n); err == nil {
				var e error
				if e, err = abi.DecodeError(b, name); err == nil {
					v.Err = e
				}
			}
		case abi.PartReplace:
			var b []byte
			if b, err = in.outputAt(off, n); err == nil {
				v.Replace, err = st.decodeReplace(b)
			}
		}
	}
	if err != nil && !errors.Is(err, ErrABIViolation) && !errors.Is(err, ErrLimit) {
		err = fmt.Errorf("%w: %w", ErrABIViolation, err)
	}
	return v, n, err
}

// replaceFactor is how many times what a stream sent through a transform
// its REPLACE verdicts may emit, beyond ReplaceLimits' stream allowance.
const replaceFactor = 4

// decodeReplace decodes a REPLACE list under the caps left for this call
// and this stream (ReplaceLimits), checked while decoding.
func (st *stream) decodeReplace(b []byte) ([]abi.Part, error) {
	lim := &st.p.rt.cfg.replace
	streamParts := lim.StreamParts + replaceFactor*st.inParts - st.outParts
	streamBytes := lim.StreamBytes + replaceFactor*st.inBytes - st.outBytes
	maxParts, maxBytes := min(lim.CallParts, streamParts), min(lim.CallBytes, streamBytes)
	ps, err := abi.DecodeReplace(b, max(maxParts, 0), max(maxBytes, 0))
	var ce *abi.CapError
	if errors.As(err, &ce) {
		le := &LimitError{Max: ce.Max}
		switch {
		case ce.Limit == "parts" && maxParts == lim.CallParts:
			le.Limit = "replace parts per call"
		case ce.Limit == "parts":
			le.Limit = "replace parts per stream"
		case maxBytes == lim.CallBytes:
			le.Limit = "replace bytes per call"
		default:
			le.Limit = "replace bytes per stream"
		}
		return nil, le
	}
	if err != nil {
		return nil, err
	}
	st.outParts += len(ps)
	for i := range ps {
		st.outBytes += ps[i].Size()
	}
	return ps, nil
}

// partQueued judges a part of an opened stream of a plugin that exports
// retryhost_parts while the slot is busy: the stream queues its part and
// waits for the slot. Whoever gets the slot first judges every queued part
// in one call, so under load one guarded call serves many streams.
func (st *stream) partQueued(part *abi.Part) (abi.Verdict, error) {
	s := st.slot
	r := st.enqueue(part)
	s.mu.Lock()
	if !r.done {
		s.combine(st.p)
	}
	s.mu.Unlock()
	return st.collect(r)
}

// enqueue encodes part into the stream's request and queues it on the slot.
func (st *stream) enqueue(part *abi.Part) *request {
	s, r := st.slot, &st.req
	r.st, r.rec, r.done = st, abi.AppendPart(r.rec[:0], part), false
	s.qmu.Lock()
	s.queue = append(s.queue, r)
	s.waiting.Store(int32(len(s.queue)))
	s.qmu.Unlock()
	return r
}

// collect returns the outcome the combiner left in r.
func (st *stream) collect(r *request) (abi.Verdict, error) {
	v, err := r.v, r.err
	r.v, r.err = abi.Verdict{}, nil
	if err != nil {
		st.err = err
	}
	return v, err
}

// combine judges every queued request; the caller holds s.mu.
func (s *slot) combine(p *Plugin) {
	s.qmu.Lock()
	all := s.queue
	s.queue, s.spare = s.spare[:0], nil
	s.waiting.Store(0)
	s.qmu.Unlock()
	for batch := all; len(batch) > 0; {
		n := s.combineOnce(p, batch)
		batch = batch[n:]
	}
	clear(all) // drop the references to the streams
	s.qmu.Lock()
	s.spare = all[:0] // the two slices alternate: no allocation per call
	s.qmu.Unlock()
}

// combineOnce judges a prefix of batch and returns its length (≥ 1).
func (s *slot) combineOnce(p *Plugin, batch []*request) int {
	const op = "part"
	first := batch[0]
	if _, err := first.st.live(op); err != nil {
		first.err, first.done = err, true
		return 1
	}
	in := s.inst
	// Pack as many entries as fit: align8(in_len) + 8×count ≤ cap.
	in.scratch = in.scratch[:0]
	count := 0
	for _, r := range batch {
		if r.st.gen != s.gen {
			break // lost its instance: judged alone above on the next round
		}
		need := len(in.scratch) + 12 + len(r.rec)
		if uint64(need+7)&^7+8*uint64(count+1) > uint64(in.bufCap) {
			break
		}
		in.scratch = binary.LittleEndian.AppendUint64(in.scratch, uint64(r.st.handle))
		in.scratch = binary.LittleEndian.AppendUint32(in.scratch, uint32(len(r.rec)))
		in.scratch = append(in.scratch, r.rec...)
		count++
	}
	if count == 0 {
		// Too big for the buffer: one retryhost_part call, input import.
		first.v, first.err = first.st.callPart(in, first.rec)
		first.done = true
		return 1
	}
	if count == 1 {
		// A batch of one costs more than a plain call.
		first.v, first.err = first.st.callPart(in, first.rec)
		first.done = true
		return 1
	}
	inLen := len(in.scratch)
	in.writeInput(in.scratch)
	in.stack[0], in.stack[1] = uint64(count), uint64(inLen)
	err := in.call(in.fnParts, 0)
	in.hasInput = false
	k := int32(in.stack[0])
	if err == nil && (k < 0 || int(k) > count) {
		err = fmt.Errorf("%w: retryhost_parts returned %d for %d entries", ErrABIViolation, k, count)
	}
	if err != nil {
		p.discard(s, op, err)
		e := p.perr(op, kindOf(err), err)
		for _, r := range batch[:count] {
			r.err, r.done = e, true
		}
		return count
	}
	off := uint32(inLen+7) &^ 7
	for i, r := range batch[:k] {
		b, err := in.outputAt(off, 8)
		var v abi.Verdict
		var n uint32
		if err == nil {
			v, n, err = in.decodeVerdict(r.st, binary.LittleEndian.Uint64(b), off+8)
		}
		var le *LimitError
		if errors.As(err, &le) {
			// Only this stream fails; the batch goes on.
			p.failed(op, err)
			r.err, r.done = p.perr(op, ErrLimit, le), true
			off += 8 + binary.LittleEndian.Uint32(b[4:])
			continue
		}
		if err != nil {
			p.discard(s, op, err)
			e := p.perr(op, ErrABIViolation, err)
			for _, r := range batch[i:count] {
				r.err, r.done = e, true
			}
			return count
		}
		r.v, r.done = v, true
		r.st.settled(in, v.Action)
		off += 8 + n
	}
	if k == 0 {
		// No progress: judge the first entry alone.
		first.v, first.err = first.st.callPart(in, first.rec)
		first.done = true
		return 1
	}
	return int(k)
}
