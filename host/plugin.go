package host

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/retryhost/retryhost/abi"
)

// Plugin is one loaded, verified version of a plugin with its pool of warm
// instances. It is a condition if the module exports retryhost_decide
// (methods Decide and FailPolicy) and a transform if it exports the
// transform functions (it then satisfies [abi.Transformer]).
//
// Streams are pinned to one instance for their life; each instance holds
// many streams' states, told apart by a handle. A Plugin is safe for
// concurrent use by multiple goroutines.
type Plugin struct {
	rt       *Runtime
	name     string
	sum      [32]byte
	compiled wazero.CompiledModule
	config   []byte
	policy   abi.TransformPolicy

	isCondition, isTransform, hasBatch bool

	slots   []*slot
	rr      atomic.Uint32
	breaker breaker

	life     sync.Mutex
	active   int
	closing  bool
	retired  bool
	idle     chan struct{}
	idleDone bool
	released atomic.Bool
}

// slot holds one instance position of the pool. Its mutex serialises every
// call into the instance; the generation changes whenever the instance is
// discarded, which is how a stream learns that its state is gone.
type slot struct {
	mu   sync.Mutex
	inst *instance
	gen  uint64

	// Parts waiting for this instance, combined into one retryhost_parts
	// call by whichever waiter gets mu first (flat combining).
	qmu   sync.Mutex
	queue []*request
	spare []*request
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

// Name returns the name the plugin was loaded under.
func (p *Plugin) Name() string { return p.name }

// SHA256 returns the hex sha256 of the module's bytes.
func (p *Plugin) SHA256() string { return hex.EncodeToString(p.sum[:]) }

// IsCondition reports whether the plugin exports retryhost_decide.
func (p *Plugin) IsCondition() bool { return p.isCondition }

// IsTransform reports whether the plugin exports the transform functions.
func (p *Plugin) IsTransform() bool { return p.isTransform }

// Policy returns the transform policy: the one given with [WithPolicy],
// else the one the plugin declared in its init, else the zero policy
// (fail-open, default caps).
func (p *Plugin) Policy() abi.TransformPolicy { return p.policy }

// FailPolicy returns what a failure of this plugin means to the driver
// (Policy().Fail): fail-open by default.
func (p *Plugin) FailPolicy() abi.FailPolicy { return p.policy.Fail }

func (p *Plugin) perr(op string, kind, err error) error {
	return &PluginError{Plugin: p.name, Op: op, Kind: kind, Err: err}
}

func kindOf(err error) error {
	for _, k := range []error{ErrTimeout, ErrExit, ErrABIViolation, ErrTrap} {
		if errors.Is(err, k) {
			return k
		}
	}
	return ErrTrap
}

// enter registers a call or stream in flight; false once the plugin closes.
func (p *Plugin) enter() bool {
	p.life.Lock()
	defer p.life.Unlock()
	if p.closing {
		return false
	}
	p.active++
	return true
}

func (p *Plugin) leave() {
	p.life.Lock()
	p.active--
	release := false
	if p.closing && p.active == 0 {
		if p.idle != nil && !p.idleDone {
			p.idleDone = true
			close(p.idle)
		}
		release = p.retired
	}
	p.life.Unlock()
	if release {
		p.release()
	}
}

// retire stops new work and releases the plugin as soon as the streams and
// calls in flight are done (hot swap: they finish on this version).
func (p *Plugin) retire() {
	p.life.Lock()
	p.closing, p.retired = true, true
	now := p.active == 0
	p.life.Unlock()
	if now {
		p.release()
	}
}

// Close has http.Server.Shutdown semantics: new calls and streams fail with
// [ErrClosed]; it waits until the streams and calls in flight are done or
// ctx is done, then releases the instances and the compiled module, and
// returns ctx.Err() if it stopped waiting. It is idempotent.
func (p *Plugin) Close(ctx context.Context) error {
	p.life.Lock()
	p.closing = true
	if p.idle == nil {
		p.idle = make(chan struct{})
		if p.active == 0 {
			p.idleDone = true
			close(p.idle)
		}
	}
	idle := p.idle
	p.life.Unlock()
	var err error
	select {
	case <-idle:
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.release()
	return err
}

func (p *Plugin) release() {
	if p.released.Swap(true) {
		return
	}
	p.closeInstances(context.Background())
	_ = p.compiled.Close(context.Background())
	p.rt.forget(p)
}

func (p *Plugin) closeInstances(context.Context) {
	for _, s := range p.slots {
		s.mu.Lock()
		if s.inst != nil {
			s.inst.close()
			s.inst = nil
			s.gen++
		}
		s.mu.Unlock()
	}
}

// ready returns the slot's live instance, replacing a discarded one. The
// caller holds s.mu.
func (p *Plugin) ready(ctx context.Context, s *slot, op string) (*instance, error) {
	if s.inst != nil {
		return s.inst, nil
	}
	if p.released.Load() {
		return nil, p.perr(op, ErrClosed, nil)
	}
	if p.breaker.tripped.Load() {
		return nil, p.perr(op, ErrDisabled, nil)
	}
	in, err := p.instantiate(ctx)
	if err != nil {
		p.failed(op, err)
		return nil, p.perr(op, ErrInstanceLost, err)
	}
	s.inst = in
	return in, nil
}

// discard drops the slot's instance after err; the caller holds s.mu.
func (p *Plugin) discard(s *slot, op string, err error) {
	in := s.inst
	s.inst = nil
	s.gen++
	in.logDiscard(op, err)
	in.close()
	p.failed(op, err)
}

// failed feeds the crash-loop breaker.
func (p *Plugin) failed(op string, err error) {
	if p.breaker.fail(p.rt.now()) {
		p.rt.cfg.logger.Error("plugin disabled: too many failures; load a new version to re-enable it",
			"plugin", p.name, "failures", p.breaker.n, "within", p.breaker.span, "op", op, "last_error", err)
	}
}

// lockAny locks a slot for a condition call, preferring an idle one.
func (p *Plugin) lockAny() *slot {
	start := int(p.rr.Add(1))
	for i := range p.slots {
		s := p.slots[(start+i)%len(p.slots)]
		if s.mu.TryLock() {
			return s
		}
	}
	s := p.slots[start%len(p.slots)]
	s.mu.Lock()
	return s
}

// Decide runs the condition on a. A zero Decision is "no opinion".
//
// # Errors
//
// ctx.Err() if ctx is already done (the guest call itself is bounded by the
// runtime's per-call timeout, not by ctx), or a [*PluginError] whose Kind
// says what failed; the driver then applies [Plugin.FailPolicy].
func (p *Plugin) Decide(ctx context.Context, a *abi.Attempt) (abi.Decision, error) {
	o := p.rt.cfg.observer
	if o == nil {
		return p.decide(ctx, a)
	}
	start := time.Now()
	d, err := p.decide(ctx, a)
	observe(ctx, o, p.name, "decide", start, err)
	return d, err
}

func (p *Plugin) decide(ctx context.Context, a *abi.Attempt) (abi.Decision, error) {
	if !p.isCondition {
		return abi.Decision{}, p.perr("decide", ErrWrongKind, nil)
	}
	if err := ctx.Err(); err != nil {
		return abi.Decision{}, err
	}
	if !p.enter() {
		return abi.Decision{}, p.perr("decide", ErrClosed, nil)
	}
	defer p.leave()
	if p.breaker.tripped.Load() {
		return abi.Decision{}, p.perr("decide", ErrDisabled, nil)
	}
	s := p.lockAny()
	defer s.mu.Unlock()
	in, err := p.ready(ctx, s, "decide")
	if err != nil {
		return abi.Decision{}, err
	}
	in.scratch = abi.AppendAttempt(in.scratch[:0], a)
	in.writeInput(in.scratch)
	in.stack[0] = uint64(len(in.scratch))
	err = in.call(in.fnDecide, 0)
	in.hasInput = false
	if err != nil {
		p.discard(s, "decide", err)
		return abi.Decision{}, p.perr("decide", kindOf(err), err)
	}
	r := int32(in.stack[0])
	switch {
	case r == 0:
		return abi.Decision{}, nil
	case r < 0:
		p.failed("decide", abi.Status(r))
		return abi.Decision{}, p.perr("decide", ErrPluginFailed, abi.Status(r))
	}
	b, err := in.output(uint32(r))
	if err == nil {
		var d abi.Decision
		if d, err = abi.DecodeDecision(b); err == nil {
			return d, nil
		}
		err = fmt.Errorf("%w: %w", ErrABIViolation, err)
	}
	p.discard(s, "decide", err)
	return abi.Decision{}, p.perr("decide", ErrABIViolation, err)
}

// Open starts the transform's state for one stream, on one of the
// plugin's instances. The returned StreamTransform must be closed.
//
// # Errors
//
// ctx.Err() if ctx is already done, or a [*PluginError]; the driver then
// applies Policy().Fail.
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
	st, err := p.open(ctx, info)
	if err != nil {
		p.leave()
		return nil, err
	}
	return st, nil
}

// TODO(next): open and close are one guarded call each and are not
// combined like parts; under load they dominate a short stream's cost
// (Benchmark10kStreams). A batch form for them needs an ABI minor version.
func (p *Plugin) open(ctx context.Context, info abi.StreamInfo) (*stream, error) {
	if p.breaker.tripped.Load() {
		return nil, p.perr("open", ErrDisabled, nil)
	}
	s := p.slots[int(p.rr.Add(1))%len(p.slots)]
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := p.ready(ctx, s, "open")
	if err != nil {
		return nil, err
	}
	h := in.handle()
	in.scratch = abi.AppendStreamInfo(in.scratch[:0], &info)
	in.writeInput(in.scratch)
	in.stack[0], in.stack[1] = uint64(h), uint64(len(in.scratch))
	err = in.call(in.fnOpen, 0)
	in.hasInput = false
	if err != nil {
		p.discard(s, "open", err)
		return nil, p.perr("open", kindOf(err), err)
	}
	if r := int32(in.stack[0]); r < 0 {
		in.release(h)
		p.failed("open", abi.Status(r))
		return nil, p.perr("open", ErrPluginFailed, abi.Status(r))
	}
	return &stream{p: p, slot: s, gen: s.gen, handle: h}, nil
}

// stream is one transform stream pinned to a slot's instance. The driver
// uses it from one goroutine at a time.
type stream struct {
	p      *Plugin
	slot   *slot
	gen    uint64
	handle uint32
	err    error // sticky: after a failure every call returns it
	closed bool
	req    request
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
	o := st.p.rt.cfg.observer
	if o == nil {
		return st.part(ctx, part)
	}
	start := time.Now()
	v, err := st.part(ctx, part)
	observe(ctx, o, st.p.name, "part", start, err)
	return v, err
}

func (st *stream) part(ctx context.Context, part *abi.Part) (abi.Verdict, error) {
	if st.err != nil {
		return abi.Verdict{}, st.err
	}
	if err := ctx.Err(); err != nil {
		return abi.Verdict{}, err
	}
	if st.p.hasBatch {
		return st.partCombined(part)
	}
	s := st.slot
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := st.live("part")
	if err != nil {
		st.err = err
		return abi.Verdict{}, err
	}
	in.scratch = abi.AppendPart(in.scratch[:0], part)
	in.writeInput(in.scratch)
	in.stack[0], in.stack[1] = uint64(st.handle), uint64(len(in.scratch))
	err = in.call(in.fnPart, 0)
	in.hasInput = false
	return st.verdict(in, "part", err)
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
	s := st.slot
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := st.live("end")
	if err != nil {
		st.err = err
		return abi.Verdict{}, err
	}
	in.stack[0] = uint64(st.handle)
	err = in.call(in.fnEnd, 0)
	v, err := st.verdict(in, "end", err)
	if v.Action == abi.PartHold {
		v.Action = abi.PartPass
	}
	return v, err
}

// verdict turns a call's outcome into a Verdict; the caller holds the slot.
func (st *stream) verdict(in *instance, op string, callErr error) (abi.Verdict, error) {
	p := st.p
	if callErr != nil {
		p.discard(st.slot, op, callErr)
		st.err = p.perr(op, kindOf(callErr), callErr)
		return abi.Verdict{}, st.err
	}
	v, _, err := in.decodeVerdict(p.name, in.stack[0], 0)
	if err != nil {
		if !errors.Is(err, ErrABIViolation) {
			err = fmt.Errorf("%w: %w", ErrABIViolation, err)
		}
		p.discard(st.slot, op, err)
		st.err = p.perr(op, ErrABIViolation, err)
		return abi.Verdict{}, st.err
	}
	return v, nil
}

// Close releases the stream's state in the guest. Idempotent.
func (st *stream) Close() {
	if st.closed {
		return
	}
	st.closed = true
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
	st.p.leave()
}

// breaker disables a plugin version after n failures within span.
type breaker struct {
	n       int
	span    time.Duration
	mu      sync.Mutex
	times   []int64
	tripped atomic.Bool
}

// fail records a failure at now and reports whether this one tripped it.
func (b *breaker) fail(now int64) bool {
	if b.n <= 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.times = append(b.times, now)
	cut := 0
	for cut < len(b.times) && b.times[cut] < now-int64(b.span) {
		cut++
	}
	b.times = b.times[cut:]
	if len(b.times) >= b.n && !b.tripped.Load() {
		b.tripped.Store(true)
		return true
	}
	return false
}

// decodeVerdict decodes a packed verdict whose payload sits at offset off of
// the scratch buffer, and returns the payload's length. An error is an ABI
// violation.
func (in *instance) decodeVerdict(name string, packed uint64, off uint32) (abi.Verdict, uint32, error) {
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
				v.Replace, err = abi.DecodeParts(b)
			}
		}
	}
	if err != nil && !errors.Is(err, ErrABIViolation) {
		err = fmt.Errorf("%w: %w", ErrABIViolation, err)
	}
	return v, n, err
}

// partCombined judges a part through retryhost_parts: the stream queues its
// part on its slot, then waits for the slot. Whoever gets the slot first
// judges every queued part in one call, so under load one guarded call
// serves many streams; alone, a stream pays one call as before.
func (st *stream) partCombined(part *abi.Part) (abi.Verdict, error) {
	s := st.slot
	r := &st.req
	r.st, r.rec, r.done, r.v, r.err = st, abi.AppendPart(r.rec[:0], part), false, abi.Verdict{}, nil
	s.qmu.Lock()
	s.queue = append(s.queue, r)
	s.qmu.Unlock()
	s.mu.Lock()
	if !r.done {
		s.combine(st.p)
	}
	s.mu.Unlock()
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
		first.v, first.err = first.st.partSingle(in, first.rec)
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
			v, n, err = in.decodeVerdict(p.name, binary.LittleEndian.Uint64(b), off+8)
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
		off += 8 + n
	}
	if k == 0 {
		// No progress: judge the first entry alone.
		first.v, first.err = first.st.partSingle(in, first.rec)
		first.done = true
		return 1
	}
	return int(k)
}

// partSingle judges one encoded part with retryhost_part; the caller holds
// the slot and has checked the stream is live.
func (st *stream) partSingle(in *instance, rec []byte) (abi.Verdict, error) {
	in.scratch = append(in.scratch[:0], rec...)
	in.writeInput(in.scratch)
	in.stack[0], in.stack[1] = uint64(st.handle), uint64(len(in.scratch))
	err := in.call(in.fnPart, 0)
	in.hasInput = false
	return st.verdict(in, "part", err)
}
