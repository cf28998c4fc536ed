package e2e_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
)

// runtimes are the host's two modes: guarded (the default: per-call
// deadline; generous here, as a loaded CI machine can stall a Go guest's
// first call past the default 50 ms, which would fail open and flake the
// test) and trusted (no guard).
func runtimes(t *testing.T) map[string]*host.Runtime {
	return map[string]*host.Runtime{
		"guarded": plugintest.Runtime(t, host.WithCallTimeout(10*time.Second)),
		"trusted": plugintest.Runtime(t, host.WithTrusted()),
	}
}

// TestBuiltinsThroughHost loads every built plugin in the host with its
// example config, in both modes, and uses it.
func TestBuiltinsThroughHost(t *testing.T) {
	ctx := context.Background()
	for mode, rt := range runtimes(t) {
		for _, p := range plugins.All() {
			t.Run(mode+"/"+p.Name, func(t *testing.T) {
				pl, err := rt.Load(ctx, p.Name, p.Wasm, host.WithConfig([]byte(p.ExampleConfig)))
				require.NoError(t, err)
				defer pl.Close(ctx)
				require.Equal(t, p.Kind == plugins.Condition, pl.IsCondition())
				require.Equal(t, p.Kind == plugins.Transform, pl.IsTransform())
			})
		}
	}
}

// TestRejectedConfigFailsLoad: a plugin's rejection reaches the operator
// at load, with its reason.
func TestRejectedConfigFailsLoad(t *testing.T) {
	ctx := context.Background()
	rt := runtimes(t)["trusted"]
	for _, tc := range []struct {
		wasm   []byte
		config string
		reason string
	}{
		{plugins.ErrMatch, `{"rules":[{"status":["5xx"],"give_up":true}]}`, "status"},
		{plugins.Finish, `{"switch":{"censored":"a/b"}}`, "unknown finish reason"},
		{plugintest.GoRef("refusal"), `{"fail":"maybe"}`, `"fail": must be`},
		{plugins.CStatus, "status=429", "action is required"},
		{plugins.Refusal, "  \n\u3000\n", ""},
	} {
		_, err := rt.Load(ctx, "p", tc.wasm, host.WithConfig([]byte(tc.config)))
		require.ErrorIs(t, err, host.ErrConfigRejected)
		require.ErrorContains(t, err, tc.reason)
	}
}

// nativeRefusal is the driver's native refusal detector.
func nativeRefusal(tb testing.TB) abi.Transformer {
	d, err := driver.NewRefusalDetector()
	require.NoError(tb, err)
	return d
}

// TestRefusalDifferentialThroughHost: through the host, in both modes, the
// Go and C refusal plugins give the native detector's verdicts, outputs
// and errors over generated streams.
func TestRefusalDifferentialThroughHost(t *testing.T) {
	ctx := context.Background()
	native := nativeRefusal(t)
	for mode, rt := range runtimes(t) {
		for name, wasm := range map[string][]byte{"go": plugintest.GoRef("refusal"), "c": plugins.Refusal} {
			t.Run(mode+"/"+name, func(t *testing.T) {
				pl, err := rt.Load(ctx, "refusal", wasm)
				require.NoError(t, err)
				defer pl.Close(ctx)
				rng := rand.New(rand.NewPCG(5, 6))
				for i := 0; i < 200; i++ {
					parts := plugintest.RandomStream(rng)
					want, err := plugintest.Run(ctx, native, abi.StreamInfo{ID: uint64(i)}, parts)
					require.NoError(t, err)
					got, err := plugintest.Run(ctx, pl, abi.StreamInfo{ID: uint64(i)}, parts)
					require.NoError(t, err)
					require.Equal(t, want.Actions, got.Actions, "%q", parts)
					require.Equal(t, want.Out, got.Out)
					require.Equal(t, want.Err, got.Err)
				}
			})
		}
	}
}

// TestConditionsThroughHost: the conditions' decisions cross the host.
func TestConditionsThroughHost(t *testing.T) {
	ctx := context.Background()
	rt := runtimes(t)["guarded"]
	em, err := rt.Load(ctx, "errmatch", plugins.ErrMatch, host.WithConfig([]byte(
		`{"rules":[{"status":[429],"retry":{"delay":"1s","backoff":2,"max_attempts":3,"retry_after":true}}]}`)))
	require.NoError(t, err)
	cs, err := rt.Load(ctx, "c-status", plugins.CStatus, host.WithConfig([]byte(
		"status=429\naction=retry\ndelay_ms=1000\nbackoff=2\nmax_attempts=3\nretry_after=true\n")))
	require.NoError(t, err)
	fin, err := rt.Load(ctx, "finish", plugins.Finish, host.WithConfig([]byte(`{"switch":{"content-filter":"b/m"}}`)))
	require.NoError(t, err)

	a429 := &abi.Attempt{Number: 1, Model: "a/m", Status: 429, Class: abi.ClassRateLimit, RetryAfter: 3 * time.Second}
	want := abi.Decision{Action: abi.ActionRetry, Delay: time.Second, BackoffFactor: 2, MaxAttempts: 3, UseRetryAfter: true}
	for _, c := range []interface {
		Decide(context.Context, *abi.Attempt) (abi.Decision, error)
	}{em, cs} {
		d, err := c.Decide(ctx, a429)
		require.NoError(t, err)
		require.Equal(t, want, d)
	}
	d, err := fin.Decide(ctx, &abi.Attempt{Number: 1, Model: "a/m", Finish: abi.FinishReason{Unified: abi.ReasonContentFilter}})
	require.NoError(t, err)
	require.Equal(t, abi.Decision{Action: abi.ActionSwitch, Model: "b/m"}, d)
}
