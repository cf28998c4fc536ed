package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServe_ShutdownDelay: with --shutdown-delay, a stop (SIGTERM, here
// the context runMain cancels on it) turns /readyz to 503 at once while the
// listener keeps accepting and serving, so that a load balancer probing
// /readyz sees the 503 and stops sending; when the delay ends the usual
// drain begins and serve exits 0. The delay's timer is the test's, so that
// nothing depends on how long the checks take.
func TestServe_ShutdownDelay(t *testing.T) {
	release := make(chan time.Time)
	asked := make(chan time.Duration, 1)
	old := serveDelayTimer
	serveDelayTimer = func(d time.Duration) <-chan time.Time { asked <- d; return release }
	t.Cleanup(func() { serveDelayTimer = old })

	base, stderr, stop := startServe(t, "--shutdown-delay", "1h")
	// A new connection for every request: the listener, not a kept-alive
	// connection, is what must still accept.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string) {
		resp, err := hc.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, _ := get("/readyz")
	require.Equal(t, http.StatusOK, code)

	exited := make(chan int, 1)
	go func() { exited <- stop() }()
	select {
	case d := <-asked:
		require.Equal(t, time.Hour, d, "the delay starts at the stop")
	case c := <-exited:
		t.Fatalf("serve exited (%d) with no shutdown delay: %s", c, stderr)
	}
	code, body := get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, "/readyz says not ready at once")
	require.Equal(t, "draining\n", body)
	code, _ = get("/healthz")
	require.Equal(t, http.StatusOK, code, "alive, only not ready")

	// New connections are still accepted and served, a demo fail-over
	// (through its Wasm refusal plugin) included.
	resp, err := hc.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"alpha","stream":true,"messages":[{"role":"user","content":"What is the capital of France?"}]}`))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.True(t, streamDone(string(b)), string(b))
	select {
	case c := <-exited:
		t.Fatalf("serve exited (%d) during the shutdown delay: %s", c, stderr)
	default:
	}
	require.Contains(t, stderr.String(), "retryhost serve: not ready; serving on for 1h0m0s before the drain")
	require.NotContains(t, stderr.String(), "draining (up to", "the drain waits for the delay")

	close(release)
	require.Equal(t, exitOK, <-exited, stderr.String())
	logs := stderr.String()
	require.Less(t, strings.Index(logs, "not ready; serving on"), strings.Index(logs, "draining (up to"), "the drain follows the delay: %s", logs)
	require.Contains(t, logs, "retryhost serve: stopped")
}

// TestServe_ShutdownDelayFlag: a negative --shutdown-delay is refused
// before the gateway starts (0, the default, is no delay: the listener
// closes at the stop, as before the flag).
func TestServe_ShutdownDelayFlag(t *testing.T) {
	old := serveDelayTimer
	serveDelayTimer = func(time.Duration) <-chan time.Time { t.Error("no delay was asked for"); return nil }
	t.Cleanup(func() { serveDelayTimer = old })
	// The context only ends a gateway that wrongly started.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	require.Equal(t, exitUsage, dispatch(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--shutdown-delay", "-1s"}, io.Discard, &stderr))
	require.Contains(t, stderr.String(), "--shutdown-delay -1s: a delay cannot be negative")

	_, _, stop := startServe(t)
	require.Equal(t, exitOK, stop(), "without the flag the drain starts at once")
}

// During the shutdown delay serve serves on in full: a keys file rotated
// then is read again (the watchers are still acted on), so a load balancer
// draining slowly meets the keys of now, not those of the SIGTERM.
func TestServe_ShutdownDelayKeepsReloading(t *testing.T) {
	release := make(chan time.Time)
	asked := make(chan time.Duration, 1)
	old := serveDelayTimer
	serveDelayTimer = func(d time.Duration) <-chan time.Time { asked <- d; return release }
	t.Cleanup(func() { serveDelayTimer = old })

	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	require.NoError(t, os.WriteFile(keys, []byte("k-old\n"), 0o600))
	t.Setenv("RETRYHOST_API_KEYS", "")
	base, stderr, stop := startServe(t, "--api-keys-file", keys, "--shutdown-delay", "1h")
	code := func(key string) int { return modelsStatus(t, base, key) }
	require.Equal(t, http.StatusOK, code("k-old"))
	exited := make(chan int, 1)
	go func() { exited <- stop() }()
	<-asked // the delay began

	time.Sleep(20 * time.Millisecond) // a distinct modification time
	require.NoError(t, os.WriteFile(keys, []byte("k-new\n"), 0o600))
	require.Eventually(t, func() bool { return code("k-new") == http.StatusOK }, 10*time.Second, 20*time.Millisecond, "%s", stderr)
	require.Equal(t, http.StatusUnauthorized, code("k-old"))
	close(release)
	require.Equal(t, exitOK, <-exited, stderr.String())
}
