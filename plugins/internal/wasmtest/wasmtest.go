// Package wasmtest is a minimal Wasm host for the plugins' own tests and
// benchmarks, so the built .wasm files are exercised before (and
// independently of) the product's host package: it implements the
// retryhost_v1 imports over wazero, calls the exports with cached function
// handles and preallocated stacks, and decodes the answers as strictly as
// ABI.md asks. It has no pooling, hot swap, breaker or policy enforcement:
// that is package host's job. Standard library and wazero only.
package wasmtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/sdk"
)

// ErrPluginFailed is wrapped by every error of a failing call.
var ErrPluginFailed = errors.New("wasmtest: plugin failed")

// Engine compiles modules once and shares the compiled code.
type Engine struct {
	cache       wazero.CompilationCache
	interpreter bool
}

// NewEngine returns an engine using wazero's compiler, or its
// interpreter, caching compiled code in cacheDir (in memory if "" or if
// the directory cannot be used).
func NewEngine(interpreter bool, cacheDir string) *Engine {
	if cacheDir != "" {
		if c, err := wazero.NewCompilationCacheWithDir(cacheDir); err == nil {
			return &Engine{cache: c, interpreter: interpreter}
		}
	}
	return &Engine{cache: wazero.NewCompilationCache(), interpreter: interpreter}
}

// Close releases the compiled code (close the instances first).
func (e *Engine) Close(ctx context.Context) {
	_ = e.cache.Close(ctx)
}

// Options of one instance.
type Options struct {
	Config []byte
	// Guarded makes every call interruptible (WithCloseOnContextDone) and
	// bounded by Deadline (default 50 ms), as the product's default mode.
	Guarded  bool
	Deadline time.Duration
}

// Instance is one instance of a plugin. It satisfies abi.Transformer and
// driver.Condition. Calls are serialised by a mutex.
type Instance struct {
	name   string
	rt     wazero.Runtime
	mod    api.Module
	mem    api.Memory
	opts   Options
	policy abi.TransformPolicy
	hints  abi.Hints

	mu                                   sync.Mutex
	bufPtr, bufCap                       uint32
	in                                   []byte
	stack                                []uint64
	decide, open, part, parts, end, clos api.Function
	openPart                             api.Function
	next                                 int64   // the highest stream handle used
	free                                 []int64 // handles of closed streams, reused first (ABI.md §6.3)
	scratch                              []byte
}

// Load instantiates wasm with its config; the compiled code is cached by content.
func (e *Engine) Load(ctx context.Context, name string, wasm []byte, o Options) (_ *Instance, err error) {
	cfg := wazero.NewRuntimeConfigCompiler()
	if e.interpreter {
		cfg = wazero.NewRuntimeConfigInterpreter()
	}
	cfg = cfg.WithCompilationCache(e.cache).WithCloseOnContextDone(o.Guarded).WithMemoryLimitPages(1024)
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	defer func() {
		if err != nil {
			_ = rt.Close(ctx)
		}
	}()
	if o.Deadline == 0 {
		o.Deadline = 50 * time.Millisecond
	}
	in := &Instance{name: name, rt: rt, opts: o, stack: make([]uint64, 4)}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		return nil, err
	}
	_, err = rt.NewHostModuleBuilder(abi.ModuleName).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(in.hostBuffer), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).Export(abi.ImportBuffer).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(in.hostInput), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).Export(abi.ImportInput).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(in.hostPolicy), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).Export(abi.ImportPolicy).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) {}), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, nil).Export(abi.ImportLog).
		Instantiate(ctx)
	if err != nil {
		return nil, err
	}
	cm, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, err
	}
	exp := cm.ExportedFunctions()
	if _, ok := exp[abi.ExportABIVersion]; !ok {
		return nil, errors.New("no " + abi.ExportABIVersion + " marker")
	}
	mc := wazero.NewModuleConfig().WithName("").WithStartFunctions()
	ictx := ctx
	if o.Guarded {
		// A guarded call's deadline would be charged with the host's work
		// of growing the guest's memory (a new slice and a copy of it all,
		// 15–120 ms on a loaded machine: the Go guests' heap grows in
		// 512 KiB steps): reserve the whole memory limit up front, so that
		// growing never copies. The product host instead pauses its
		// watchdog while it grows (host.guestMemory).
		ictx = experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(capacity, limit uint64) experimental.LinearMemory {
			return &reserved{buf: make([]byte, 0, max(capacity, limit))}
		}))
	}
	mod, err := rt.InstantiateModule(ictx, cm, mc)
	if err != nil {
		return nil, err
	}
	in.mod, in.mem = mod, mod.Memory()
	if f := mod.ExportedFunction("_initialize"); f != nil {
		if _, err := f.Call(ctx); err != nil {
			return nil, fmt.Errorf("_initialize: %w", err)
		}
	}
	in.decide = mod.ExportedFunction(abi.ExportDecide)
	in.open = mod.ExportedFunction(abi.ExportOpen)
	in.part = mod.ExportedFunction(abi.ExportPart)
	in.parts = mod.ExportedFunction(abi.ExportParts)
	in.end = mod.ExportedFunction(abi.ExportEnd)
	in.clos = mod.ExportedFunction(abi.ExportClose)
	in.openPart = mod.ExportedFunction(exportOpenPart)
	in.in = o.Config
	rc, err := mod.ExportedFunction(abi.ExportInit).Call(ctx, uint64(len(o.Config)))
	in.in = nil
	if err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	if r := int32(rc[0]); r != 0 {
		reason := ""
		if r > 0 {
			b, _ := in.mem.Read(in.bufPtr, uint32(min(r, abi.MaxLogLine)))
			reason = string(b)
		}
		return nil, fmt.Errorf("%w (%d): %s", sdk.ErrConfigRejected, r, reason)
	}
	if in.bufCap == 0 {
		return nil, errors.New("no buffer registered")
	}
	return in, nil
}

func (in *Instance) hostBuffer(_ context.Context, m api.Module, s []uint64) {
	ptr, n := uint32(s[0]), int32(s[1])
	switch {
	case n < 0 || uint64(ptr)+uint64(n) > uint64(m.Memory().Size()):
		s[0] = status(abi.StatusFault)
	case n < abi.MinBufferSize:
		s[0] = status(abi.StatusTooSmall)
	default:
		in.bufPtr, in.bufCap = ptr, uint32(n)
		s[0] = 0
	}
}

func (in *Instance) hostInput(_ context.Context, m api.Module, s []uint64) {
	ptr, n := uint32(s[0]), int32(s[1])
	if n < 0 {
		s[0] = status(abi.StatusFault)
		return
	}
	if int(n) >= len(in.in) && len(in.in) > 0 && !m.Memory().Write(ptr, in.in) {
		s[0] = status(abi.StatusFault)
		return
	}
	s[0] = uint64(len(in.in))
}

func (in *Instance) hostPolicy(_ context.Context, m api.Module, s []uint64) {
	b, ok := m.Memory().Read(uint32(s[0]), uint32(s[1]))
	if !ok {
		s[0] = status(abi.StatusFault)
		return
	}
	p, h, err := abi.DecodePolicyHints(b)
	if err != nil {
		s[0] = status(abi.StatusInvalid)
		return
	}
	in.policy, in.hints = p, h
	s[0] = 0
}

// reserved is a linear memory whose capacity is reserved up front: it
// never moves (see Load, Options.Guarded).
type reserved struct{ buf []byte }

func (m *reserved) Reallocate(size uint64) []byte {
	if size > uint64(cap(m.buf)) {
		return nil
	}
	m.buf = m.buf[:size]
	return m.buf
}

func (m *reserved) Free() {}

// Close releases the instance and its runtime.
func (in *Instance) Close(ctx context.Context) error { return in.rt.Close(ctx) }

// MemoryBytes is the size of the instance's linear memory.
func (in *Instance) MemoryBytes() uint32 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.mem.Size()
}

// Name returns the instance's name.
func (in *Instance) Name() string { return in.name }

// Policy returns the declared policy.
func (in *Instance) Policy() abi.TransformPolicy { return in.policy }

// Hints returns the declared policy and its v1.1 hints (static verdicts,
// auto_close). This host calls every export regardless, as a v1.0 host.
func (in *Instance) Hints() (abi.TransformPolicy, abi.Hints) { return in.policy, in.hints }

// handle picks a stream handle as the product host does: a closed
// stream's first, so handles stay dense (ABI.md §6.3).
func (in *Instance) handle() int64 {
	if n := len(in.free); n > 0 {
		h := in.free[n-1]
		in.free = in.free[:n-1]
		return h
	}
	in.next++
	return in.next
}

// setInput writes rec into the buffer when it fits, and behind input.
func (in *Instance) setInput(rec []byte) uint64 {
	in.in = rec
	if uint32(len(rec)) <= in.bufCap {
		in.mem.Write(in.bufPtr, rec)
	}
	return uint64(len(rec))
}

func (in *Instance) call(ctx context.Context, f api.Function, args ...uint64) (uint64, error) {
	if f == nil {
		return 0, fmt.Errorf("%w: export missing", ErrPluginFailed)
	}
	copy(in.stack, args)
	if in.opts.Guarded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, in.opts.Deadline)
		defer cancel()
	}
	if err := f.CallWithStack(ctx, in.stack); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrPluginFailed, err)
	}
	return in.stack[0], nil
}

// Decide runs retryhost_decide.
func (in *Instance) Decide(ctx context.Context, a *abi.Attempt) (abi.Decision, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.scratch = abi.AppendAttempt(in.scratch[:0], a)
	r, err := in.call(ctx, in.decide, in.setInput(in.scratch))
	in.in = nil
	if err != nil {
		return abi.Decision{}, err
	}
	n := int32(r)
	switch {
	case n == 0:
		return abi.Decision{}, nil
	case n < 0 || uint32(n) > in.bufCap:
		return abi.Decision{}, fmt.Errorf("%w: decide returned %d", ErrPluginFailed, n)
	}
	b, _ := in.mem.Read(in.bufPtr, uint32(n))
	d, err := abi.DecodeDecision(b)
	if err != nil {
		return abi.Decision{}, fmt.Errorf("%w: %w", ErrPluginFailed, err)
	}
	return d, nil
}

// Open runs retryhost_open.
func (in *Instance) Open(ctx context.Context, info abi.StreamInfo) (abi.StreamTransform, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	h := in.handle()
	r, err := in.call(ctx, in.open, uint64(h), in.setInput(abi.AppendStreamInfo(nil, &info)))
	in.in = nil
	if err != nil {
		return nil, err
	}
	if int32(r) < 0 {
		in.free = append(in.free, h)
		return nil, fmt.Errorf("%w: open returned %d", ErrPluginFailed, int32(r))
	}
	return &Stream{in: in, h: h}, nil
}

// OpenPart runs retryhost_open_part (ABI v1.1): the stream's open and its
// first part in one call. On an error no stream is open.
func (in *Instance) OpenPart(ctx context.Context, info abi.StreamInfo, p *abi.Part) (*Stream, abi.Verdict, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.openPart == nil {
		return nil, abi.Verdict{}, fmt.Errorf("%w: no %s export", ErrPluginFailed, exportOpenPart)
	}
	buf := abi.AppendStreamInfo(in.scratch[:0], &info)
	infoLen := len(buf)
	for len(buf)%8 != 0 {
		buf = append(buf, 0)
	}
	buf = abi.AppendPart(buf, p)
	in.scratch = buf
	if uint32(len(buf)) > in.bufCap {
		return nil, abi.Verdict{}, errors.New("open_part input does not fit the buffer")
	}
	in.mem.Write(in.bufPtr, buf)
	h := in.handle()
	r, err := in.call(ctx, in.openPart, uint64(h), uint64(infoLen), uint64(len(buf)-(infoLen+7)&^7))
	if err == nil {
		var v abi.Verdict
		if v, err = in.verdict(r, in.bufPtr); err == nil {
			return &Stream{in: in, h: h}, v, nil
		}
	}
	in.free = append(in.free, h)
	return nil, abi.Verdict{}, err
}

// Stream is one stream of an Instance.
type Stream struct {
	in     *Instance
	h      int64
	rec    []byte
	closed bool
}

// Part runs retryhost_part.
func (s *Stream) Part(ctx context.Context, p *abi.Part) (abi.Verdict, error) {
	in := s.in
	in.mu.Lock()
	defer in.mu.Unlock()
	s.rec = abi.AppendPart(s.rec[:0], p)
	r, err := in.call(ctx, in.part, uint64(s.h), in.setInput(s.rec))
	in.in = nil
	if err != nil {
		return abi.Verdict{}, err
	}
	return in.verdict(r, in.bufPtr)
}

// End runs retryhost_end.
func (s *Stream) End(ctx context.Context) (abi.Verdict, error) {
	in := s.in
	in.mu.Lock()
	defer in.mu.Unlock()
	r, err := in.call(ctx, in.end, uint64(s.h))
	if err != nil {
		return abi.Verdict{}, err
	}
	return in.verdict(r, in.bufPtr)
}

// Close runs retryhost_close once.
func (s *Stream) Close() {
	in := s.in
	in.mu.Lock()
	defer in.mu.Unlock()
	if !s.closed {
		s.closed = true
		// Called even after the guest's auto-close, as a v1.0 host does
		// (the guest ignores it).
		_, _ = in.call(context.Background(), in.clos, uint64(s.h))
		in.free = append(in.free, s.h)
	}
}

// PartsBatch runs retryhost_parts once over parts of this one stream and
// returns the verdicts of the entries the guest judged (it may judge fewer
// than all: ABI.md §6.3).
func (s *Stream) PartsBatch(ctx context.Context, parts []abi.Part) ([]abi.Verdict, error) {
	in := s.in
	in.mu.Lock()
	defer in.mu.Unlock()
	buf := in.scratch[:0]
	for i := range parts {
		at := len(buf)
		buf = binary.LittleEndian.AppendUint64(buf, uint64(s.h))
		buf = binary.LittleEndian.AppendUint32(buf, 0)
		buf = abi.AppendPart(buf, &parts[i])
		binary.LittleEndian.PutUint32(buf[at+8:], uint32(len(buf)-at-12))
	}
	in.scratch = buf
	if uint32(len(buf)) > in.bufCap {
		return nil, errors.New("batch does not fit the buffer")
	}
	r, err := in.call(ctx, in.parts, uint64(len(parts)), in.setInput(buf))
	in.in = nil
	if err != nil {
		return nil, err
	}
	k := int32(r)
	if k < 0 || int(k) > len(parts) {
		return nil, fmt.Errorf("%w: parts returned %d for %d entries", ErrPluginFailed, k, len(parts))
	}
	at := (uint32(len(buf)) + 7) &^ 7
	vs := make([]abi.Verdict, 0, len(parts))
	for off := at; len(vs) < int(k); {
		b, ok := in.mem.Read(in.bufPtr+off, 8)
		if !ok || off+8 > in.bufCap {
			return nil, fmt.Errorf("%w: batch result past the buffer", ErrPluginFailed)
		}
		packed := binary.LittleEndian.Uint64(b)
		v, err := in.verdict(packed, in.bufPtr+off+8)
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
		off += 8 + uint32(packed>>32)
	}
	return vs, nil
}

// verdict decodes a packed verdict whose payload is at ptr.
func (in *Instance) verdict(packed uint64, ptr uint32) (abi.Verdict, error) {
	a, n, err := abi.UnpackVerdict(packed)
	if err != nil {
		return abi.Verdict{}, fmt.Errorf("%w: %w", ErrPluginFailed, err)
	}
	if n > in.bufCap {
		return abi.Verdict{}, fmt.Errorf("%w: payload past the buffer", ErrPluginFailed)
	}
	v := abi.Verdict{Action: a}
	if n == 0 {
		if a == abi.PartError {
			v.Err = &abi.TransformError{Transform: in.name, Class: abi.ClassTransform}
		}
		return v, nil
	}
	b, ok := in.mem.Read(ptr, n)
	if !ok {
		return abi.Verdict{}, fmt.Errorf("%w: payload outside memory", ErrPluginFailed)
	}
	switch a {
	case abi.PartError:
		v.Err, err = abi.DecodeError(b, in.name)
	case abi.PartReplace:
		v.Replace, err = abi.DecodeParts(b)
	}
	if err != nil {
		return abi.Verdict{}, fmt.Errorf("%w: %w", ErrPluginFailed, err)
	}
	return v, nil
}

// status is a Status as an i32 result on the stack.
func status(s abi.Status) uint64 { return uint64(uint32(int32(s))) }

// exportOpenPart is the optional v1.1 export retryhost_open_part (ABI.md §6.3).
const exportOpenPart = "retryhost_open_part"
