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
