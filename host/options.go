package host

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// Option configures a [Runtime]. Options apply in order; later ones win.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	logger       *slog.Logger
	callTimeout  time.Duration
	initTimeout  time.Duration
	trusted      bool
	interpreter  bool
	memoryLimit  uint64
	pluginMemory uint64
	cacheDir     string
	breakerN     int
	breakerSpan  time.Duration
	// breakerWindow: the calls over which breakerN failures trip the
	// breaker; 0 means 3 × breakerN.
	breakerWindow int
	outputCap     int
	logLineLimit  int
	observer      Observer // nil: none
	limits        ModuleLimits
	// ABI v1.2 runtime limits (see the limits table in docs/security.md).
	breakerCooldown time.Duration
	maxBuffer       int
	replace         ReplaceLimits
	hold            abi.TransformPolicy // operator maxima: caps only
	// ctxGuard makes calls use wazero's own guard (a context with a timeout
	// per call) instead of the watchdog; benchmarks compare the two.
	ctxGuard bool
	// Test seams, nil in production: clock replaces the runtime's monotonic
	// clock (nanoseconds), onGrow runs inside every host-side growth of a
	// guest memory, on the calling goroutine.
	clock  func() int64
	onGrow func()
	// wallFactor replaces the wall-clock cap of CPU-timed calls (0: the
	// default 20× the call timeout): a test on a machine loaded beyond
	// its own spinners checks CPU-time semantics, not that cap.
	wallFactor int
	// compileHook runs on the compile's goroutine before wazero compiles
	// (with the compile's context): a test holds a compile open with it.
	compileHook func(context.Context)
	// debugInfo keeps DWARF and name-section data for trap stack traces
	// (WithDebugInfo).
	debugInfo bool
}

func defaultConfig() config {
	return config{
		logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		callTimeout:  50 * time.Millisecond,
		initTimeout:  5 * time.Second,
		memoryLimit:  64 << 20,
		pluginMemory: 256 << 20,
		breakerN:     5,
		breakerSpan:  time.Minute,
		outputCap:    64 << 10,
		logLineLimit: 1000,
		limits:       DefaultModuleLimits(),

		breakerCooldown: 30 * time.Second,
		maxBuffer:       1 << 20,
		replace:         defaultReplaceLimits,
		hold:            abi.TransformPolicy{MaxHeldParts: 256, MaxHeldBytes: 64 << 10, MaxHoldTime: 10 * time.Second},
	}
}

// WithLogger routes plugin logs (the log import, stdout and stderr, capped)
// and the host's own events (instance discarded, breaker tripped, reload
// failed) to l. Default: discard.
//
// A line the plugin wrote is a record whose message is the line, with the
// attributes plugin (the name it was loaded under) and stream: "log" (the
// log import, at the guest's level, with truncated), "stdout" or "stderr"
// (at Info). The host's own records carry no stream attribute.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.logger = l
		}
	})
}

// WithCallTimeout bounds each call into a plugin. Default 50ms. A call that
// outlives it is stopped and its instance discarded ([ErrTimeout]). Values
// ≤ 0 keep the default; use [WithTrusted] to turn the guard off.
func WithCallTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.callTimeout = d
		}
	})
}

// WithTrusted runs plugins without the per-call deadline guard: calls are
// cheaper (no watchdog goroutine per call, no termination checks in loops)
// but a plugin that never returns hangs its caller forever. Only for
// first-party plugins. Default: guarded.
func WithTrusted() Option { return optionFunc(func(c *config) { c.trusted = true }) }

// WithDebugInfo makes a trap's error carry a stack trace with source
// lines from the module's DWARF sections. Off by default: wazero then
// reads a module's DWARF at compile time and walks it for every trap
// under a lock (a trap in a guest with large DWARF cost tens of seconds
// of host CPU outside the call's deadline); without it a trap's stack
// trace has function names only and costs what the call costs. For
// plugin authors' tools (retryhost replay --debug, plugin inspect
// --debug), not for serving untrusted plugins.
func WithDebugInfo() Option { return optionFunc(func(c *config) { c.debugInfo = true }) }

// WithInterpreter uses wazero's interpreter instead of its compiler:
// compiles faster, runs 10-40× slower. Default: the compiler where wazero
// supports it (amd64, arm64), else the interpreter.
func WithInterpreter() Option { return optionFunc(func(c *config) { c.interpreter = true }) }

// WithMemoryLimit caps each instance's linear memory, rounded down to whole
// 64 KiB pages. Default 64 MiB. A plugin whose declared minimum is above it
// fails to load; growth past it fails inside the guest.
func WithMemoryLimit(bytes uint64) Option {
	return optionFunc(func(c *config) {
		if bytes >= 65536 {
			c.memoryLimit = bytes
		}
	})
}

// WithPluginMemory caps the linear memory all instances of one loaded
// plugin hold together (each is also capped by [WithMemoryLimit]), so that
// a plugin's pool of instances ([WithInstances]) costs at most this much,
// not instances × the per-instance limit. A memory.grow that would go past
// it fails inside the guest, like one past the per-instance limit; an
// instance whose declared minimum does not fit is not created: a Load whose
// instances do not fit fails with [ErrLimit], and a discarded instance is
// replaced only when its memory has been returned. Default 256 MiB (four
// instances at the 64 MiB limit); values below 64 KiB keep the default.
func WithPluginMemory(bytes uint64) Option {
	return optionFunc(func(c *config) {
		if bytes >= 65536 {
			c.pluginMemory = bytes
		}
	})
}

// WithCacheDir keeps compiled code in dir, so a later process loads the same
// plugin from disk instead of compiling it again. Default: no disk cache.
// A runtime with [WithDebugInfo] keeps its code in dir's debug-info
// subdirectory: code compiled with and without the source map a trap's
// source lines need are kept apart (wazero's cache tells them not).
func WithCacheDir(dir string) Option { return optionFunc(func(c *config) { c.cacheDir = dir }) }

// WithBreaker disables a plugin version that keeps failing: when, within
// span, n of its calls failed among its last calls (the window,
// [WithBreakerWindow]: 3n calls unless set). Every kind of failure counts:
// a trap (a memory fault, a stack overflow), a timeout, an exit, an ABI
// violation (garbage output), a negative result, a host limit. So with the
// defaults a plugin failing one call in three is disabled after 5 failures
// of 15 calls or fewer, n failures in a row trip it at once, and rare
// failures among many successful calls never do. A disabled plugin answers
// [ErrDisabled] for the cooldown ([WithBreakerCooldown]), then lets one
// probe through: a probe that succeeds re-enables it, one that fails
// disables it for another cooldown. Loading a new version starts afresh.
// A capacity refusal ([ErrNoCapacity]) is not a failure. Default 5 within
// one minute; n ≤ 0 never disables.
func WithBreaker(n int, span time.Duration) Option {
	return optionFunc(func(c *config) { c.breakerN, c.breakerSpan = n, span })
}

// WithBreakerWindow sets the number of most recent calls within which the
// breaker's n failures ([WithBreaker]) must fall to trip it: n/calls is the
// failure rate it tolerates. Default 3n (15: a rate of one call in three);
// values ≤ 0 keep the default, values below n are n (only failures in a
// row trip it).
func WithBreakerWindow(calls int) Option {
	return optionFunc(func(c *config) { c.breakerWindow = max(calls, 0) })
}

// WithBreakerCooldown sets how long a plugin the breaker disabled stays
// disabled before a probe may re-enable it. Default 30s; values ≤ 0 keep
// the default.
func WithBreakerCooldown(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.breakerCooldown = d
		}
	})
}

// WithMaxBuffer caps the scratch buffer a plugin may register (ABI v1.2
// §4.1: a larger one is refused with StatusTooLarge and, unless the plugin
// registers a smaller one, fails the load with [ErrNoBuffer]). It bounds
// what the host ever reads of one verdict. Default 1 MiB; values below
// 64 KiB (what the Go SDK registers) keep the default.
func WithMaxBuffer(bytes int) Option {
	return optionFunc(func(c *config) {
		if bytes >= 64<<10 {
			c.maxBuffer = bytes
		}
	})
}

// ReplaceLimits caps what a transform's REPLACE verdicts may emit (ABI v1.2
// §8.6), checked while the host decodes the verdict: a REPLACE over a cap
// fails the stream with [ErrLimit] (a [*LimitError] names the cap). Zero
// fields keep their defaults.
type ReplaceLimits struct {
	// CallParts and CallBytes cap one verdict's list: default 1024 parts
	// and 256 KiB of payload ([abi.Part.Size]).
	CallParts, CallBytes int
	// StreamParts and StreamBytes cap a stream's REPLACE output beyond 4×
	// what the stream itself sent through the transform (so a transform
	// may rewrite every part of a long stream, but not amplify it):
	// default 1024 parts and 1 MiB.
	StreamParts, StreamBytes int
}

var defaultReplaceLimits = ReplaceLimits{CallParts: 1024, CallBytes: 256 << 10, StreamParts: 1024, StreamBytes: 1 << 20}

// WithReplaceLimits sets the caps on REPLACE output. Default
// ReplaceLimits{CallParts: 1024, CallBytes: 256 << 10, StreamParts: 1024,
// StreamBytes: 1 << 20}.
func WithReplaceLimits(l ReplaceLimits) Option {
	return optionFunc(func(c *config) {
		c.replace = defaultReplaceLimits
		for _, f := range []struct {
			dst *int
			v   int
		}{
			{&c.replace.CallParts, l.CallParts}, {&c.replace.CallBytes, l.CallBytes},
			{&c.replace.StreamParts, l.StreamParts}, {&c.replace.StreamBytes, l.StreamBytes},
		} {
			if f.v > 0 {
				*f.dst = f.v
			}
		}
	})
}

// WithHoldLimits sets the operator's maxima for the hold caps a plugin
// declares in its policy (ABI.md §8.7): a plugin may only tighten them. A
// declared cap of 0 (the default) or above the maximum becomes the
// maximum. Default 256 parts, 64 KiB and 10s, the driver's own defaults;
// values ≤ 0 keep the default. [WithPolicy] is the operator's own word and
// is not clamped.
func WithHoldLimits(parts, bytes int, hold time.Duration) Option {
	return optionFunc(func(c *config) {
		if parts > 0 {
			c.hold.MaxHeldParts = parts
		}
		if bytes > 0 {
			c.hold.MaxHeldBytes = bytes
		}
		if hold > 0 {
			c.hold.MaxHoldTime = hold
		}
	})
}

// WithLogLimit sets how many lines each loaded plugin (all its instances
// together) may write through the log import over its whole life (a
// budget, not a rate: ABI.md §4.4); later lines are dropped after one
// warning. The budget survives a trap: a replacement instance does not
// start afresh. Default 1000; values ≤ 0 keep the default.
func WithLogLimit(lines int) Option {
	return optionFunc(func(c *config) {
		if lines > 0 {
			c.logLineLimit = lines
		}
	})
}

// LoadOption configures one plugin load.
type LoadOption interface{ applyLoad(*loadConfig) }

type loadOptionFunc func(*loadConfig)

func (f loadOptionFunc) applyLoad(c *loadConfig) { f(c) }

type loadConfig struct {
	config    []byte
	sha256    string
	instances int
	policy    *abi.TransformPolicy
}

func defaultLoadConfig() loadConfig {
	return loadConfig{instances: min(max(runtime.GOMAXPROCS(0), 2), 8)}
}

// WithConfig hands the plugin its config at load (retryhost_init). The
// bytes are copied. Default: empty.
func WithConfig(b []byte) LoadOption {
	b = append([]byte(nil), b...)
	return loadOptionFunc(func(c *loadConfig) { c.config = b })
}

// WithSHA256 pins the module's sha256 (hex); a mismatch fails the load with
// [ErrChecksum]. Default: not pinned.
func WithSHA256(hex string) LoadOption {
	return loadOptionFunc(func(c *loadConfig) { c.sha256 = hex })
}

// WithInstances sets how many instances the plugin keeps warm; streams are
// multiplexed over them. Default GOMAXPROCS, at least 2, at most 8.
func WithInstances(n int) LoadOption {
	return loadOptionFunc(func(c *loadConfig) {
		if n > 0 {
			c.instances = n
		}
	})
}

// WithPolicy overrides the transform policy the plugin declared (or the
// defaults, if it declared none). It is the operator's own word: its hold
// caps are not clamped by [WithHoldLimits].
func WithPolicy(p abi.TransformPolicy) LoadOption {
	return loadOptionFunc(func(c *loadConfig) { c.policy = &p })
}

// ModuleLimits bounds what a module may declare and what loading it may
// cost the host, checked by a linear pre-parse of the binary before wazero
// decodes or compiles it (wazero allocates what a module declares, lists
// exports in quadratic time and compiles nested blocks in quadratic time).
// A module past a limit fails to load with [ErrLimit] and a [*LimitError]
// naming the field. The defaults leave room many times over for the
// built-in plugins (the Go-SDK builds: 3.4–4 MB, about 2,400 functions, 19
// imports, 5–10 exports, 1 MB of data in 41,000 segments, bodies up to 50
// KB, nesting 549, 20 locals (10,000 in all), one table of 6,500
// entries, 13 types, 8 globals; the C builds are far smaller).
// A ModuleLimits is a plain value, safe to copy.
type ModuleLimits struct {
	// ModuleBytes: size of the binary. Default 16 MiB.
	ModuleBytes int
	// Functions: imported and defined functions. Default 50,000.
	Functions int
	// Imports: imports of any kind. Default 1,000.
	Imports int
	// Exports: exports of any kind. Default 1,000.
	Exports int
	// DataBytes: bytes of all data segments together. Default 8 MiB.
	DataBytes int
	// BodyBytes: size of one function body. Default 1 MiB.
	BodyBytes int
	// Nesting: depth of nested blocks, loops and ifs in one function
	// (compile time is quadratic in it). Default 2,048.
	Nesting int
	// Locals: declared locals of one function. Default 50,000.
	Locals int
	// AllLocals: declared locals of all functions together (wazero
	// allocates them at decode: 50,000 functions of 50,000 locals would be
	// 2.5 GB). Default 1,048,576.
	AllLocals int
	// Tables: imported and defined tables. Default 4.
	Tables int
	// TableEntries: entries all tables of one instance can ever hold
	// together (8 bytes of host memory each, outside WithMemoryLimit): a
	// table's declared maximum, or its size if it declares none (then the
	// code may not grow it). Default 1,048,576 (8 MiB).
	TableEntries int
	// Types: function types. wazero keeps a few hundred bytes per type
	// (15 MiB of types took 1.5 GB to decode). Default 10,000.
	Types int
	// Globals: imported and defined globals (kept per instance). Default
	// 10,000.
	Globals int
	// DataSegments: data segments (a Go guest has ~40,000 per MB of
	// data). Default 500,000.
	DataSegments int
	// Elements: element segments and their items together. Default
	// 262,144.
	Elements int
	// Names: entries of the "name" custom section's function and local
	// maps, which wazero decodes. Default 262,144.
	Names int
	// Blocks: blocks, loops and ifs in one function body. wazero's
	// compiler is super-linear in them (measured curve in the limits
	// table). Default 2,048.
	Blocks int
	// Branches: br and br_if instructions and br_table labels of one
	// function body together, the edges of its control flow graph
	// (compile time is quadratic in them; each br_table label costs about
	// 2.4 KB while compiling). Default 4,096.
	Branches int
	// Params and Results: parameters and results of one function type.
	// Default 1,000 each.
	Params  int
	Results int
	// TypeBytes: size of the type section. Default 1 MiB.
	TypeBytes int
	// CompileWork: the compile cost of all function bodies together, in
	// units of about 10 ns of CPU for wazero's optimising compiler. A
	// body costs 1,024 + 256 × (blocks + jumps) + blocks² / 2 +
	// jumps × (jumps + 3 × blocks), where blocks counts its blocks, loops
	// and ifs and jumps its br and br_if instructions: compile time is
	// quadratic in both. Blocks, Branches and Nesting bound one body;
	// this bounds how many such bodies a module may have (400 bodies of
	// 2,000 sibling blocks branching out, each within every per-function
	// limit, took 34 s of CPU). Default 134,217,728 (2^27: the worst
	// module measured at it compiles in 1.6 s of CPU; the Go-SDK builds
	// reach 57 million). Instructions that compile in linear time are
	// bounded by ModuleBytes instead.
	CompileWork int
	// Compiles: compiles running at once in one Runtime, counting those
	// whose Load already returned (ctx ended, CompileTimeout) until they
	// really finish; a Load past it waits for a place, under its ctx and
	// CompileTimeout. Default 2.
	Compiles int
	// CompileTimeout bounds compiling one module, in trusted mode too;
	// the Load context's deadline applies as well. Default 2m (a 4 MB Go guest
	// compiles in 3–8 s, 25 s under the race detector).
	CompileTimeout time.Duration
}

// DefaultModuleLimits returns the limits a [Runtime] applies unless
// [WithModuleLimits] says otherwise.
func DefaultModuleLimits() ModuleLimits {
	return ModuleLimits{
		ModuleBytes:    16 << 20,
		Functions:      50_000,
		Imports:        1000,
		Exports:        1000,
		DataBytes:      8 << 20,
		BodyBytes:      1 << 20,
		Nesting:        2048,
		Locals:         50_000,
		AllLocals:      1 << 20,
		Tables:         4,
		TableEntries:   1 << 20,
		Types:          10_000,
		Globals:        10_000,
		DataSegments:   500_000,
		Elements:       1 << 18,
		Names:          1 << 18,
		Blocks:         2048,
		Branches:       4096,
		Params:         1000,
		Results:        1000,
		TypeBytes:      1 << 20,
		CompileWork:    1 << 27,
		Compiles:       2,
		CompileTimeout: 2 * time.Minute,
	}
}

// WithModuleLimits sets the limits every module loaded through the
// Runtime must meet. A field ≤ 0 keeps its default (see [ModuleLimits]);
// there is no "unlimited".
func WithModuleLimits(l ModuleLimits) Option {
	return optionFunc(func(c *config) {
		set := func(dst *int, v int) {
			if v > 0 {
				*dst = v
			}
		}
		m := &c.limits
		set(&m.ModuleBytes, l.ModuleBytes)
		set(&m.Functions, l.Functions)
		set(&m.Imports, l.Imports)
		set(&m.Exports, l.Exports)
		set(&m.DataBytes, l.DataBytes)
		set(&m.BodyBytes, l.BodyBytes)
		set(&m.Nesting, l.Nesting)
		set(&m.Locals, l.Locals)
		set(&m.AllLocals, l.AllLocals)
		set(&m.Tables, l.Tables)
		set(&m.TableEntries, l.TableEntries)
		set(&m.Types, l.Types)
		set(&m.Globals, l.Globals)
		set(&m.DataSegments, l.DataSegments)
		set(&m.Elements, l.Elements)
		set(&m.Names, l.Names)
		set(&m.Blocks, l.Blocks)
		set(&m.Branches, l.Branches)
		set(&m.Params, l.Params)
		set(&m.Results, l.Results)
		set(&m.TypeBytes, l.TypeBytes)
		set(&m.CompileWork, l.CompileWork)
		set(&m.Compiles, l.Compiles)
		if l.CompileTimeout > 0 {
			m.CompileTimeout = l.CompileTimeout
		}
	})
}

// WithInitTimeout bounds each instance's initialisation (_initialize and
// retryhost_init) in guarded mode; the Load context ends it too. Default
// 5s. A plugin that outlives it fails to load ([ErrInit] wrapping
// [ErrTimeout]). Values ≤ 0 keep the default. In trusted mode nothing can
// stop guest code, init included.
func WithInitTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.initTimeout = d
		}
	})
}
