package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/host/internal/wasmcheck"
	"github.com/retryhost/retryhost/internal/leaf/filecap"
)

// Runtime owns a wazero runtime with retryhost's sandbox and the plugins
// loaded through it. A Runtime is safe for concurrent use by multiple
// goroutines.
type Runtime struct {
	cfg   config
	wr    wazero.Runtime
	cache wazero.CompilationCache
	epoch time.Time

	mu      sync.Mutex
	closed  bool
	plugins map[*Plugin]struct{}

	// watchdog state (guarded mode only)
	watchMu   sync.Mutex
	watched   map[*instance]struct{}
	stopWatch chan struct{}
	watchDone chan struct{}

	nextID atomic.Uint64

	// compileSem holds a place for every compile still running, abandoned
	// ones included (ModuleLimits.Compiles); Close takes every place to
	// wait for them. closing is closed when Close starts. inCompile counts
	// the compiles running. When Close stops waiting for them (its ctx
	// ended), it leaves the wazero runtime's release in release, and the
	// last compile to finish runs it: wazero must not be closed under a
	// compile.
	compileSem chan struct{}
	closing    chan struct{}
	compileMu  sync.Mutex // guards inCompile's transitions to 0 and release
	inCompile  atomic.Int32
	release    func()
}

// New returns a Runtime ready to load plugins. It fails only if the
// compilation cache directory cannot be used.
func New(ctx context.Context, opts ...Option) (*Runtime, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	var rc wazero.RuntimeConfig
	if cfg.interpreter {
		rc = wazero.NewRuntimeConfigInterpreter()
	} else {
		rc = wazero.NewRuntimeConfig()
	}
	rc = rc.WithMemoryLimitPages(uint32(min(cfg.memoryLimit/65536, 65536))).
		WithCloseOnContextDone(!cfg.trusted).
		WithDebugInfoEnabled(cfg.debugInfo)
	rt := &Runtime{cfg: cfg, epoch: time.Now(), plugins: map[*Plugin]struct{}{}, watched: map[*instance]struct{}{},
		compileSem: make(chan struct{}, cfg.limits.Compiles), closing: make(chan struct{})}
	if cfg.cacheDir != "" {
		dir := cfg.cacheDir
		if cfg.debugInfo {
			dir = filepath.Join(dir, "debug-info")
		}
		c, err := wazero.NewCompilationCacheWithDir(dir)
		if err != nil {
			return nil, fmt.Errorf("host: compilation cache: %w", err)
		}
		rt.cache = c
		rc = rc.WithCompilationCache(c)
	}
	rt.wr = wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt.wr); err != nil {
		_ = rt.wr.Close(ctx)
		return nil, fmt.Errorf("host: wasi: %w", err)
	}
	if err := rt.instantiateABI(ctx); err != nil {
		_ = rt.wr.Close(ctx)
		return nil, fmt.Errorf("host: abi module: %w", err)
	}
	if !cfg.trusted {
		rt.stopWatch = make(chan struct{})
		rt.watchDone = make(chan struct{})
		go rt.watchdog()
	}
	return rt, nil
}

// now is a monotonic clock in nanoseconds since the runtime started.
func (rt *Runtime) now() int64 {
	if rt.cfg.clock != nil {
		return rt.cfg.clock()
	}
	return int64(time.Since(rt.epoch))
}

// watchdog is the per-call deadline guard: one goroutine per Runtime, not
// one per call. Each busy instance publishes its call's deadline; the
// watchdog kills any call past it (instCtx), which stops the guest at
// its next loop back-edge or function entry.
func (rt *Runtime) watchdog() {
	defer close(rt.watchDone)
	tick := max(rt.cfg.callTimeout/4, time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	var busy []*instance
	for {
		select {
		case <-rt.stopWatch:
			return
		case <-t.C:
		}
		busy = rt.expire(rt.now(), busy[:0])
	}
}

// expire kills every call whose deadline is before now (through its
// instance's context: see instCtx);
// busy is scratch space, returned for reuse. A deadline that is not
// positive (idle, claimed, or paused while the host grows the guest's
// memory) is never expired.
//
// A call that has run for more than a quarter of the timeout marks its
// plugin slow: its later calls are measured in CPU time (measuredCall), and
// a measured call past its wall-clock deadline is only stopped once its
// thread has used the timeout in CPU time (instance.extend).
func (rt *Runtime) expire(now int64, busy []*instance) []*instance {
	long := int64(rt.cfg.callTimeout) * 3 / 4 // deadline - now below this: ran > timeout/4
	rt.watchMu.Lock()
	for in := range rt.watched {
		d := in.deadline.Load()
		if d > 0 && d-now < long && cpuClock && !in.p.slow.Load() {
			in.p.slow.Store(true)
		}
		if d > 0 && now > d {
			busy = append(busy, in)
		}
	}
	rt.watchMu.Unlock()
	for _, in := range busy {
		d := in.deadline.Load()
		if d > 0 && now > d && !in.extend(now, d) && in.deadline.CompareAndSwap(d, deadlineClaimed) {
			in.ctx.stop()
		}
	}
	return busy
}

func (rt *Runtime) watch(in *instance) {
	if rt.cfg.trusted {
		return
	}
	rt.watchMu.Lock()
	rt.watched[in] = struct{}{}
	rt.watchMu.Unlock()
}

func (rt *Runtime) unwatch(in *instance) {
	if rt.cfg.trusted {
		return
	}
	rt.watchMu.Lock()
	delete(rt.watched, in)
	rt.watchMu.Unlock()
}

// Load compiles, verifies and initialises a plugin from its bytes, and
// pre-warms its instances. name identifies it in errors and logs.
//
// Before wazero sees the bytes, a linear pre-parse checks them against the
// runtime's [ModuleLimits] and refuses a start section; compiling honours
// ctx and ModuleLimits.CompileTimeout, in trusted mode too. In guarded mode
// each instance's _initialize and retryhost_init run under the init
// deadline and stop when ctx ends; in trusted mode nothing can stop guest
// code (wazero compiles no termination checks), so init is only as bounded
// as the plugin.
//
// # Errors
//
// A [*LoadError] whose Reason says why (errors.Is(err, ErrABIVersion), …;
// [ErrLimit] with a [*LimitError] naming the limit), whose Reason is ctx's
// error if ctx ended first, or [ErrClosed].
func (rt *Runtime) Load(ctx context.Context, name string, wasm []byte, opts ...LoadOption) (*Plugin, error) {
	lc := defaultLoadConfig()
	for _, o := range opts {
		o.applyLoad(&lc)
	}
	rt.mu.Lock()
	closed := rt.closed
	rt.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	sum := sha256.Sum256(wasm)
	if lc.sha256 != "" && !strings.EqualFold(lc.sha256, hex.EncodeToString(sum[:])) {
		return nil, loadErr(name, ErrChecksum, fmt.Errorf("got %x, pinned %s", sum, lc.sha256))
	}
	if err := rt.precheck(name, wasm); err != nil {
		return nil, err
	}
	cm, err := rt.compile(ctx, name, wasm)
	if err != nil {
		return nil, err
	}
	p := &Plugin{rt: rt, name: name, sum: sum, compiled: cm, config: lc.config}
	if err := p.verify(); err != nil {
		_ = cm.Close(ctx)
		return nil, err
	}
	p.slots = make([]*slot, lc.instances)
	for i := range p.slots {
		p.slots[i] = &slot{}
	}
	var declared *abi.TransformPolicy
	var hints abi.Hints
	for i, s := range p.slots {
		in, err := p.instantiate(ctx)
		if ctx.Err() != nil {
			if err == nil {
				in.close()
			}
			err = loadErr(name, ctx.Err(), nil)
		}
		if err != nil {
			p.closeInstances(ctx)
			_ = cm.Close(ctx)
			return nil, err
		}
		s.install(in)
		if i == 0 {
			declared, hints = in.declared, in.hints
		}
	}
	p.settle(lc.policy, declared, hints)
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		p.closeInstances(ctx)
		_ = cm.Close(ctx)
		return nil, ErrClosed
	}
	rt.plugins[p] = struct{}{}
	rt.mu.Unlock()
	return p, nil
}

// precheck is the pre-parse of the binary against the runtime's
// ModuleLimits, before wazero sees it (see package wasmcheck).
func (rt *Runtime) precheck(name string, wasm []byte) error {
	l := rt.cfg.limits
	_, err := wasmcheck.Check(wasm, wasmcheck.Limits{
		ModuleBytes: uint64(l.ModuleBytes), Functions: uint64(l.Functions),
		Imports: uint64(l.Imports), Exports: uint64(l.Exports),
		DataBytes: uint64(l.DataBytes), BodyBytes: uint64(l.BodyBytes),
		Nesting: uint64(l.Nesting), Locals: uint64(l.Locals), AllLocals: uint64(l.AllLocals),
		Tables: uint64(l.Tables), TableEntries: uint64(l.TableEntries),
		Types: uint64(l.Types), Globals: uint64(l.Globals),
		DataSegments: uint64(l.DataSegments), Elements: uint64(l.Elements),
		Names: uint64(l.Names), Blocks: uint64(l.Blocks), Branches: uint64(l.Branches),
		Params: uint64(l.Params), Results: uint64(l.Results), TypeBytes: uint64(l.TypeBytes),
		CompileWork: uint64(l.CompileWork),
	})
	var le *wasmcheck.LimitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &le):
		return loadErr(name, ErrLimit, &LimitError{Limit: le.Limit, Got: int(min(le.Got, math.MaxInt)), Max: int(min(le.Max, math.MaxInt)), Where: le.Where})
	case errors.Is(err, wasmcheck.ErrStartSection):
		return loadErr(name, ErrStartSection, errors.New("use an exported _initialize; a start function runs before any deadline"))
	default:
		return loadErr(name, ErrInvalidModule, err)
	}
}

// compile compiles wasm under the Load context and the CompileTimeout, in
// trusted mode too, and returns when either ends even if wazero goes on:
// wazero checks the context only between functions (and only with more
// than one worker, so it always gets two or more), and one function's
// compile, bounded by the pre-parse's Blocks, Branches and BodyBytes, is
// not interruptible. The compile runs on its own goroutine holding a place
// of ModuleLimits.Compiles until it really finishes; one that finishes
// after its Load gave up closes what it compiled. So an abandoned compile
// still counts against the limit and Close waits for it, and abandoned
// compiles cannot pile up.
func (rt *Runtime) compile(ctx context.Context, name string, wasm []byte) (wazero.CompiledModule, error) {
	limit := rt.cfg.limits.CompileTimeout
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	stopped := func() error {
		if ctx.Err() != nil {
			return loadErr(name, ctx.Err(), nil)
		}
		return loadErr(name, ErrLimit, &LimitError{Limit: "CompileTimeout", Max: int(limit)})
	}
	select {
	case rt.compileSem <- struct{}{}:
	case <-cctx.Done():
		return nil, stopped()
	case <-rt.closing:
		return nil, ErrClosed
	}
	select {
	case <-rt.closing: // both were ready and select took the place
		<-rt.compileSem
		return nil, ErrClosed
	default:
	}
	type result struct {
		cm  wazero.CompiledModule
		err error
	}
	done := make(chan result, 1)
	var state atomic.Int32 // 0 running, 1 delivered, 2 abandoned
	wctx := experimental.WithCompilationWorkers(context.WithoutCancel(cctx), min(max(runtime.GOMAXPROCS(0), 2), 4))
	wctx, wcancel := context.WithCancel(wctx)
	rt.compileMu.Lock()
	rt.inCompile.Add(1)
	rt.compileMu.Unlock()
	go func() {
		defer func() { <-rt.compileSem }()
		defer rt.compileDone()
		defer wcancel()
		var r result
		func() {
			// A panic in wazero's compiler is a module it could not
			// compile, not a crash of the process that loads it.
			defer func() {
				if v := recover(); v != nil {
					r.cm, r.err = nil, fmt.Errorf("the compiler failed: %v", v)
				}
			}()
			if h := rt.cfg.compileHook; h != nil {
				h(wctx)
			}
			r.cm, r.err = rt.wr.CompileModule(wctx, wasm)
		}()
		if state.CompareAndSwap(0, 1) {
			done <- r
		} else if r.cm != nil {
			_ = r.cm.Close(context.Background())
		}
	}()
	var r result
	select {
	case r = <-done:
	case <-cctx.Done():
		wcancel() // wazero stops between functions
		if state.CompareAndSwap(0, 2) {
			return nil, stopped()
		}
		r = <-done
	}
	if cctx.Err() != nil {
		if r.cm != nil {
			_ = r.cm.Close(context.Background())
		}
		return nil, stopped()
	}
	if r.err != nil {
		return nil, loadErr(name, ErrInvalidModule, r.err)
	}
	return r.cm, nil
}

// compileDone ends a compile's count and, if it was the last one running
// after Close stopped waiting, releases the wazero runtime.
func (rt *Runtime) compileDone() {
	rt.compileMu.Lock()
	var release func()
	if rt.inCompile.Add(-1) == 0 {
		release, rt.release = rt.release, nil
	}
	rt.compileMu.Unlock()
	if release != nil {
		release()
	}
}

// ModuleLimits returns the limits this Runtime applies to every module
// (the defaults as set by [WithModuleLimits]), so a caller reading a module
// from a file or a pipe can stop at ModuleBytes+1 instead of reading it
// whole: Load then rejects it with the ModuleBytes limit.
func (rt *Runtime) ModuleLimits() ModuleLimits { return rt.cfg.limits }

// LoadFile is [Runtime.Load] on the contents of a file, read up to the
// ModuleBytes limit: a larger file, or a pipe or device that goes on past
// it, fails with [ErrLimit] before it is read whole.
func (rt *Runtime) LoadFile(ctx context.Context, name, path string, opts ...LoadOption) (*Plugin, error) {
	b, err := rt.readModule(name, path)
	if err != nil {
		return nil, err
	}
	return rt.Load(ctx, name, b, opts...)
}

// readModule reads the module at path, at most ModuleBytes: a regular file
// larger than that is refused from its size, anything else (a pipe,
// /dev/zero) when it goes past it, as a [*LimitError] on ModuleBytes (Got
// 0 when the size is unknown: "over the host's limit").
func (rt *Runtime) readModule(name, path string) ([]byte, error) {
	limit := rt.cfg.limits.ModuleBytes
	b, err := filecap.Read(path, int64(limit))
	var big *filecap.TooLargeError
	switch {
	case errors.As(err, &big):
		return nil, loadErr(name, ErrLimit, &LimitError{Limit: "ModuleBytes", Got: int(min(max(big.Size, 0), math.MaxInt)), Max: limit})
	case err != nil:
		return nil, loadErr(name, ErrInvalidModule, err)
	}
	return b, nil
}

// Close has http.Server.Shutdown semantics: new loads and calls fail with
// [ErrClosed]; it waits for streams and calls in flight until ctx is done,
// then releases everything (the wazero runtime, its modules, the watchdog)
// and returns ctx.Err() if it had to stop waiting. It is idempotent.
func (rt *Runtime) Close(ctx context.Context) error {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return nil
	}
	rt.closed = true
	ps := make([]*Plugin, 0, len(rt.plugins))
	for p := range rt.plugins {
		ps = append(ps, p)
	}
	rt.mu.Unlock()
	var errs []error
	for _, p := range ps {
		if err := p.Close(ctx); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	// Compiles whose Load gave up may still run: wait for them (each is
	// bounded by the per-function limits) by taking every place, up to ctx.
	close(rt.closing)
wait:
	for range cap(rt.compileSem) {
		select {
		case rt.compileSem <- struct{}{}:
		case <-ctx.Done():
			break wait
		}
	}
	if rt.stopWatch != nil {
		close(rt.stopWatch)
		<-rt.watchDone
	}
	var released []error
	release := func() {
		released = append(released, rt.wr.Close(context.Background()))
		if rt.cache != nil {
			released = append(released, rt.cache.Close(context.Background()))
		}
	}
	rt.compileMu.Lock()
	if rt.inCompile.Load() > 0 {
		// Compiles still run (ctx ended first): the last one releases.
		rt.release, release = release, nil
	}
	rt.compileMu.Unlock()
	if release != nil {
		release()
		errs = append(errs, released...)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.Join(errs...)
}

func (rt *Runtime) forget(p *Plugin) {
	rt.mu.Lock()
	delete(rt.plugins, p)
	rt.mu.Unlock()
}

// allowedWASI is the stub WASI a Go or TinyGo reactor needs; see ABI.md §4.5.
var allowedWASI = map[string]bool{
	"args_get": true, "args_sizes_get": true, "environ_get": true, "environ_sizes_get": true,
	"clock_res_get": true, "clock_time_get": true, "fd_write": true, "fd_close": true,
	"fd_fdstat_get": true, "fd_fdstat_set_flags": true, "fd_prestat_get": true,
	"fd_prestat_dir_name": true, "poll_oneoff": true, "proc_exit": true, "random_get": true,
	"sched_yield": true,
}

type sig struct{ params, results []api.ValueType }

var (
	i32, i64 = api.ValueTypeI32, api.ValueTypeI64

	abiImports = map[string]sig{
		abi.ImportBuffer: {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
		abi.ImportInput:  {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
		abi.ImportPolicy: {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
		abi.ImportLog:    {[]api.ValueType{i32, i32, i32}, nil},
	}
	exportSigs = map[string]sig{
		abi.ExportInit:     {[]api.ValueType{i32}, []api.ValueType{i32}},
		abi.ExportDecide:   {[]api.ValueType{i32}, []api.ValueType{i32}},
		abi.ExportOpen:     {[]api.ValueType{i64, i32}, []api.ValueType{i32}},
		abi.ExportPart:     {[]api.ValueType{i64, i32}, []api.ValueType{i64}},
		abi.ExportEnd:      {[]api.ValueType{i64}, []api.ValueType{i64}},
		abi.ExportClose:    {[]api.ValueType{i64}, nil},
		abi.ExportParts:    {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
		abi.ExportOpenPart: {[]api.ValueType{i64, i32, i32}, []api.ValueType{i64}},
		"_initialize":      {nil, nil},
	}
	transformExports = []string{abi.ExportOpen, abi.ExportPart, abi.ExportEnd, abi.ExportClose}
)

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// verify checks statically, before any guest code runs: the ABI version,
// the imports, the exports and the kind (ABI.md §3, §4, §6).
func (p *Plugin) verify() error {
	cm := p.compiled
	exports := cm.ExportedFunctions()
	// Version: the marker export, and no other retryhost_vN namespace.
	if _, ok := exports[abi.ExportABIVersion]; !ok {
		other := ""
		for name := range exports {
			if strings.HasPrefix(name, "retryhost_abi_v") {
				other = strings.TrimPrefix(name, "retryhost_abi_")
			}
		}
		if other != "" {
			return loadErr(p.name, ErrABIVersion, fmt.Errorf("module is built for ABI %s, this host speaks v%d", other, abi.VersionMajor))
		}
		return loadErr(p.name, ErrABIVersion, fmt.Errorf("no %s export: not a retryhost ABI v%d module", abi.ExportABIVersion, abi.VersionMajor))
	}
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		switch {
		case mod == abi.ModuleName:
			want, ok := abiImports[name]
			if !ok {
				return loadErr(p.name, ErrForbiddenImport, fmt.Errorf("%s.%s is not part of ABI v%d.%d", mod, name, abi.VersionMajor, abi.VersionMinor))
			}
			if !sameTypes(f.ParamTypes(), want.params) || !sameTypes(f.ResultTypes(), want.results) {
				return loadErr(p.name, ErrForbiddenImport, fmt.Errorf("%s.%s imported with the wrong signature", mod, name))
			}
		case strings.HasPrefix(mod, "retryhost_"):
			return loadErr(p.name, ErrABIVersion, fmt.Errorf("module imports %s, this host speaks %s", mod, abi.ModuleName))
		case mod == wasi_snapshot_preview1.ModuleName:
			if !allowedWASI[name] {
				return loadErr(p.name, ErrForbiddenImport, fmt.Errorf("%s.%s (no files, sockets or other WASI capabilities)", mod, name))
			}
		default:
			return loadErr(p.name, ErrForbiddenImport, fmt.Errorf("%s.%s: only %s and a stub WASI are provided", mod, name, abi.ModuleName))
		}
	}
	if len(cm.ImportedMemories()) > 0 {
		return loadErr(p.name, ErrForbiddenImport, errors.New("imported memory"))
	}
	if _, ok := cm.ExportedMemories()[abi.ExportMemory]; !ok {
		return loadErr(p.name, ErrBadExport, errors.New(`no exported "memory"`))
	}
	for name, want := range exportSigs {
		f, ok := exports[name]
		if ok && (!sameTypes(f.ParamTypes(), want.params) || !sameTypes(f.ResultTypes(), want.results)) {
			return loadErr(p.name, ErrBadExport, fmt.Errorf("%s has the wrong signature", name))
		}
	}
	if _, ok := exports[abi.ExportInit]; !ok {
		return loadErr(p.name, ErrBadExport, fmt.Errorf("no %s export", abi.ExportInit))
	}
	_, p.isCondition = exports[abi.ExportDecide]
	_, p.hasBatch = exports[abi.ExportParts]
	n := 0
	for _, name := range transformExports {
		if _, ok := exports[name]; ok {
			n++
		}
	}
	switch {
	case n == len(transformExports):
		p.isTransform = true
	case n > 0:
		return loadErr(p.name, ErrBadExport, fmt.Errorf("a transform must export all of %s", strings.Join(transformExports, ", ")))
	}
	if !p.isCondition && !p.isTransform {
		return loadErr(p.name, ErrNoKind, fmt.Errorf("export %s or %s", abi.ExportDecide, strings.Join(transformExports, ", ")))
	}
	return nil
}
