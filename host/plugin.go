package host

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
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

	// maxStreams is the guest's declared capacity per instance (ABI v1.2
	// hints), 0 if none; slot.pinned counts against it.
	maxStreams int32

	slots   []*slot
	rr      atomic.Uint32
	breaker breaker
	// The plugin's output budgets over its life, shared by its instances
	// (a trap must not reset them): lines through the log import, and
	// stdout and stderr (capWriter, made with the first instance).
	logLines       atomic.Int64
	outOnce        sync.Once
	stdout, stderr *capWriter
	// memUsed is the linear memory its live instances hold together, in
	// bytes (guestMemory), against WithPluginMemory.
	memUsed atomic.Int64
	// slow: a call of this plugin ran more than a quarter of the timeout,
	// so its calls are measured in CPU time (instance.measuredCall).
	slow atomic.Bool

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

// Policy returns the transform policy: the one given with [WithPolicy] as
// is, else the one the plugin declared in its init (or the zero policy,
// fail-open, if it declared none) with its hold caps clamped to the
// operator's maxima ([WithHoldLimits]): a cap left at 0, or declared above
// the maximum, is the maximum.
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

// settle fixes the plugin's policy and hints after the first instance's
// init: the operator's WithPolicy as given, else what the plugin declared
// with its hold caps clamped to the operator's maxima (WithHoldLimits: a
// plugin may only tighten them, and an undeclared cap is the maximum).
func (p *Plugin) settle(override, declared *abi.TransformPolicy, hints abi.Hints) {
	switch {
	case override != nil:
		p.policy = *override
	default:
		if declared != nil {
			p.policy = *declared
		}
		lim := &p.rt.cfg.hold
		clamp := func(v *int, max int) {
			if *v <= 0 || *v > max {
				*v = max
			}
		}
		clamp(&p.policy.MaxHeldParts, lim.MaxHeldParts)
		clamp(&p.policy.MaxHeldBytes, lim.MaxHeldBytes)
		if p.policy.MaxHoldTime <= 0 || p.policy.MaxHoldTime > lim.MaxHoldTime {
			p.policy.MaxHoldTime = lim.MaxHoldTime
		}
	}
	p.hints, p.static, p.autoClose = hints, hints.Table(), hints.AutoClose
	p.maxStreams = int32(min(hints.MaxStreams, math.MaxInt32))
	b := &p.breaker
	b.n, b.span, b.cooldown = p.rt.cfg.breakerN, p.rt.cfg.breakerSpan, p.rt.cfg.breakerCooldown
	b.window = p.rt.cfg.breakerWindow
	if b.window <= 0 {
		b.window = 3 * b.n
	}
	b.window = max(b.window, b.n)
	b.calls = p.calls
}

// calls is the number of calls made into the plugin's instances so far.
func (p *Plugin) calls() uint64 {
	var n uint64
	for _, s := range p.slots {
		n += s.calls.Load()
	}
	return n
}

// chargeMemory counts n more bytes of linear memory against the plugin's
// total, and reports false (charging nothing) if that would go over it,
// unless force.
func (p *Plugin) chargeMemory(n uint64, force bool) bool {
	if force {
		p.memUsed.Add(int64(n))
		return true
	}
	total := int64(p.rt.cfg.pluginMemory)
	for {
		u := p.memUsed.Load()
		if u+int64(n) > total {
			return false
		}
		if p.memUsed.CompareAndSwap(u, u+int64(n)) {
			return true
		}
	}
}

func (p *Plugin) uncharge(n uint64) { p.memUsed.Add(-int64(n)) }

// install makes in the slot's instance. The caller holds s.mu (or owns s).
func (s *slot) install(in *instance) {
	s.inst = in
	in.calls = &s.calls
}

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
func (p *Plugin) ready(ctx context.Context, s *slot, op string, probe bool) (*instance, error) {
	if s.inst != nil {
		return s.inst, nil
	}
	if p.released.Load() {
		return nil, p.perr(op, ErrClosed, nil)
	}
	if p.breaker.blocks(probe) {
		return nil, p.perr(op, ErrDisabled, nil)
	}
	in, err := p.instantiate(ctx)
	if err != nil {
		p.failed(op, err)
		return nil, p.perr(op, ErrInstanceLost, err)
	}
	s.install(in)
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
	if n, tripped := p.breaker.fail(p.rt.now()); tripped {
		p.rt.cfg.logger.Error("plugin disabled: it keeps failing; a probe may re-enable it after the cooldown",
			"plugin", p.name, "failures", n, "within", p.breaker.span, "cooldown", p.breaker.cooldown,
			"op", op, "last_error", err)
	}
}

// succeeded tells the breaker that a probe's call succeeded.
func (p *Plugin) succeeded() {
	if p.breaker.succeed() {
		p.rt.cfg.logger.Info("plugin re-enabled: a probe succeeded after the cooldown", "plugin", p.name)
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
	ok, probe := p.breaker.allow(p.rt.now())
	if !ok {
		return abi.Decision{}, p.perr("decide", ErrDisabled, nil)
	}
	if probe {
		defer p.breaker.release()
	}
	s := p.lockAny()
	defer s.mu.Unlock()
	in, err := p.ready(ctx, s, "decide", probe)
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
		if probe {
			p.succeeded()
		}
		return abi.Decision{}, nil
	case r < 0:
		re := &ResultError{Export: abi.ExportDecide, Result: int64(r)}
		p.failed("decide", re)
		return abi.Decision{}, p.perr("decide", ErrPluginFailed, re)
	}
	b, err := in.output(uint32(r))
	if err == nil {
		var d abi.Decision
		if d, err = abi.DecodeDecision(b); err == nil {
			if probe {
				p.succeeded()
			}
			return d, nil
		}
		err = fmt.Errorf("%w: %w", ErrABIViolation, err)
	}
	p.discard(s, "decide", err)
	return abi.Decision{}, p.perr("decide", ErrABIViolation, err)
}

// breaker disables a plugin version that keeps failing (WithBreaker,
// WithBreakerWindow): closed, it counts failures of every kind (a trap, a
// timeout, a memory fault, an exit, an ABI violation such as garbage
// output, a negative result, a host limit) within span and trips when n of
// them fell within the last window calls (a rate: by default 5 of 15, one
// call in three, so a plugin failing every third call trips while a busy
// plugin's rare failures never add up to a trip); open, it refuses every
// call until the cooldown has passed, then lets one probe through, which
// closes it on success and opens it for another cooldown on failure (like
// driver.WithCooldown for models). Capacity refusals are not failures and
// never reach it.
type breaker struct {
	n        int
	window   int // calls over which n failures trip it (≥ n)
	span     time.Duration
	cooldown time.Duration
	calls    func() uint64 // calls made so far, for the rate

	open    atomic.Bool // the fast path's only check
	mu      sync.Mutex
	fails   []failure // within span, oldest first (closed only)
	until   int64     // open: no probe before this time
	probing bool      // open: a probe is in flight
}

type failure struct {
	at    int64
	calls uint64 // calls made when it failed
}

// allow reports whether a call may run now and whether it is the probe
// of an open breaker (whose outcome the caller must report with succeed,
// fail or release).
func (b *breaker) allow(now int64) (ok, probe bool) {
	if !b.open.Load() {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.open.Load():
		return true, false
	case b.probing || now < b.until:
		return false, false
	}
	b.probing = true
	return true, true
}

// blocks reports whether a call that is not the probe must be refused.
func (b *breaker) blocks(probe bool) bool { return !probe && b.open.Load() }

// fail records a failure at now. It returns the number of failures that
// tripped the breaker and true when this one tripped it (or a probe failed
// and opened it again).
func (b *breaker) fail(now int64) (int, bool) {
	if b.n <= 0 {
		return 0, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open.Load() {
		if !b.probing {
			return 0, false // a call from before the trip
		}
		b.probing, b.until = false, now+int64(b.cooldown)
		return 1, true
	}
	calls := uint64(0)
	if b.calls != nil {
		calls = b.calls()
	}
	b.fails = append(b.fails, failure{at: now, calls: calls})
	cut := 0
	for cut < len(b.fails) && b.fails[cut].at < now-int64(b.span) {
		cut++
	}
	b.fails = b.fails[cut:]
	n := len(b.fails)
	if n < b.n {
		return 0, false
	}
	// The rate over the calls since the n-th most recent failure (that
	// one included): n failures within the last window calls trip it, n
	// failures spread over many more successful calls never do.
	made := calls - b.fails[n-b.n].calls + 1
	if uint64(b.window) < made {
		b.fails = b.fails[n-b.n+1:] // that one can no longer count
		return 0, false
	}
	b.fails = nil
	b.until = now + int64(b.cooldown)
	b.open.Store(true)
	return n, true
}

// succeed closes the breaker if a probe was in flight; it reports whether
// it did.
func (b *breaker) succeed() bool {
	if !b.open.Load() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.probing {
		return false
	}
	b.probing = false
	b.open.Store(false)
	return true
}

// release ends a probe that came to no verdict (the stream closed before
// any call): the next call may probe.
func (b *breaker) release() {
	if !b.open.Load() {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}
