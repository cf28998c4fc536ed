package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/policy"
)

// newTrackedUpstream is newUpstream on a listener that counts its open
// connections.
func newTrackedUpstream(name string, script ...act) (*upstream, *trackingListener) {
	u := &upstream{name: name, script: script}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	ln := &trackingListener{Listener: u.srv.Listener}
	u.srv.Listener = ln
	u.srv.Start()
	return u, ln
}

// Close releases the upstream connections (regression: the SSE filter
// wrapping the gateway's transport hid its CloseIdleConnections, so Close
// left every pooled upstream connection open).
func TestCloseReleasesUpstreamConnections(t *testing.T) {
	up, ln := newTrackedUpstream("one")
	defer up.srv.Close()
	pol := `{"models": [{"name": "one", "provider": "openai", "model": "m", "base_url": "` + up.url() + `", "api_key_env": "K"}]}`
	gw, err := New(context.Background(), Bytes("p.json", []byte(pol), policy.Options{Getenv: func(string) string { return "k" }}))
	require.NoError(t, err)
	srv := httptest.NewServer(gw)
	defer srv.Close()
	r := &rig{t: t, gw: gw, srv: srv, up: map[string]*upstream{"one": up}, hc: &http.Client{Transport: &http.Transport{}}}
	defer r.hc.CloseIdleConnections()
	r.client = r.newClient("")
	got := r.stream("one")
	require.NoError(t, got.err)
	require.Equal(t, "ok", got.text)
	require.EqualValues(t, 1, ln.open.Load(), "the upstream connection is pooled")

	require.NoError(t, gw.Close(context.Background()))
	require.Eventually(t, func() bool { return ln.open.Load() == 0 }, 5*time.Second, time.Millisecond,
		"Close left %d upstream connections open", ln.open.Load())
}
