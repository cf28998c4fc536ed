package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit"
	"github.com/retryhost/retryhost/policy"
)

// loadStep is what one load of a gatedSource does: wait in gate (the
// stand-in for a slow plugin compile; nil: none), then build a policy
// whose routes are the comma-separated names.
type loadStep struct {
	routes string
	gate   func(ctx context.Context) error
}

// gatedSource is a Source whose loads take their steps from a channel, in
// order; started gets one send per load, as it starts.
type gatedSource struct {
	steps   chan loadStep
	started chan struct{}
}

func newGatedSource() *gatedSource {
	return &gatedSource{steps: make(chan loadStep, 8), started: make(chan struct{}, 8)}
}

func (s *gatedSource) source() Source {
	return Source{name: "gated.json", load: func(ctx context.Context, o policy.Options) (*policy.Policy, error) {
		s.started <- struct{}{}
		st := <-s.steps
		if st.gate != nil {
			if err := st.gate(ctx); err != nil {
				return nil, err
			}
		}
		var ms []string
		for _, n := range strings.Split(st.routes, ",") {
			ms = append(ms, `{"name": "`+n+`", "provider": "openai", "model": "m", "base_url": "http://127.0.0.1:1/v1", "api_key_env": "K"}`)
		}
		o.Name = "gated.json"
		o.Getenv = func(string) string { return "k" }
		return policy.Parse(ctx, []byte(`{"models": [`+strings.Join(ms, ",")+`]}`), o)
	}}
}

// untilDone is a gate that holds a load until its context ends.
func untilDone(ctx context.Context) error { <-ctx.Done(); return context.Cause(ctx) }

// routesServed is the body of GET /v1/models.
func routesServed(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/v1/models")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// A reload whose context ends while its policy is still loading is
// abandoned: counted, logged, and the old policy serves on.
func TestReloadPastItsContextIsAbandoned(t *testing.T) {
	gs := newGatedSource()
	gs.steps <- loadStep{routes: "old"}
	logs := &testkit.LogBuffer{}
	gw, err := New(context.Background(), gs.source(), WithLogger(newJSONLogger(logs)))
	require.NoError(t, err)
	defer gw.Close(context.Background())
	srv := newTestServer(t, gw)

	gs.steps <- loadStep{routes: "new", gate: untilDone}
	ctx, cancel := context.WithTimeoutCause(context.Background(), 20*time.Millisecond, errors.New("budget passed"))
	defer cancel()
	err = gw.Reload(ctx)
	require.ErrorIs(t, err, ErrReloadAbandoned)
	require.ErrorContains(t, err, "budget passed")
	require.Contains(t, routesServed(t, srv.URL), `"id":"old"`)
	require.Contains(t, logs.String(), "policy reload abandoned")
	m := metricsAt(t, srv.URL)
	require.Contains(t, m, "retryhost_gateway_reloads_abandoned_total 1\n")
	require.Contains(t, m, "retryhost_gateway_reload_failures_total 0\n")
	require.Contains(t, m, "retryhost_gateway_reloads_total 0\n")
}

// A loader that does not watch its context and builds the policy after the
// context ended does not put it in place: the reload is abandoned all the
// same, and the late policy is closed.
func TestReloadBuiltTooLateIsAbandoned(t *testing.T) {
	gs := newGatedSource()
	gs.steps <- loadStep{routes: "old"}
	gw, err := New(context.Background(), gs.source())
	require.NoError(t, err)
	defer gw.Close(context.Background())
	srv := newTestServer(t, gw)

	release := make(chan struct{})
	gs.steps <- loadStep{routes: "new", gate: func(context.Context) error { <-release; return nil }} // deaf to ctx
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Reload(ctx) }()
	<-gs.started
	<-gs.started
	cancel()
	close(release)
	require.ErrorIs(t, <-done, ErrReloadAbandoned)
	require.Contains(t, routesServed(t, srv.URL), `"id":"old"`)
}

// Close, SetAPIKeys and a newer Reload do not wait for a reload that is
// still loading; of two overlapping reloads the newer one wins, and the
// older one, finishing after it, is abandoned.
func TestReloadLoadingBlocksNothing(t *testing.T) {
	gs := newGatedSource()
	gs.steps <- loadStep{routes: "first"}
	gw, err := New(context.Background(), gs.source())
	require.NoError(t, err)
	srv := newTestServer(t, gw)
	<-gs.started
	get := func() (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer k2")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	slow := make(chan struct{})
	gs.steps <- loadStep{routes: "older", gate: func(ctx context.Context) error {
		select {
		case <-slow:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}}
	older := make(chan error, 1)
	go func() { older <- gw.Reload(context.Background()) }()
	<-gs.started // the older reload is loading

	require.NoError(t, gw.SetAPIKeys("k2"))
	code, _ := get()
	require.Equal(t, http.StatusOK, code)

	gs.steps <- loadStep{routes: "newer"}
	require.NoError(t, gw.Reload(context.Background()))
	<-gs.started
	close(slow)
	require.ErrorIs(t, <-older, ErrReloadAbandoned)
	_, body := get()
	require.Contains(t, body, `"id":"newer"`)

	// Close while a reload is loading returns without it; the reload,
	// told by its context, ends.
	gs.steps <- loadStep{routes: "never", gate: untilDone}
	rctx, rcancel := context.WithCancel(context.Background())
	last := make(chan error, 1)
	go func() { last <- gw.Reload(rctx) }()
	<-gs.started
	require.NoError(t, gw.Close(context.Background()))
	rcancel()
	require.Error(t, <-last)
}

// metricsAt returns the /metrics page of the gateway at base.
func metricsAt(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
