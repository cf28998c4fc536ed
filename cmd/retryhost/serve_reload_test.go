package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// slowReloads makes every policy reload of serve wait in hold (the
// stand-in for a slow plugin compile) until the returned release is
// called; each reload's context is sent on the returned channel as the
// reload starts. hold nil: the reload waits for release only, deaf to its
// context (a loader that does not watch it).
func slowReloads(t *testing.T, hold func(ctx context.Context, release <-chan struct{})) (<-chan context.Context, func()) {
	t.Helper()
	started := make(chan context.Context, 16)
	release := make(chan struct{})
	serveReloadHook = func(ctx context.Context) error {
		started <- ctx
		if hold != nil {
			hold(ctx, release)
		} else {
			<-release
		}
		return nil
	}
	released := false
	free := func() {
		if !released {
			released = true
			close(release)
		}
	}
	t.Cleanup(func() {
		free()
		serveReloadHook = nil
	})
	return started, free
}

// servePolicyFile writes a policy whose routes are names, over the demo's
// answering upstream, and returns its path.
func servePolicyFile(t *testing.T, file, up string, names ...string) {
	t.Helper()
	var ms []string
	for _, n := range names {
		ms = append(ms, `{"name": "`+n+`", "provider": "openai", "model": "llama", "base_url": "`+up+`", "api_key_env": "UPSTREAM_KEY"}`)
	}
	require.NoError(t, os.WriteFile(file, []byte(`{"models": [`+strings.Join(ms, ",")+`]}`), 0o600))
}

// SIGHUP reloads the policy and the keys: a key taken out of the keys file
// is refused at once, while the policy's reload is still compiling.
func TestServe_KeyRevokedWhileAReloadCompiles(t *testing.T) {
	started, release := slowReloads(t, nil)
	dir := t.TempDir()
	keys, pol := filepath.Join(dir, "keys"), filepath.Join(dir, "policy.json")
	require.NoError(t, os.WriteFile(keys, []byte("k-keep\nk-revoked\n"), 0o600))
	t.Setenv("RETRYHOST_API_KEYS", "")
	t.Setenv("UPSTREAM_KEY", "sk-upstream")
	up := startDemoUpstreamForTest(t)
	servePolicyFile(t, pol, up, "one")
	// The test process must not die of the SIGHUP should serve not catch it.
	guard := make(chan os.Signal, 1)
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)
	base, stderr, stop := startServe(t, "--policy", pol, "--api-keys-file", keys, "--watch=false")
	require.Equal(t, http.StatusOK, modelsStatus(t, base, "k-revoked"))

	servePolicyFile(t, pol, up, "one", "two")
	require.NoError(t, os.WriteFile(keys, []byte("k-keep\n"), 0o600))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	<-started // the policy's reload is compiling, and stays so
	require.Eventually(t, func() bool { return modelsStatus(t, base, "k-revoked") == http.StatusUnauthorized },
		10*time.Second, 10*time.Millisecond, "%s", stderr)
	require.Equal(t, http.StatusOK, modelsStatus(t, base, "k-keep"))

	release()
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), `"policy reloaded"`) },
		10*time.Second, 10*time.Millisecond, "%s", stderr)
	require.Equal(t, exitOK, stop())
}

// A stop (SIGTERM, SIGINT, or here the context that stands for them)
// during a reload that does not end drains and exits without waiting for
// it; the reload is told by its context.
func TestServe_StopsDuringASlowReload(t *testing.T) {
	started, _ := slowReloads(t, func(ctx context.Context, release <-chan struct{}) {
		select {
		case <-ctx.Done():
		case <-release:
		}
	})
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.json")
	t.Setenv("UPSTREAM_KEY", "sk-upstream")
	up := startDemoUpstreamForTest(t)
	servePolicyFile(t, pol, up, "one")
	_, stderr, stop := startServe(t, "--policy", pol)
	time.Sleep(20 * time.Millisecond) // a distinct modification time
	servePolicyFile(t, pol, up, "one", "two")
	ctx := <-started
	require.Equal(t, exitOK, stop(), "%s", stderr)
	<-ctx.Done()
	require.ErrorIs(t, context.Cause(ctx), errReloadStop)
}

// A stop during a reload whose loader does not watch its context exits
// all the same: serve never waits for a compile.
func TestServe_StopsDuringAReloadDeafToItsContext(t *testing.T) {
	started, release := slowReloads(t, nil)
	defer release()
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.json")
	t.Setenv("UPSTREAM_KEY", "sk-upstream")
	up := startDemoUpstreamForTest(t)
	servePolicyFile(t, pol, up, "one")
	_, stderr, stop := startServe(t, "--policy", pol)
	time.Sleep(20 * time.Millisecond)
	servePolicyFile(t, pol, up, "one", "two")
	<-started
	require.Equal(t, exitOK, stop(), "%s", stderr)
}

// A reload past --reload-budget is abandoned: logged, counted on
// /metrics, and the old policy serves on. The next reload, in budget,
// takes effect.
func TestServe_ReloadPastItsBudget(t *testing.T) {
	slow := make(chan bool, 4)
	slow <- true
	started, _ := slowReloads(t, func(ctx context.Context, release <-chan struct{}) {
		if <-slow {
			<-ctx.Done()
		}
	})
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.json")
	t.Setenv("UPSTREAM_KEY", "sk-upstream")
	t.Setenv("RETRYHOST_API_KEYS", "")
	up := startDemoUpstreamForTest(t)
	servePolicyFile(t, pol, up, "one")
	base, stderr, stop := startServe(t, "--policy", pol, "--reload-budget", "50ms")
	time.Sleep(20 * time.Millisecond)
	servePolicyFile(t, pol, up, "one", "two")
	ctx := <-started
	<-ctx.Done()
	require.ErrorIs(t, context.Cause(ctx), errReloadBudget)
	require.Eventually(t, func() bool {
		return strings.Contains(metricsAt(t, base), "retryhost_gateway_reloads_abandoned_total 1\n")
	}, 10*time.Second, 10*time.Millisecond, "%s", stderr)
	require.Contains(t, stderr.String(), "past --reload-budget")
	body := modelsBody(t, base)
	require.Contains(t, body, `"id":"one"`)
	require.NotContains(t, body, `"id":"two"`)

	slow <- false
	time.Sleep(20 * time.Millisecond)
	servePolicyFile(t, pol, up, "one", "three")
	require.Eventually(t, func() bool { return strings.Contains(modelsBody(t, base), `"id":"three"`) },
		10*time.Second, 10*time.Millisecond, "%s", stderr)
	require.Equal(t, exitOK, stop())
}

// A reload asked for while one is compiling supersedes it: the one in
// progress is cancelled and the newer one takes effect.
func TestServe_NewerReloadSupersedes(t *testing.T) {
	slow := make(chan bool, 4)
	slow <- true
	started, _ := slowReloads(t, func(ctx context.Context, release <-chan struct{}) {
		if <-slow {
			<-ctx.Done()
		}
	})
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.json")
	t.Setenv("UPSTREAM_KEY", "sk-upstream")
	t.Setenv("RETRYHOST_API_KEYS", "")
	up := startDemoUpstreamForTest(t)
	servePolicyFile(t, pol, up, "one")
	base, stderr, stop := startServe(t, "--policy", pol)
	time.Sleep(20 * time.Millisecond)
	servePolicyFile(t, pol, up, "one", "two")
	first := <-started
	slow <- false
	time.Sleep(20 * time.Millisecond)
	servePolicyFile(t, pol, up, "one", "three")
	<-first.Done()
	require.ErrorIs(t, context.Cause(first), errReloadNewer)
	require.Eventually(t, func() bool { return strings.Contains(modelsBody(t, base), `"id":"three"`) },
		10*time.Second, 10*time.Millisecond, "%s", stderr)
	require.Equal(t, exitOK, stop())
}

// modelsBody is the body of GET /v1/models, with no key.
func modelsBody(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/v1/models")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
