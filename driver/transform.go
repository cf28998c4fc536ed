package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// The hold-queue defaults of abi.TransformPolicy.
const (
	defaultMaxHeldParts = 256
	defaultMaxHeldBytes = 64 << 10
	defaultMaxHoldTime  = 10 * time.Second
)

// stage is one transform of a chain, for one attempt. The driver owns its
// hold queue: the transform only says what to do with it.
type stage struct {
	name   string
	policy abi.TransformPolicy // defaults filled in
	st     abi.StreamTransform // nil once detached (or never opened)
	held   []Part
	bytes  int
	output int       // held parts that carry output (commit the stream under the chain's rule)
	raws   int       // raw parts held behind the transform's own (pushRaw); not the transform's to count
	beats  int       // empty deltas held (heartbeats): counted for no cap, at most MaxHeldParts of them
	since  time.Time // when the oldest held part arrived
}

// chain runs a stream's parts through its transforms in order. It is used
// by one goroutine (the one pulling the stream).
type chain struct {
	ctx    context.Context
	clock  clock
	commit CommitRule // which held parts are output (see holdDue)
	stages []stage
	active int // stages not yet detached

	// carry is a raw part that arrived while no stage held anything: it
	// waits for the part after it, the first part mapped from its chunk,
	// and goes where that part goes (see pushRaw).
	carry    Part
	carrying bool
}

// openChain opens one instance of every transformer for this attempt. A
// transformer that fails to open (or panics) is subject to its FailPolicy:
// fail-open leaves its stage detached, fail-closed fails the attempt.
func openChain(ctx context.Context, c clock, ts []abi.Transformer, info abi.StreamInfo) (*chain, error) {
	ch := &chain{}
	if err := ch.open(ctx, c, ts, info); err != nil {
		return nil, err
	}
	return ch, nil
}

// open is openChain into ch, a zero chain (one held in an attemptStream).
func (ch *chain) open(ctx context.Context, c clock, ts []abi.Transformer, info abi.StreamInfo) error {
	ch.ctx, ch.clock = ctx, c
	if len(ts) == 0 {
		return nil
	}
	ch.stages = make([]stage, len(ts))
	for i, t := range ts {
		s := &ch.stages[i]
		s.name = t.Name()
		s.policy = withPolicyDefaults(t.Policy())
		st, err := openTransform(ctx, t, info)
		if err != nil {
			if s.policy.Fail == abi.FailClosed {
				ch.close()
				return &abi.TransformError{Transform: s.name, Class: abi.ClassPlugin, Message: "open: " + err.Error(), Err: err}
			}
			continue
		}
		s.st = st
		ch.active++
	}
	return nil
}

func withPolicyDefaults(p abi.TransformPolicy) abi.TransformPolicy {
	if p.MaxHeldParts <= 0 {
		p.MaxHeldParts = defaultMaxHeldParts
	}
	if p.MaxHeldBytes <= 0 {
		p.MaxHeldBytes = defaultMaxHeldBytes
	}
	if p.MaxHoldTime <= 0 {
		p.MaxHoldTime = defaultMaxHoldTime
	}
	return p
}

func openTransform(ctx context.Context, t abi.Transformer, info abi.StreamInfo) (st abi.StreamTransform, err error) {
	defer func() {
		if r := recover(); r != nil {
			st, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	st, err = t.Open(ctx, info)
	if err == nil && st == nil {
		err = fmt.Errorf("Open returned no stream transform")
	}
	return st, err
}

// push runs p through the stages from i on and appends what leaves the
// chain to *out, in order. An error fails the attempt.
func (c *chain) push(i int, p Part, out *[]Part) error {
	if p.Kind == abi.KindRaw {
		c.pushRaw(i, p, out)
		return nil
	}
	for ; i < len(c.stages); i++ {
		s := &c.stages[i]
		if s.st == nil {
			continue
		}
		v, err := callPart(c.ctx, s.st, &p)
		if err == nil {
			err = checkVerdict(&v)
		}
		if err != nil {
			if ferr := c.transformFailed(i, err, out); ferr != nil {
				return ferr
			}
			continue // fail-open: the part passes on, untouched
		}
		switch v.Action {
		case abi.PartPass:
			if err := c.release(i, out); err != nil {
				return err
			}
		case abi.PartHold:
			return c.hold(i, p, out)
		case abi.PartError:
			c.discard(s)
			c.dropCarry()
			if v.Err == nil {
				v.Err = &abi.TransformError{Transform: s.name, Class: abi.ClassTransform, Message: "error verdict"}
			}
			return v.Err
		case abi.PartDrop:
			if c.carrying && !carriesAhead(p.Kind) {
				c.dropCarry()
			}
			return nil
		case abi.PartReplace:
			c.discard(s)
			c.dropCarry()
			for _, r := range v.Replace {
				if err := c.push(i+1, r, out); err != nil {
					return err
				}
			}
			return nil
		case abi.PartDetach:
			if err := c.detach(i, out); err != nil {
				return err
			}
		}
	}
	if c.carrying && (!carriesAhead(p.Kind) || c.active == 0) {
		// (With every transform detached, nothing would take it later.)
		c.carrying = false
		*out = append(*out, c.carry)
		c.carry = Part{}
	}
	*out = append(*out, p)
	return nil
}

// isDelta reports whether k is a delta kind: text, reasoning or tool input.
func isDelta(k PartKind) bool {
	return k == abi.KindTextDelta || k == abi.KindReasoningDelta || k == abi.KindToolInputDelta
}

// carriesAhead reports whether a part of kind k goes ahead of the raw
// part waiting in the carry rather than taking it along: a text or
// reasoning block's start carries no content a transform rewrites, and
// the chunk the raw part records is the text after it (a tool's input
// start does carry content: its name).
func carriesAhead(k PartKind) bool {
	switch k {
	case abi.KindTextStart, abi.KindReasoningStart:
		return true
	}
	return false
}

// dropCarry discards the raw part waiting in the carry: the part it
// waited for was dropped or replaced, and its chunk is the text that part
// carried (ABI §6.5).
func (c *chain) dropCarry() {
	if c.carrying {
		c.carrying = false
		c.carry = Part{}
	}
}

// end resolves what every stage still holds, in chain order, when the
// upstream ended cleanly.
func (c *chain) end(out *[]Part) error {
	if c.carrying {
		// Nothing came after it, and nothing was held when it came.
		c.carrying = false
		*out = append(*out, c.carry)
		c.carry = Part{}
	}
	for i := range c.stages {
		s := &c.stages[i]
		if s.st == nil {
			continue
		}
		v, err := callEnd(c.ctx, s.st)
		if err == nil {
			err = checkVerdict(&v)
		}
		if err != nil {
			if ferr := c.transformFailed(i, err, out); ferr != nil {
				return ferr
			}
			continue
		}
		switch v.Action {
		case abi.PartError:
			c.discard(s)
			if v.Err == nil {
				v.Err = &abi.TransformError{Transform: s.name, Class: abi.ClassTransform, Message: "error verdict at end of stream"}
			}
			return v.Err
		case abi.PartDrop:
			c.discard(s)
		case abi.PartReplace:
			c.discard(s)
			for _, r := range v.Replace {
				if err := c.push(i+1, r, out); err != nil {
					return err
				}
			}
		}
		// Pass, Hold and Detach release what is left.
		if err := c.detach(i, out); err != nil {
			return err
		}
	}
	return nil
}

// pushRaw moves a raw part through the stages from i on without calling
// any transform: a raw part is the provider's record of the chunk its
// neighbours came from, not content, so no transform judges it (a guest
// never receives one, ABI §6.4). It keeps its place in the stream: the
// first stage that holds parts holds it behind them, and it leaves with
// them when they are released (then on through the later stages the same
// way), or is discarded with them when the transform REPLACEs, DROPs (at
// the end) or ERRORs them away. A rewritten text then never goes out next
// to the raw chunk, and the logprobs, of the text it replaced.
//
// The held raw parts are not the transform's: they count for none of its
// caps and never start its hold time. They are bounded all the same: a
// stage holds at most MaxHeldParts of them, and a raw part past that is
// dropped (raw parts are best-effort metadata; the content is whole).
//
// A raw part that arrives while no stage holds anything waits, in the
// carry, for the next part (an adapter emits a chunk's raw part before the
// parts mapped from it, so that is its chunk's first part; a text or
// reasoning block's start goes ahead of it), and goes where that part
// goes: on, into a queue before it, or away with it when a transform
// drops or replaces it (ABI §6.5, v1.3). A raw chunk of a text a
// transform redacted never reaches the caller, even when the transform
// held nothing before it.
func (c *chain) pushRaw(i int, p Part, out *[]Part) {
	for ; i < len(c.stages); i++ {
		s := &c.stages[i]
		if s.st == nil || len(s.held) == 0 {
			continue
		}
		if c.carrying {
			// A block's start went ahead of it and is held here.
			c.carrying = false
			c.holdRaw(s, c.carry)
			c.carry = Part{}
		}
		c.holdRaw(s, p)
		return
	}
	if c.active == 0 {
		*out = append(*out, p)
		return
	}
	if c.carrying {
		// The raw part before it mapped to no part: nothing to wait for.
		*out = append(*out, c.carry)
	}
	c.carry, c.carrying = p, true
}

// holdRaw appends the raw part p to stage s's queue, unless the stage
// holds its cap of raw parts already.
func (c *chain) holdRaw(s *stage, p Part) {
	if s.raws >= s.policy.MaxHeldParts {
		return
	}
	s.held = append(s.held, p)
	s.raws++
	if c.commit.IsContent(&p) { // CommitLegacy: a raw chunk commits
		s.output++
	}
}

// hold appends p to stage i's queue, unless a cap would be exceeded: then
// the stage's OnCap decides (flush and detach, or fail the attempt). The
// time cap is checked here as parts arrive and, while the upstream is
// silent, by the stream's wait for the next part (holdDue, expire), so
// held parts never wait longer than MaxHoldTime for a provider that sends
// nothing more.
func (c *chain) hold(i int, p Part, out *[]Part) error {
	s := &c.stages[i]
	now := c.clock.Now()
	capHit := ""
	if p.Delta == "" && isDelta(p.Kind) {
		// An empty delta is a heartbeat: it counts for no hold cap (ABI
		// v1.3, §8.7), so a provider's keep-alives never hit one. Past
		// MaxHeldParts of them it is dropped: it carries nothing.
		if s.beats < s.policy.MaxHeldParts {
			if len(s.held) == 0 {
				s.since = now
			}
			if c.carrying {
				c.carrying = false
				c.holdRaw(s, c.carry)
				c.carry = Part{}
			}
			s.held = append(s.held, p)
			s.beats++
		}
		return nil
	}
	switch {
	case p.Kind == abi.KindFinish:
		// The finish is framing a transform holds until the end (ABI
		// v1.3, §6.4): one per stream, counted for no cap.
	case len(s.held)-s.raws-s.beats+1 > s.policy.MaxHeldParts:
		capHit = "parts"
	case s.bytes+p.Size() > s.policy.MaxHeldBytes:
		capHit = "bytes"
	case len(s.held) > 0 && now.Sub(s.since) > s.policy.MaxHoldTime:
		capHit = "time"
	}
	if capHit == "" {
		if len(s.held) == 0 {
			s.since = now
		}
		if c.carrying && !carriesAhead(p.Kind) {
			c.carrying = false
			c.holdRaw(s, c.carry)
			c.carry = Part{}
		}
		s.held = append(s.held, p)
		s.bytes += p.Size()
		if c.commit.IsContent(&p) {
			s.output++
		}
		return nil
	}
	if err := c.capHit(i, capHit, now, out); err != nil {
		return err
	}
	return c.push(i+1, p, out)
}

// capHit applies stage i's OnCap to a hold cap it reached: fail the
// attempt with a *abi.HoldCapError, or release the queue in order and
// detach.
func (c *chain) capHit(i int, capName string, now time.Time, out *[]Part) error {
	s := &c.stages[i]
	if s.policy.FailsAtCap() {
		err := &abi.HoldCapError{Transform: s.name, Cap: capName, Parts: len(s.held) - s.raws - s.beats, Bytes: s.bytes}
		if len(s.held) > 0 {
			err.Held = now.Sub(s.since)
		}
		c.discard(s)
		return err
	}
	return c.detach(i, out)
}

// holdDue reports whether a stage holds parts whose hold time must be
// enforced while the upstream is silent and, if so, when the oldest of them
// has waited its stage's MaxHoldTime. After commit that is every held part
// (the caller is waiting for it). Before commit a stage counts only when
// its cap would change what happens: it holds output (a flush would
// commit it) or its OnCap fails the attempt. A flush of non-output parts
// before commit is not observable (the gate keeps them until commit, and
// the next part's arrival applies the same cap), so the common preamble
// hold (a refusal detector's stream start, metadata and text start) waits
// on the upstream directly, with no reader goroutine.
func (c *chain) holdDue(committed bool) (due time.Time, held bool) {
	if c.active == 0 {
		return due, false
	}
	for i := range c.stages {
		s := &c.stages[i]
		if s.st == nil || len(s.held) == 0 || !(committed || s.output > 0 || s.policy.OnCap == abi.CapFail) {
			continue
		}
		if d := s.since.Add(s.policy.MaxHoldTime); !held || d.Before(due) {
			due, held = d, true
		}
	}
	return due, held
}

// expire applies the time cap, in chain order, to every stage whose oldest
// held part has waited MaxHoldTime at now: what a flush releases goes on
// through the later stages into *out; a fail returns the attempt's error.
func (c *chain) expire(now time.Time, out *[]Part) error {
	for i := range c.stages {
		s := &c.stages[i]
		if s.st == nil || len(s.held) == 0 || now.Sub(s.since) < s.policy.MaxHoldTime {
			continue
		}
		if err := c.capHit(i, "time", now, out); err != nil {
			return err
		}
	}
	return nil
}

// release sends stage i's held parts on to the next stage, in order.
func (c *chain) release(i int, out *[]Part) error {
	s := &c.stages[i]
	if len(s.held) == 0 {
		return nil
	}
	held := s.held
	s.held, s.bytes, s.output, s.raws, s.beats = nil, 0, 0, 0, 0 // a re-entrant hold (impossible today) would not see them
	var err error
	for _, h := range held {
		if err = c.push(i+1, h, out); err != nil {
			break
		}
	}
	clear(held)
	s.held = held[:0]
	return err
}

// detach releases stage i's queue and closes its transform: it is never
// called again in this stream.
func (c *chain) detach(i int, out *[]Part) error {
	s := &c.stages[i]
	err := c.release(i, out)
	if s.st != nil {
		closeTransform(s.st)
		s.st = nil
		c.active--
	}
	s.held, s.output, s.raws, s.beats = nil, 0, 0, 0
	return err
}

func (c *chain) discard(s *stage) {
	clear(s.held)
	s.held, s.bytes, s.output, s.raws, s.beats = s.held[:0], 0, 0, 0, 0
}

// transformFailed applies stage i's FailPolicy to a failure of the
// transform itself: fail-open detaches it (releasing its queue), fail-closed
// returns the attempt's error.
func (c *chain) transformFailed(i int, cause error, out *[]Part) error {
	s := &c.stages[i]
	if s.policy.Fail == abi.FailClosed {
		c.discard(s)
		closeTransform(s.st)
		s.st = nil
		c.active--
		return &abi.TransformError{Transform: s.name, Class: abi.ClassPlugin, Message: cause.Error(), Err: cause}
	}
	return c.detach(i, out)
}

// close closes every transform still open. Safe to call more than once.
func (c *chain) close() {
	for i := range c.stages {
		s := &c.stages[i]
		if s.st != nil {
			closeTransform(s.st)
			s.st = nil
			c.active--
		}
		s.held = nil
	}
	c.dropCarry()
}

func checkVerdict(v *abi.Verdict) error {
	if !v.Action.Valid() {
		return fmt.Errorf("invalid verdict action %d", v.Action)
	}
	if v.Action == abi.PartReplace {
		for i := range v.Replace {
			if !v.Replace[i].Kind.Valid() {
				return fmt.Errorf("replacement part %d has invalid kind %d", i, v.Replace[i].Kind)
			}
		}
	}
	return nil
}

// The calls into a transform contain its panics: a panic is a failure of
// the transform, to which its FailPolicy applies, never the caller's crash.

func callPart(ctx context.Context, st abi.StreamTransform, p *Part) (v abi.Verdict, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = abi.Verdict{}, fmt.Errorf("panic: %v", r)
		}
	}()
	return st.Part(ctx, p)
}

func callEnd(ctx context.Context, st abi.StreamTransform) (v abi.Verdict, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = abi.Verdict{}, fmt.Errorf("panic: %v", r)
		}
	}()
	return st.End(ctx)
}

func closeTransform(st abi.StreamTransform) {
	defer func() { _ = recover() }() // a panicking Close has nothing left to affect
	st.Close()
}
