package host

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit/wasmgen"
)

// TestLoad_ReturnsAtItsDeadlineWhileCompiling: wazero checks the context
// only between functions, so a module of one function that compiles for
// seconds (here 5,000 sibling blocks branching out, allowed by raised
// limits) held Load past its deadline. Load now returns ctx's error while
// the compile still runs on its own, and Close waits for that compile.
func TestLoad_ReturnsAtItsDeadlineWhileCompiling(t *testing.T) {
	rt, err := New(context.Background(), WithModuleLimits(ModuleLimits{Blocks: 1 << 20, Branches: 1 << 20}))
	require.NoError(t, err)
	// Seconds of compile on a fast idle machine, many times the deadline
	// (the race detector slows wazero's compiler several times over).
	n := 5000
	if raceEnabled {
		n = 3000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	p, err := rt.Load(ctx, "slow", wasmgen.SiblingBranches(n))
	require.Nil(t, p)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var le *LoadError
	require.ErrorAs(t, err, &le)
	require.Positive(t, rt.inCompile.Load(), "Load returned without waiting for the compile")
	require.NoError(t, rt.Close(context.Background()))
	require.Zero(t, rt.inCompile.Load(), "Close waited for the abandoned compile")
}

// TestLoad_AbandonedCompilesHoldTheConcurrencyLimit: a compile whose Load
// gave up keeps its place until it really finishes, so abandoned compiles
// cannot pile up past ModuleLimits.Compiles; a Load waiting for a place
// still ends with its ctx.
func TestLoad_AbandonedCompilesHoldTheConcurrencyLimit(t *testing.T) {
	const limit = 2
	var started atomic.Int32
	release := make(chan struct{})
	entered := make(chan struct{}, 16)
	rt := newRuntime(t, WithModuleLimits(ModuleLimits{Compiles: limit}), optionFunc(func(c *config) {
		c.compileHook = func(context.Context) {
			started.Add(1)
			entered <- struct{}{}
			<-release
		}
	}))
	wasm := fixture(t, "refusal")
	for range limit {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-entered; cancel() }()
		_, err := rt.Load(ctx, "abandoned", wasm)
		require.ErrorIs(t, err, context.Canceled)
	}
	require.EqualValues(t, limit, started.Load())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := rt.Load(ctx, "waiting", wasm)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.EqualValues(t, limit, started.Load(), "no compile started past the limit")
	close(release)
	p, err := rt.Load(context.Background(), "after", wasm)
	require.NoError(t, err)
	require.NoError(t, p.Close(context.Background()))
	require.EqualValues(t, limit+1, started.Load())
}

// TestClose_StoppedEarlyLeavesWazeroToTheLastCompile: a Close whose ctx
// ends while an abandoned compile still runs returns at once, but the
// wazero runtime stays open under that compile (closing it there made
// wazero's compiler panic on its freed type table and took the process
// down) and is released when the compile ends.
func TestClose_StoppedEarlyLeavesWazeroToTheLastCompile(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	rt, err := New(context.Background(), optionFunc(func(c *config) {
		c.compileHook = func(context.Context) {
			close(entered)
			<-release
		}
	}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }()
	_, err = rt.Load(ctx, "abandoned", fixture(t, "refusal"))
	require.ErrorIs(t, err, context.Canceled)

	stopped, stop := context.WithCancel(context.Background())
	stop()
	require.ErrorIs(t, rt.Close(stopped), context.Canceled)
	require.EqualValues(t, 1, rt.inCompile.Load(), "the compile still runs")

	close(release) // the compile goes on, on an open wazero runtime
	require.Eventually(t, func() bool { return rt.inCompile.Load() == 0 }, time.Minute, time.Millisecond)
	rt.compileMu.Lock()
	require.Nil(t, rt.release, "the last compile released wazero")
	rt.compileMu.Unlock()
	_, err = rt.wr.CompileModule(context.Background(), fixture(t, "refusal"))
	require.Error(t, err, "wazero is closed")
	_, err = rt.Load(context.Background(), "late", fixture(t, "refusal"))
	require.ErrorIs(t, err, ErrClosed)
}
