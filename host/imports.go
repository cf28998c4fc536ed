package host

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/retryhost/retryhost/abi"
)

// instKey carries the calling *instance in the context every call into the
// guest receives, so host functions find their state without a lookup.
type instKey struct{}

// instCtx is that context: no deadline, the instance as its only value,
// and done only when the watchdog kills the running call (kill, closed once;
// nil in trusted mode, where nothing can kill a call). wazero looks a key up
// in it on every call; a context.WithValue chain would answer that one frame
// further away.
//
// The watchdog kills through the context, not by closing the module: the
// goroutine wazero starts for each guarded call then marks the module
// closed without releasing its resources, and the calling goroutine
// releases them when the guest stops. Closing the module from the watchdog
// released them (the memory's allocator among them) from another goroutine
// while the guest could still be growing its memory: a data race inside
// wazero that the race detector caught under load.
type instCtx struct {
	in     *instance
	kill   chan struct{}
	killed atomic.Bool
}

func (*instCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *instCtx) Done() <-chan struct{}     { return c.kill }
func (c *instCtx) Err() error {
	if c.killed.Load() {
		return context.DeadlineExceeded
	}
	return nil
}
func (c *instCtx) Value(k any) any {
	if k == (instKey{}) {
		return c.in
	}
	return nil
}

// stop kills the running call (once; see instCtx).
func (c *instCtx) stop() {
	if c.kill != nil && c.killed.CompareAndSwap(false, true) {
		close(c.kill)
	}
}

func instanceOf(ctx context.Context) *instance {
	in, _ := ctx.Value(instKey{}).(*instance)
	return in
}

// inRange reports whether [ptr, ptr+n) lies inside memory of size size.
func inRange(ptr, n uint32, size uint32) bool {
	return uint64(ptr)+uint64(n) <= uint64(size)
}

// instantiateABI registers the retryhost_v1 host module (ABI.md §4). Every
// function bounds-checks its ranges and answers a Status; none traps.
func (rt *Runtime) instantiateABI(ctx context.Context) error {
	b := rt.wr.NewHostModuleBuilder(abi.ModuleName)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostBuffer),
		[]api.ValueType{i32, i32}, []api.ValueType{i32}).Export(abi.ImportBuffer)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostInput),
		[]api.ValueType{i32, i32}, []api.ValueType{i32}).Export(abi.ImportInput)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostPolicy),
		[]api.ValueType{i32, i32}, []api.ValueType{i32}).Export(abi.ImportPolicy)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostLog),
		[]api.ValueType{i32, i32, i32}, nil).Export(abi.ImportLog)
	_, err := b.Instantiate(ctx)
	return err
}

func status(s abi.Status) uint64 { return uint64(uint32(int32(s))) }

func hostBuffer(ctx context.Context, m api.Module, stack []uint64) {
	in := instanceOf(ctx)
	ptr, n := uint32(stack[0]), uint32(stack[1])
	st := abi.StatusOK
	switch {
	case in == nil:
		stack[0] = status(abi.StatusPhase)
		return
	case int32(n) < 0 || !inRange(ptr, n, m.Memory().Size()):
		st = abi.StatusFault
	case n < abi.MinBufferSize:
		st = abi.StatusTooSmall
	case uint64(n) > uint64(in.p.rt.cfg.maxBuffer):
		st = abi.StatusTooLarge
	default:
		in.bufPtr, in.bufCap = ptr, n
	}
	in.bufStatus = st
	stack[0] = status(st)
}

func hostInput(ctx context.Context, m api.Module, stack []uint64) {
	in := instanceOf(ctx)
	ptr, n := uint32(stack[0]), uint32(stack[1])
	switch {
	case in == nil || !in.hasInput:
		stack[0] = status(abi.StatusPhase)
	case int32(n) < 0:
		stack[0] = status(abi.StatusFault)
	case int(n) >= len(in.input):
		if !m.Memory().Write(ptr, in.input) {
			stack[0] = status(abi.StatusFault)
			return
		}
		stack[0] = uint64(uint32(len(in.input)))
	default:
		stack[0] = uint64(uint32(len(in.input)))
	}
}

func hostPolicy(ctx context.Context, m api.Module, stack []uint64) {
	in := instanceOf(ctx)
	ptr, n := uint32(stack[0]), uint32(stack[1])
	if in == nil || !in.initing {
		stack[0] = status(abi.StatusPhase)
		return
	}
	b, ok := m.Memory().Read(ptr, n)
	if !ok || int32(n) < 0 {
		stack[0] = status(abi.StatusFault)
		return
	}
	// A malformed record, hints tail included, is ignored whole: the
	// plugin keeps the defaults and declares no hints (ABI.md §8.7).
	pol, hints, err := abi.DecodePolicyHints(b)
	if err != nil {
		stack[0] = status(abi.StatusInvalid)
		return
	}
	in.declared, in.hints = &pol, hints
	stack[0] = status(abi.StatusOK)
}

func hostLog(ctx context.Context, m api.Module, stack []uint64) {
	in := instanceOf(ctx)
	level, ptr, n := int32(stack[0]), uint32(stack[1]), uint32(stack[2])
	if in == nil || int32(n) < 0 {
		return
	}
	// The budget is the plugin's, shared by its instances: a replacement
	// instance does not start afresh.
	if n, limit := in.p.logLines.Add(1), int64(in.p.rt.cfg.logLineLimit); n > limit {
		if n == limit+1 {
			in.p.rt.cfg.logger.Warn("plugin log budget spent; dropping every further line of this plugin",
				"plugin", in.p.name, "lines", limit)
		}
		return
	}
	cut := min(n, abi.MaxLogLine)
	b, ok := m.Memory().Read(ptr, cut)
	if !ok {
		return
	}
	in.p.rt.cfg.logger.Log(ctx, slog.Level(level), string(b), "plugin", in.p.name, "stream", "log", "truncated", cut < n)
}
