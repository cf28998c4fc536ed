package host

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

var (
	goGuestOnce sync.Once
	goGuest     []byte
	goGuestErr  error
)

// buildGoGuest compiles testdata/goguest (a Go wasip1 reactor written from
// ABI.md) with the go toolchain running the tests; it is not committed.
func buildGoGuest(t testing.TB) []byte {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a Go wasip1 guest")
	}
	goGuestOnce.Do(func() {
		dir, err := os.MkdirTemp("", "goguest")
		if err != nil {
			goGuestErr = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "goguest.wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./testdata/goguest")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if b, err := cmd.CombinedOutput(); err != nil {
			goGuestErr = &exec.ExitError{Stderr: b}
			return
		}
		goGuest, goGuestErr = os.ReadFile(out)
	})
	require.NoError(t, goGuestErr)
	return goGuest
}

// TestGoGuest_Conformance: a standard Go reactor (its WASI imports, its
// _initialize, its ~2 MB and ~3 MiB of memory) loads under the sandbox and
// decides like the WAT condition, on both engines.
func TestGoGuest_Conformance(t *testing.T) {
	wasm := buildGoGuest(t)
	engines(t, func(t *testing.T, opts ...Option) {
		if raceEnabled && len(opts) == 0 {
			t.Skip("compiler engine under the race detector: too slow for a 2 MB guest; run without -race")
		}
		ctx := context.Background()
		rt := newRuntime(t, opts...)
		_, err := rt.Load(ctx, "go", wasm, WithInstances(1))
		require.ErrorIs(t, err, ErrConfigRejected)
		require.ErrorContains(t, err, "fallback model")

		p, err := rt.Load(ctx, "go", wasm, WithInstances(1), WithConfig([]byte("anthropic/claude")))
		require.NoError(t, err)
		for _, tc := range []struct {
			a    abi.Attempt
			want abi.Decision
		}{
			{abi.Attempt{Status: 429}, abi.Decision{Action: abi.ActionRetry, UseRetryAfter: true, MaxAttempts: 3}},
			{abi.Attempt{Status: 503, Message: string(make([]byte, 100_000))}, abi.Decision{Action: abi.ActionSwitch, Model: "anthropic/claude"}},
			{abi.Attempt{Status: 400}, abi.Decision{}},
		} {
			got, err := p.Decide(ctx, &tc.a)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		}
	})
}
