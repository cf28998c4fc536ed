package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/retryhost/retryhost/abi"
)

// The non-positive values of instance.deadline besides 0 (idle).
const (
	deadlineClaimed = -1 // the watchdog expired the call and kills it
	deadlinePaused  = -2 // the host is growing the guest's memory (guestMemory)
)

// instance is one live module of a plugin version with its cached function
// handles, call stack and ABI state. Its owner (a slot) serialises use.
type instance struct {
	p   *Plugin
	mod api.Module
	mem api.Memory
	gm  *guestMemory // mem's backing store (nil if wazero did not use the allocator)
	ctx *instCtx     // carries the instance for host functions; done when the watchdog kills a call

	fnDecide, fnOpen, fnPart, fnEnd, fnClose, fnParts, fnOpenPart api.Function
	stack                                                         []uint64
	scratch                                                       []byte

	bufPtr, bufCap uint32
	bufStatus      abi.Status // of the last buffer call
	input          []byte
	hasInput       bool
	initing        bool
	declared       *abi.TransformPolicy
	hints          abi.Hints // declared with the policy (v1.1 tail)

	// deadline is the running call's monotonic deadline (0 idle,
	// deadlineClaimed, deadlinePaused); see Runtime.watchdog.
	deadline atomic.Int64
	// The running call's CPU-time accounting, for a plugin whose calls run
	// long (Plugin.slow): the OS thread running it (0: not measured), that
	// thread's CPU time when the call started and the call's budget.
	tid    atomic.Int32
	cpu0   atomic.Int64
	budget atomic.Int64
	// wallCap is the wall-clock time past which the running call is
	// stopped whatever else pushed its deadline back (the grace, its CPU
	// budget, the host growing its memory); capped records that the
	// watchdog stopped it there.
	wallCap atomic.Int64
	capped  atomic.Bool
	// graced: the running call is not measured in CPU time and the
	// watchdog has already pushed its wall-clock deadline back once
	// (instance.grace); reset when an unmeasured call starts.
	graced atomic.Bool
	// calls counts the calls into the instance for the breaker's failure
	// rate: the slot's counter (nil during init).
	calls *atomic.Uint64

	// stream handles: dense, reused (ABI.md §6.3).
	free    []uint32
	next    uint32
	streams int
}

// capWriter is a plugin's stdout or stderr: lines go to the logger until a
// byte budget is spent. It belongs to the plugin and every instance of it
// writes to the same one, so that a plugin cannot buy a fresh budget by
// trapping (a replacement instance would start with a full one).
type capWriter struct {
	mu     sync.Mutex
	p      *Plugin
	stream string
	left   int
	warned bool
}

func (w *capWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.left <= 0 {
		if !w.warned {
			w.warned = true
			w.p.rt.cfg.logger.Warn("plugin output limit reached; dropping the rest", "plugin", w.p.name, "output", w.stream)
		}
		return len(b), nil
	}
	out := b[:min(len(b), w.left, abi.MaxLogLine)]
	w.left -= len(b)
	w.p.rt.cfg.logger.Info(string(out), "plugin", w.p.name, "stream", w.stream)
	return len(b), nil
}

// instantiate creates, initialises and checks one instance (ABI.md §1).
func (p *Plugin) instantiate(ctx context.Context) (*instance, error) {
	rt := p.rt
	p.outOnce.Do(func() {
		p.stdout = &capWriter{p: p, stream: "stdout", left: rt.cfg.outputCap}
		p.stderr = &capWriter{p: p, stream: "stderr", left: rt.cfg.outputCap}
	})
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions().
		WithStdout(p.stdout).WithStderr(p.stderr)
	in := &instance{p: p, stack: make([]uint64, 3), next: 1}
	ctx = experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(capacity, limit uint64) experimental.LinearMemory {
		in.gm = &guestMemory{in: in, buf: make([]byte, 0, capacity), limit: limit}
		return in.gm
	}))
	mod, err := rt.wr.InstantiateModule(ctx, p.compiled, cfg)
	if err != nil {
		in.freeMemory()
		return nil, loadErr(p.name, ErrInit, err)
	}
	if used, total := p.memUsed.Load(), rt.cfg.pluginMemory; used > int64(total) {
		// The pool does not grow past the plugin's memory total: the
		// instances it has hold what it allows.
		_ = mod.Close(context.Background())
		in.freeMemory()
		return nil, loadErr(p.name, ErrLimit, &LimitError{Limit: "plugin memory", Max: int(total), Got: int(used)})
	}
	in.mod, in.mem = mod, mod.Memory()
	in.ctx = &instCtx{in: in}
	if !rt.cfg.trusted && !rt.cfg.ctxGuard {
		in.ctx.kill = make(chan struct{})
	}
	rt.watch(in)
	if in.ctx.kill != nil {
		// The Load context ends init too (Load reports ctx's error).
		defer context.AfterFunc(ctx, in.ctx.stop)()
	}
	fail := func(reason error, err error) (*instance, error) {
		in.close()
		return nil, loadErr(p.name, reason, err)
	}
	if f := mod.ExportedFunction("_initialize"); f != nil {
		if err := in.call(f, rt.cfg.initTimeout); err != nil {
			return fail(ErrInit, fmt.Errorf("_initialize: %w", err))
		}
	}
	in.input, in.hasInput, in.initing = p.config, true, true
	in.stack[0] = uint64(len(p.config))
	err = in.call(mod.ExportedFunction(abi.ExportInit), rt.cfg.initTimeout)
	in.hasInput, in.initing = false, false
	if err != nil {
		return fail(ErrInit, fmt.Errorf("%s: %w", abi.ExportInit, err))
	}
	if r := int32(in.stack[0]); r != 0 {
		var reason error
		if r > 0 && in.bufCap > 0 {
			if b, ok := in.mem.Read(in.bufPtr, min(uint32(r), in.bufCap, abi.MaxLogLine)); ok {
				reason = errors.New(string(b))
			}
		}
		if reason == nil {
			reason = fmt.Errorf("status %d", r)
		}
		return fail(ErrConfigRejected, reason)
	}
	if in.bufCap == 0 {
		why := fmt.Errorf("call %s.%s with %d to %d bytes during %s", abi.ModuleName, abi.ImportBuffer, abi.MinBufferSize, rt.cfg.maxBuffer, abi.ExportInit)
		if in.bufStatus != abi.StatusOK {
			why = fmt.Errorf("%w (the last call got %s)", why, in.bufStatus.String())
		}
		return fail(ErrNoBuffer, why)
	}
	in.fnDecide = mod.ExportedFunction(abi.ExportDecide)
	in.fnOpen = mod.ExportedFunction(abi.ExportOpen)
	in.fnPart = mod.ExportedFunction(abi.ExportPart)
	in.fnEnd = mod.ExportedFunction(abi.ExportEnd)
	in.fnClose = mod.ExportedFunction(abi.ExportClose)
	in.fnParts = mod.ExportedFunction(abi.ExportParts)
	in.fnOpenPart = mod.ExportedFunction(abi.ExportOpenPart)
	return in, nil
}

// call runs f with in.stack under the deadline guard (timeout; 0 means the
// runtime's per-call timeout) and classifies any failure as ErrTrap,
// ErrTimeout or ErrExit. After an error the instance must be discarded.
func (in *instance) call(f api.Function, timeout time.Duration) error {
	rt := in.p.rt
	if in.calls != nil {
		in.calls.Add(1)
	}
	if rt.cfg.trusted {
		if err := f.CallWithStack(in.ctx, in.stack); err != nil {
			return classify(err, false)
		}
		return nil
	}
	if timeout == 0 {
		timeout = rt.cfg.callTimeout
	}
	if rt.cfg.ctxGuard {
		ctx, cancel := context.WithTimeout(in.ctx, timeout)
		err := f.CallWithStack(ctx, in.stack)
		cancel()
		if err != nil {
			return classify(err, false)
		}
		return nil
	}
	if cpuClock && in.p.slow.Load() {
		return in.measuredCall(f, timeout)
	}
	// Only per-call deadlines are graced: an init call's is seconds long.
	in.graced.Store(timeout != rt.cfg.callTimeout)
	start := rt.now()
	in.capped.Store(false)
	in.wallCap.Store(start + int64(timeout) + graceFor(rt))
	in.deadline.Store(start + int64(timeout))
	err := f.CallWithStack(in.ctx, in.stack)
	claimed := in.deadline.Swap(0) == deadlineClaimed
	if err != nil || claimed {
		return in.classify(err, claimed)
	}
	return nil
}

// graceFor is how far past its deadline a not-yet-measured call may run
// (instance.grace): the measured call's wall-clock cap, at most maxGrace.
func graceFor(rt *Runtime) int64 {
	return min((wallFactorOf(rt)-1)*int64(rt.cfg.callTimeout), int64(maxGrace))
}

func wallFactorOf(rt *Runtime) int64 {
	if rt.cfg.wallFactor > 0 {
		return int64(rt.cfg.wallFactor)
	}
	return wallFactor
}

// classify is the package's classify, telling a call the watchdog stopped
// at its wall-clock cap (errWallCap) from one stopped at its deadline.
func (in *instance) classify(err error, claimed bool) error {
	if claimed && in.capped.Swap(false) {
		return fmt.Errorf("%w: %w: %v", ErrTimeout, errWallCap, errOr(err))
	}
	return classify(err, claimed)
}

// errWallCap: the watchdog stopped the call at its wall-clock cap
// (instance.wallCap), whatever had pushed its deadline back.
var errWallCap = errors.New("the call outlived its wall-clock cap")

// capAt clamps a deadline to the running call's wall-clock cap (none set:
// unchanged).
func (in *instance) capAt(d int64) int64 {
	if c := in.wallCap.Load(); c > 0 {
		return min(d, c)
	}
	return d
}

// overCap reports whether now is past the running call's wall-clock cap,
// and records that the call is stopped there.
func (in *instance) overCap(now int64) bool {
	c := in.wallCap.Load()
	if c > 0 && now >= c {
		in.capped.Store(true)
		return true
	}
	return false
}

// wallFactor bounds a measured call's wall-clock time: a call whose thread
// is starved of CPU may take this many times the call timeout before it is
// stopped anyway (1 s at the default 50 ms).
const wallFactor = 20

// measuredCall is call for a plugin whose calls run long: its deadline is
// the guest thread's CPU time, not the wall clock, so that a busy machine
// (other goroutines or processes taking the CPU from the guest's thread)
// does not turn a compliant call into a timeout. The goroutine is locked
// to its thread for the call; the watchdog, when the wall-clock deadline
// passes, reads the thread's CPU clock and pushes the deadline back by
// the CPU budget left (Runtime.expire). It costs two system calls (about
// 1 µs), which is why only plugins seen running calls of more than a
// quarter of the timeout pay it (Runtime.expire marks them).
func (in *instance) measuredCall(f api.Function, timeout time.Duration) error {
	rt := in.p.rt
	runtime.LockOSThread()
	tid := threadID()
	c0, ok := threadCPU(tid)
	start := rt.now()
	// 20× the call timeout in all (1 s by default); an init call
	// (seconds of timeout) gets the same grace, not 20× its own.
	in.capped.Store(false)
	in.wallCap.Store(start + int64(timeout) + (wallFactorOf(rt)-1)*int64(rt.cfg.callTimeout))
	if ok {
		in.cpu0.Store(c0)
		in.budget.Store(int64(timeout))
		in.tid.Store(tid)
	}
	in.deadline.Store(start + int64(timeout))
	err := f.CallWithStack(in.ctx, in.stack)
	claimed := in.deadline.Swap(0) == deadlineClaimed
	in.tid.Store(0)
	runtime.UnlockOSThread()
	if err != nil || claimed {
		return in.classify(err, claimed)
	}
	return nil
}

// extend is the watchdog's CPU-time check of a measured call past its
// wall-clock deadline d: it pushes the deadline back by the CPU budget the
// call has left and reports true, or reports false when the budget is
// spent (or the wall-clock cap passed, or the thread's clock is
// unreadable) and the call must be stopped.
func (in *instance) extend(now, d int64) bool {
	if in.overCap(now) {
		return false
	}
	tid := in.tid.Load()
	if tid == 0 {
		return in.grace(d)
	}
	c, ok := threadCPU(tid)
	if !ok {
		return false
	}
	left := in.budget.Load() - (c - in.cpu0.Load())
	if left <= 0 {
		return false
	}
	// A CAS: if the call ended (or another began) meanwhile, d is stale
	// and nothing changes.
	in.deadline.CompareAndSwap(d, in.capAt(now+left))
	return true
}

// grace is extend for a call that is not measured in CPU time (its plugin
// was not yet seen running long when it started): its wall-clock deadline
// d passed, but on a loaded machine that may be time the guest's thread
// spent waiting for a CPU, not running, and nothing measured which. Such a
// call is given, once, the wall-clock cap a measured call has (20× the call
// timeout from its start, but at most maxGrace more) instead of being
// stopped; init calls, whose deadline is seconds, are not graced. The watchdog has marked
// its plugin slow by now (Runtime.expire), so every later call of the
// plugin is measured and a loop is stopped after the timeout in CPU time.
// Without it, the first call of a compliant plugin that a busy machine
// delayed past 50 ms failed with ErrTimeout (seen under go test -race on
// two loaded cores). The cost: a plugin's calls in flight at the moment it
// is first seen running long may each use up to that cap in CPU once.
// It reports false (stop the call) where there is no per-thread CPU clock
// (nothing would measure the later calls either) and on a second expiry.
func (in *instance) grace(d int64) bool {
	if !cpuClock || in.graced.Swap(true) {
		return false
	}
	in.p.slow.Store(true)
	in.deadline.CompareAndSwap(d, in.capAt(d+graceFor(in.p.rt)))
	return true
}

// maxGrace bounds instance.grace: starvation is a matter of milliseconds,
// and a runtime configured with a call timeout of seconds must not let a
// loop's first call run for minutes.
const maxGrace = time.Second

// classify maps a wazero call error to ErrTrap, ErrTimeout or ErrExit.
// wazero has no exported trap type: an *sys.ExitError means the module was
// closed or exited; anything else is a trap.
func classify(err error, claimed bool) error {
	var ee *sys.ExitError
	switch {
	case claimed:
		// %v, not %w: wazero's exit error says context.DeadlineExceeded
		// (errors.Is), which would read as the caller's own deadline.
		return fmt.Errorf("%w: %v", ErrTimeout, errOr(err))
	case errors.As(err, &ee) && (ee.ExitCode() == sys.ExitCodeDeadlineExceeded):
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	case errors.As(err, &ee) && ee.ExitCode() == sys.ExitCodeContextCanceled:
		// %v: a guest's proc_exit with this code must not read as the
		// caller's own cancellation (errors.Is(err, context.Canceled)).
		return fmt.Errorf("%w: %v", ErrExit, err)
	case errors.As(err, &ee):
		return fmt.Errorf("%w: %w", ErrExit, err)
	case isStackOverflow(err):
		return fmt.Errorf("%w: %w: %w", ErrTrap, ErrStackOverflow, err)
	default:
		return fmt.Errorf("%w: %w", ErrTrap, err)
	}
}

// isStackOverflow recognises wazero's stack-overflow trap. Its error value
// is internal to wazero (wasmruntime.ErrRuntimeStackOverflow), so this reads
// the message: the compiler returns it bare ("stack overflow"), the
// interpreter with a stack trace ("wasm error: stack overflow\n…").
func isStackOverflow(err error) bool {
	msg := err.Error()
	return msg == "stack overflow" || strings.HasPrefix(msg, "wasm error: stack overflow")
}

func errOr(err error) error {
	if err == nil {
		return errors.New("deadline passed as the call returned")
	}
	return err
}

// writeInput makes rec the current input: in the scratch buffer when it
// fits (ABI.md §2), and through the input import always.
func (in *instance) writeInput(rec []byte) {
	in.input, in.hasInput = rec, true
	if uint32(len(rec)) <= in.bufCap {
		if in.gm != nil {
			// The buffer lies inside the memory (checked when it was
			// registered) and memory never shrinks: copy straight in.
			copy(in.gm.buf[in.bufPtr:], rec)
			return
		}
		in.mem.Write(in.bufPtr, rec)
	}
}

// output returns a view of n bytes from the start of the scratch buffer.
func (in *instance) output(n uint32) ([]byte, error) { return in.outputAt(0, n) }

// outputAt returns a view of n bytes at offset off of the scratch buffer.
func (in *instance) outputAt(off, n uint32) ([]byte, error) {
	if uint64(off)+uint64(n) > uint64(in.bufCap) {
		return nil, fmt.Errorf("%w: output of %d bytes at %d exceeds the %d-byte buffer", ErrABIViolation, n, off, in.bufCap)
	}
	b, ok := in.mem.Read(in.bufPtr+off, n)
	if !ok {
		return nil, fmt.Errorf("%w: buffer outside memory", ErrABIViolation)
	}
	return b, nil // a view: the caller decodes (copies) before the next call
}

// handle returns a free stream handle (dense, lowest reused first-ish).
func (in *instance) handle() uint32 {
	in.streams++
	if n := len(in.free); n > 0 {
		h := in.free[n-1]
		in.free = in.free[:n-1]
		return h
	}
	h := in.next
	in.next++
	return h
}

func (in *instance) release(h uint32) {
	in.streams--
	in.free = append(in.free, h)
}

// close discards the instance.
func (in *instance) close() {
	in.p.rt.unwatch(in)
	_ = in.mod.Close(context.Background())
	in.freeMemory()
}

// freeMemory returns the instance's memory to the plugin's total (once:
// wazero may have done it already, or not, when a killed call left the
// module closed without its resources released).
func (in *instance) freeMemory() {
	if in.gm != nil {
		in.gm.Free()
	}
}

func (in *instance) logDiscard(op string, err error) {
	in.p.rt.cfg.logger.Warn("plugin instance discarded", slog.String("plugin", in.p.name), slog.String("op", op), slog.Any("error", err))
}

// guestMemory backs an instance's linear memory (wazero's experimental
// allocator hook) so that growing it is not charged to the call's deadline,
// that the call's wall-clock cap holds while it grows, and that the plugin's
// instances together hold no more than its memory total (WithPluginMemory).
//
// A memory.grow past the capacity is host work: a new Go slice and a copy
// of the whole memory, whose fresh pages the kernel faults in one by one.
// On a loaded or virtualised machine that took 15–120 ms for 4–8 MiB (and
// 600 ms for the last doubling to 64 MiB), and the watchdog killed
// well-behaved Go guests (whose heap grows in 512 KiB steps)
// mid-benchmark. The deadline is paused for the copy and pushed back by
// its duration, but never past the call's wall-clock cap: a call past it
// is stopped from here, on the calling goroutine, without waiting for the
// watchdog (whose ticks a copy that long delays), and grows nothing more.
// The time excluded is bounded because capacity doubles (at most about two
// copies of the memory limit over an instance's life). Only the goroutine
// running a call of the instance grows its memory.
type guestMemory struct {
	in      *instance
	buf     []byte
	limit   uint64 // the largest size wazero will ever ask for
	charged uint64 // bytes counted in the plugin's memory total
}

func (m *guestMemory) Reallocate(size uint64) []byte {
	in, rt := m.in, m.in.p.rt
	d := in.deadline.Load()
	if size > uint64(cap(m.buf)) && (d > 0 || d == deadlineClaimed) && in.stopAtCap(d, rt.now()) {
		return nil // the call is being stopped: grow nothing more
	}
	if size > m.charged {
		// The first allocation (instantiation) is charged whatever it
		// costs: instantiate refuses the instance if it went over.
		if !in.p.chargeMemory(size-m.charged, m.charged == 0) {
			return nil // memory.grow fails in the guest
		}
		m.charged = size
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	paused := d > 0 && in.deadline.CompareAndSwap(d, deadlinePaused)
	start := rt.now()
	if rt.cfg.onGrow != nil {
		rt.cfg.onGrow()
	}
	buf := make([]byte, size, max(size, min(2*uint64(cap(m.buf)), m.limit)))
	copy(buf, m.buf)
	m.buf = buf
	if paused {
		// The growth is not charged to the deadline, but the call's
		// wall-clock cap holds: a guest growing its memory in a loop
		// is stopped there like any other.
		d = in.capAt(d + rt.now() - start)
		in.deadline.Store(d)
		in.stopAtCap(d, rt.now())
	}
	return m.buf
}

// stopAtCap stops the running call, whose deadline is d, if now is past
// its wall-clock cap, and reports whether it did (or the watchdog already
// had). The caller runs the call.
func (in *instance) stopAtCap(d, now int64) bool {
	if d == deadlineClaimed {
		return true
	}
	if c := in.wallCap.Load(); c <= 0 || now < c {
		return false
	}
	if in.deadline.CompareAndSwap(d, deadlineClaimed) {
		in.capped.Store(true)
		in.ctx.stop()
		return true
	}
	return in.deadline.Load() == deadlineClaimed
}

// Free returns the memory's charge to the plugin's total and leaves buf to
// the garbage collector: wazero calls it when the module's resources are
// released.
func (m *guestMemory) Free() {
	m.in.p.uncharge(m.charged)
	m.charged = 0
}
