package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/policy"
)

// A policy whose rules retry any error still never resends a 400 to the
// model that rejected it: each upstream sees the request exactly once, the
// rules may fail it over, and when every model rejects it the client gets
// the 400 as the last upstream sent it.
func TestBadRequestNeverResentByAnAnyRetryRule(t *testing.T) {
	r := newRig(t, `"rules": [
		{"when": {"any": true}, "action": "retry", "attempts": 3},
		{"when": {"any": true}, "action": "switch", "model": "backup"},
		{"when": {"any": true}, "action": "switch", "model": "third"}
	]`)
	const body = `{"error":{"message":"Invalid value for 'temperature'.","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`
	for _, stream := range []bool{true, false} {
		for _, u := range r.up {
			u.reset()
			u.play(act{status: 400, body: body})
		}
		var err error
		if stream {
			err = r.stream("primary").err
		} else {
			_, err = r.client.Chat.Completions.New(context.Background(), params("primary"))
		}
		var apiErr *oai.Error
		require.True(t, errors.As(err, &apiErr), "stream=%v: %v", stream, err)
		require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
		require.Equal(t, "invalid_value", apiErr.Code)
		for name, u := range r.up {
			require.Equal(t, 1, len(u.requests()), "stream=%v: %s saw the 400 request more than once", stream, name)
		}
	}
	// A fail-over after a 400 is still the policy's to make.
	for _, u := range r.up {
		u.reset()
	}
	r.up["primary"].play(act{status: 400, body: body})
	r.up["backup"].play(act{chunks: []string{"from backup"}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "from backup", got.text)
	require.Len(t, r.up["primary"].requests(), 1)
	require.Len(t, r.up["backup"].requests(), 1)
	require.Empty(t, r.up["third"].requests())
	r.healthy()
}

// A policy that sets no backoff still never bursts on a rate limit without
// Retry-After: the gateway's default backoff spaces the retries on one
// model (at most 2 attempts in any 1.5 s, 4 in any 3 s, counted on the
// upstream's own clock), the rule's attempts bound them, and the switch
// that follows does not wait.
func TestDefaultBackoffNeverBursts(t *testing.T) {
	t.Parallel()
	r := newRig(t, `"rules": [
		{"when": {"status": [429]}, "action": "retry", "attempts": 4},
		{"when": {"status": [429]}, "action": "switch", "model": "backup"}
	]`)
	r.up["primary"].play(act{status: 429})
	r.up["backup"].play(act{chunks: []string{"from backup"}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "from backup", got.text)
	hits := r.up["primary"].requests()
	require.Len(t, hits, 4, "the rule's 4 attempts on the rate-limited model")
	require.LessOrEqual(t, maxInWindow(hits, 1500*time.Millisecond), 2, "a burst: %v", gaps(hits))
	require.LessOrEqual(t, maxInWindow(hits, 3*time.Second), 4)
	require.Len(t, r.up["backup"].requests(), 1)
	r.healthy()
}

// A policy that fails over but sets no cooldown gets the gateway's
// default: after 5 consecutive failures the dead primary is skipped, and
// the requests that follow go straight to the backup.
func TestDefaultCooldownSkipsADeadPrimary(t *testing.T) {
	r := newRig(t, `"rules": [{"when": {"status_range": [500, 599]}, "action": "switch", "model": "backup"}]`)
	r.up["primary"].play(act{status: 503})
	r.up["backup"].play(act{chunks: []string{"backup"}})
	for i := range 9 {
		got := r.stream("primary")
		require.NoError(t, got.err, "request %d", i)
		require.Equal(t, map[string]bool{"backup": true}, got.models, "request %d", i)
	}
	require.Len(t, r.up["primary"].requests(), 5, "after 5 failures the dead primary is skipped")
	require.Len(t, r.up["backup"].requests(), 9)
}

// gaps lists the time between consecutive hits, for a failure message.
func gaps(hits []hit) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(hits); i++ {
		out = append(out, hits[i].at.Sub(hits[i-1].at).Round(time.Millisecond))
	}
	return out
}

// WithMetrics serves the caller's collectors on /metrics beside the
// gateway's own; one that clashes with them fails New.
func TestWithMetrics(t *testing.T) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "caller_things_total", Help: "Things."})
	c.Add(3)
	r := newRig(t, `"rules": []`, WithMetrics(c))
	resp, err := r.hc.Get(r.srv.URL + "/metrics")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(b), "\ncaller_things_total 3\n")
	require.Contains(t, string(b), "retryhost_gateway_inflight_requests")

	clash := prometheus.NewGauge(prometheus.GaugeOpts{Name: "retryhost_gateway_inflight_requests", Help: "x"})
	_, err = New(context.Background(), Bytes("p.json", []byte(`{"models": [{"name": "m", "provider": "openai", "model": "x", "base_url": "http://127.0.0.1:1/v1", "api_key_env": "K"}]}`),
		policy.Options{Getenv: func(string) string { return "k" }}), WithMetrics(clash))
	require.ErrorContains(t, err, "WithMetrics")
	_, err = New(context.Background(), Bytes("p.json", nil, policy.Options{}), WithMetrics(nil))
	require.ErrorContains(t, err, "nil")
}
