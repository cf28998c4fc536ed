package gateway

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit"
	"github.com/retryhost/retryhost/policy"
)

// Reload swaps the policy atomically: a stream in flight finishes on the
// policy it started with, new requests get the new one, and a policy that
// does not load is rejected with the old one kept.
func TestReload(t *testing.T) {
	up := newUpstream("one")
	defer up.srv.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.json")
	write := func(names ...string) {
		var ms []string
		for _, n := range names {
			ms = append(ms, fmt.Sprintf(`{"name": %q, "provider": "openai", "model": "m-%s", "base_url": %q, "api_key_env": "K"}`, n, n, up.url()))
		}
		require.NoError(t, os.WriteFile(file, []byte(`{"models": [`+strings.Join(ms, ",")+`]}`), 0o600))
	}
	write("old")
	logs := &testkit.LogBuffer{}
	gw, err := New(context.Background(), File(file, policy.Options{Getenv: func(string) string { return "k" }}), WithLogger(newJSONLogger(logs)))
	require.NoError(t, err)
	r := &rig{t: t, gw: gw, up: map[string]*upstream{"one": up}, logs: logs}
	r.srv = newTestServer(t, gw)
	r.hc = &http.Client{Transport: &http.Transport{}}
	defer r.hc.CloseIdleConnections()
	r.client = r.newClient("")

	hold := make(chan struct{})
	up.play(act{chunks: []string{"from", " old"}, gap: time.Millisecond, afterText: hold}, act{chunks: []string{"new"}})
	done := make(chan streamed, 1)
	go func() { done <- r.stream("old") }()
	require.Eventually(t, func() bool { return len(up.requests()) == 1 }, 5*time.Second, time.Millisecond)

	write("new")
	require.NoError(t, gw.Reload(context.Background()))
	got := r.stream("new")
	require.NoError(t, got.err)
	require.Equal(t, map[string]bool{"new": true}, got.models)
	resp, body := r.rawStream(streamBody("old"))
	require.Equal(t, http.StatusNotFound, resp.StatusCode, body)

	close(hold)
	old := <-done
	require.NoError(t, old.err, "the stream in flight finished on its own policy")
	require.Equal(t, "from old", old.text)
	require.Equal(t, map[string]bool{"old": true}, old.models)

	require.NoError(t, os.WriteFile(file, []byte(`{"models": [{"name": "broken"`), 0o600))
	require.Error(t, gw.Reload(context.Background()))
	require.Contains(t, logs.String(), "policy reload rejected")
	got = r.stream("new")
	require.NoError(t, got.err, "the old policy stays")

	require.NoError(t, gw.Close(context.Background()))
	require.ErrorIs(t, gw.Reload(context.Background()), ErrShuttingDown)
}
