package gateway

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit"
	"github.com/retryhost/retryhost/internal/testkit/redistest"
	"github.com/retryhost/retryhost/policy"
	_ "github.com/retryhost/retryhost/state/redis" // "state": {"redis": …}
)

// A gateway whose policy shares its state on Redis keeps one client across
// reloads of the same server and prefix (no new connection per reload),
// closes the old client once a reload names another prefix, and closes
// the last at Close (goleak, in TestMain, checks no pool goroutine is
// left). Its /metrics carry the state's counters.
func TestReloadKeepsTheRedisClient(t *testing.T) {
	srv := redistest.Start(t)
	up := newUpstream("one")
	defer up.srv.Close()
	file := filepath.Join(t.TempDir(), "policy.json")
	write := func(prefix string) {
		require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, `{
	"models": [{"name": "m", "provider": "openai", "model": "m", "base_url": %q, "api_key_env": "K"}],
	"cooldown": {"failures": 2, "for": "1m"},
	"state": {"redis": {"url": %q, "prefix": %q, "op_timeout": "2s"}}}`, up.url(), srv.URL(), prefix), 0o600))
	}
	clients := func() []string {
		ids, err := srv.Clients()
		require.NoError(t, err)
		return ids
	}
	write("gw:")
	gw, err := New(context.Background(), File(file, policy.Options{Getenv: func(string) string { return "k" }}))
	require.NoError(t, err)
	r := &rig{t: t, gw: gw, up: map[string]*upstream{"one": up}, logs: &testkit.LogBuffer{}}
	r.srv = newTestServer(t, gw)
	r.hc = &http.Client{Transport: &http.Transport{}}
	defer r.hc.CloseIdleConnections()
	r.client = r.newClient("")

	require.NoError(t, r.stream("m").err)
	first := clients()
	require.Len(t, first, 1)
	for range 3 {
		require.NoError(t, gw.Reload(context.Background()))
		require.NoError(t, r.stream("m").err)
	}
	require.Equal(t, first, clients(), "the reloads reuse the client and its connection")

	write("gw2:")
	require.NoError(t, gw.Reload(context.Background()))
	require.NoError(t, r.stream("m").err)
	require.Eventually(t, func() bool {
		ids := clients()
		return len(ids) == 1 && ids[0] != first[0]
	}, 5*time.Second, 10*time.Millisecond, "the old prefix's client is closed with the old policy")

	body := r.metricsText()
	require.Contains(t, body, "retryhost_gateway_state_down 0\n")
	require.Contains(t, body, "retryhost_gateway_state_outages_total 0\n")

	require.NoError(t, gw.Close(context.Background()))
	require.Eventually(t, func() bool { return len(clients()) == 0 }, 5*time.Second, 10*time.Millisecond)
}
