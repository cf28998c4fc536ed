package host

import (
	"context"
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
	hints    abi.Hints

	// static is hints.Static as a table (abi.StaticCall: call the guest);
	// autoClose is hints.AutoClose.
	static    abi.StaticTable
	autoClose bool

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

// Hints returns the ABI v1.1 hints the plugin declared with its policy in
// its init (the first instance's, like the policy): the part kinds whose
// verdict is static, which the host answers itself without a call, and
// whether the guest forgets a stream by itself after ERROR or DETACH. The
// zero Hints (a v1.0 plugin, or a malformed hints tail) asks for every call.
func (p *Plugin) Hints() abi.Hints {
	h := p.hints
	if h.Static != nil {
		h.Static = make(map[abi.PartKind]abi.PartAction, len(p.hints.Static))
		for k, a := range p.hints.Static {
			h.Static[k] = a
		}
	}
	return h
}

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
