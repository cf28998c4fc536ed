package host

import (
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
	cacheDir     string
	breakerN     int
	breakerSpan  time.Duration
	outputCap    int
	logLineLimit int
	observer     Observer // nil: none
	limits       ModuleLimits
	// ctxGuard makes calls use wazero's own guard (a context with a timeout
	// per call) instead of the watchdog; benchmarks compare the two.
	ctxGuard bool
	// Test seams, nil in production: clock replaces the runtime's monotonic
	// clock (nanoseconds), onGrow runs inside every host-side growth of a
	// guest memory, on the calling goroutine.
	clock  func() int64
	onGrow func()
}

func defaultConfig() config {
	return config{
		logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		callTimeout:  50 * time.Millisecond,
		initTimeout:  5 * time.Second,
		memoryLimit:  64 << 20,
		breakerN:     5,
		breakerSpan:  time.Minute,
		outputCap:    64 << 10,
		logLineLimit: 1000,
		limits:       DefaultModuleLimits(),
	}
}

// WithLogger routes plugin logs (the log import, stdout and stderr, capped)
// and the host's own events (instance discarded, breaker tripped, reload
// failed) to l. Default: discard.
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

// WithCacheDir keeps compiled code in dir, so a later process loads the same
// plugin from disk instead of compiling it again. Default: no disk cache.
func WithCacheDir(dir string) Option { return optionFunc(func(c *config) { c.cacheDir = dir }) }

// WithBreaker disables a plugin version after n failures within span, until
// a new version is loaded. Default 5 within one minute; n ≤ 0 never
// disables.
func WithBreaker(n int, span time.Duration) Option {
	return optionFunc(func(c *config) { c.breakerN, c.breakerSpan = n, span })
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
// defaults, if it declared none).
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
// imports, 5–10 exports, 1 MB of data, bodies up to 50 KB, nesting 549, 20
// locals, one table of 6,500 entries; the C builds are far smaller).
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
	// Tables: imported and defined tables. Default 4.
	Tables int
	// TableEntries: entries all tables of one instance can ever hold
	// together (8 bytes of host memory each, outside WithMemoryLimit): a
	// table's declared maximum, or its size if it declares none (then the
	// code may not grow it). Default 1,048,576 (8 MiB).
	TableEntries int
	// CompileTimeout bounds compiling one module, in trusted mode too;
	// the Load context's deadline applies as well. Default 60s.
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
		Tables:         4,
		TableEntries:   1 << 20,
		CompileTimeout: time.Minute,
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
		set(&m.Tables, l.Tables)
		set(&m.TableEntries, l.TableEntries)
		if l.CompileTimeout > 0 {
			m.CompileTimeout = l.CompileTimeout
		}
	})
}
