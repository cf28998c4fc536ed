package host

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/internal/testkit/wasmgen"
)

// dwarfSource is what a trap's stack trace names when wazero resolved its
// frames against dwarftrap.wasm's DWARF (lines like "0x1234:
// host/testdata/dwarftrap.c:61:3").
const dwarfSource = "dwarftrap.c:"

// TestTrap_DebugInfoOffByDefault: a trap in a module with large DWARF
// returns ErrTrap with a stack trace of function names only: the default
// runtime never reads the DWARF, so it never walks it. With WithDebugInfo
// the same trap names its source lines.
func TestTrap_DebugInfoOffByDefault(t *testing.T) {
	require.False(t, defaultConfig().debugInfo)
	ctx := context.Background()
	engines(t, func(t *testing.T, opts ...Option) {
		rt := newRuntime(t, opts...)
		p, err := rt.Load(ctx, "dwarftrap", fixture(t, "dwarftrap"), WithConfig([]byte("64")))
		require.NoError(t, err)
		_, err = p.Decide(ctx, &abi.Attempt{Number: 1})
		require.ErrorIs(t, err, ErrTrap)
		require.Contains(t, err.Error(), "wasm error: unreachable")
		require.Contains(t, err.Error(), ".fn_", "the frames are named (name section)")
		require.NotContains(t, err.Error(), dwarfSource, "no frame was resolved against the DWARF")
	})
	t.Run("with debug info", func(t *testing.T) {
		rt := newRuntime(t, WithDebugInfo())
		p, err := rt.Load(ctx, "dwarftrap", fixture(t, "dwarftrap"), WithConfig([]byte("2")))
		require.NoError(t, err)
		_, err = p.Decide(ctx, &abi.Attempt{Number: 1})
		require.ErrorIs(t, err, ErrTrap)
		require.Contains(t, err.Error(), dwarfSource)

		// Without its DWARF sections the module traps the same way, with
		// names only (the benchmark's module without DWARF).
		p, err = rt.Load(ctx, "stripped", wasmgen.StripCustom(fixture(t, "dwarftrap"), ".debug_"), WithConfig([]byte("2")))
		require.NoError(t, err)
		_, err = p.Decide(ctx, &abi.Attempt{Number: 1})
		require.ErrorIs(t, err, ErrTrap)
		require.Contains(t, err.Error(), ".fn_")
		require.NotContains(t, err.Error(), dwarfSource)
	})
}

// TestTrap_DebugInfoWithACompilationCache: a runtime with debug info
// names a trap's source lines though a runtime without it compiled the
// same module into the same cache directory first, and the other way
// round the default runtime still names none.
func TestTrap_DebugInfoWithACompilationCache(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	trapError := func(opts ...Option) string {
		t.Helper()
		rt := newRuntime(t, append(opts, WithCacheDir(dir))...)
		p, err := rt.Load(ctx, "dwarftrap", fixture(t, "dwarftrap"), WithConfig([]byte("2")))
		require.NoError(t, err)
		_, err = p.Decide(ctx, &abi.Attempt{Number: 1})
		require.ErrorIs(t, err, ErrTrap)
		return err.Error()
	}
	require.NotContains(t, trapError(), dwarfSource)
	require.Contains(t, trapError(WithDebugInfo()), dwarfSource)
	require.NotContains(t, trapError(), dwarfSource)
	require.Contains(t, trapError(WithDebugInfo()), dwarfSource)
}

// holdingHandler is a slog.Handler that holds every record whose message
// starts with prefix until release is closed, after telling entered: the
// guest that logs it is held inside its call. Once release is closed it
// holds nothing.
type holdingHandler struct {
	prefix  string
	entered chan<- struct{}
	release <-chan struct{}
}

func (h *holdingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *holdingHandler) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, h.prefix) {
		return nil
	}
	select {
	case <-h.release:
	case h.entered <- struct{}{}:
		<-h.release
	}
	return nil
}

func (h *holdingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *holdingHandler) WithGroup(string) slog.Handler      { return h }

// TestTrap_ConcurrentTrapsLeaveOtherPluginsServing: several calls into the
// DWARF module are in flight at once, each about to trap, while another
// plugin's calls keep succeeding; then they all trap at once and each gets
// its ErrTrap; then goroutines trap in a loop beside a well-behaved
// plugin's callers, and everything completes. No trap waits on another,
// and none holds up the other plugin.
func TestTrap_ConcurrentTrapsLeaveOtherPluginsServing(t *testing.T) {
	const trappers = 4
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	logger := slog.New(&holdingHandler{prefix: "dwarftrap:", entered: entered, release: release})
	// The call deadline is not what this is about: the held calls wait on
	// the test.
	rt := newRuntime(t, WithLogger(logger), WithCallTimeout(time.Hour), WithBreaker(0, time.Hour))
	trap, err := rt.Load(ctx, "dwarftrap", fixture(t, "dwarftrap"), WithConfig([]byte("64")), WithInstances(trappers))
	require.NoError(t, err)
	good, err := rt.Load(ctx, "condition", fixture(t, "condition"), WithConfig([]byte("backup")))
	require.NoError(t, err)
	retry := func() {
		t.Helper()
		d, err := good.Decide(ctx, &abi.Attempt{Number: 1, Status: 429})
		require.NoError(t, err)
		require.Equal(t, abi.ActionRetry, d.Action)
	}

	var returned atomic.Int32
	errs := make([]error, trappers)
	var wg sync.WaitGroup
	for i := range trappers {
		wg.Go(func() {
			_, errs[i] = trap.Decide(ctx, &abi.Attempt{Number: 1})
			returned.Add(1)
		})
	}
	for range trappers {
		<-entered
	}
	// Every trapping call is inside the guest now, on its own instance.
	for range 10 {
		retry()
	}
	require.Zero(t, returned.Load(), "the other plugin served while every trapping call was in flight")
	close(release)
	wg.Wait()
	for i, err := range errs {
		require.ErrorIs(t, err, ErrTrap, "trapper %d", i)
		require.NotContains(t, err.Error(), dwarfSource)
	}

	// Traps in a loop on every instance, beside the other plugin's callers.
	var trapped atomic.Int32
	stop := make(chan struct{})
	var served atomic.Int32
	var goods sync.WaitGroup
	for range 2 {
		goods.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				d, err := good.Decide(ctx, &abi.Attempt{Number: 1, Status: 429})
				if err != nil || d.Action != abi.ActionRetry {
					t.Errorf("the well-behaved plugin failed beside the traps: %v %v", d, err)
					return
				}
				served.Add(1)
			}
		})
	}
	for range trappers {
		wg.Go(func() {
			for range 25 {
				_, err := trap.Decide(ctx, &abi.Attempt{Number: 1})
				if !errIsTrapWithoutSource(err) {
					t.Errorf("want a trap without source lines, got %v", err)
					return
				}
				trapped.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	goods.Wait()
	require.EqualValues(t, trappers*25, trapped.Load())
	require.Positive(t, served.Load())
	retry()
}

func errIsTrapWithoutSource(err error) bool {
	return err != nil && errors.Is(err, ErrTrap) && !strings.Contains(err.Error(), dwarfSource)
}

// BenchmarkTrap_DWARF: what a trap costs beyond the call, in a module with
// large DWARF (dwarftrap.wasm, 64 frames deep): "call" is the same
// recursion returning normally; "trap" a trap with the default runtime
// (debug info off); "trap-debug-info" the same with WithDebugInfo (wazero
// resolves every frame against the DWARF); "trap-no-dwarf" the module with
// its DWARF sections removed, under WithDebugInfo. Each trap discards its
// instance, so a trap's figure includes the replacement's instantiation.
// The figures of the limits table's DWARF row (docs/security.md).
func BenchmarkTrap_DWARF(b *testing.B) {
	ctx := context.Background()
	wasm := fixture(b, "dwarftrap")
	cases := []struct {
		name   string
		wasm   []byte
		config string
		opts   []Option
	}{
		{"call", wasm, "ok 64", nil},
		{"trap", wasm, "64", nil},
		{"trap-debug-info", wasm, "64", []Option{WithDebugInfo()}},
		{"trap-no-dwarf", wasmgen.StripCustom(wasm, ".debug_"), "64", []Option{WithDebugInfo()}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			rt := newRuntime(b, append(c.opts, WithBreaker(0, time.Hour))...)
			p, err := rt.Load(ctx, "dwarftrap", c.wasm, WithConfig([]byte(c.config)), WithInstances(1))
			require.NoError(b, err)
			wantTrap := strings.HasPrefix(c.name, "trap")
			for b.Loop() {
				_, err := p.Decide(ctx, &abi.Attempt{Number: 1})
				if wantTrap != errors.Is(err, ErrTrap) {
					b.Fatalf("want a trap: %v, got %v", wantTrap, err)
				}
			}
		})
	}
}
