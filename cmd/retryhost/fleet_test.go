package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit/redistest"
)

// fleetUpstream is a loopback OpenAI-compatible provider serving two
// model ids: "model-a" (and "model-a2") answers 429 with a Retry-After, "model-b" streams
// an answer. It counts the requests per model id.
type fleetUpstream struct {
	mu   sync.Mutex
	hits map[string]int
}

func (u *fleetUpstream) count(model string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hits[model]
}

var modelField = regexp.MustCompile(`"model"\s*:\s*"([^"]+)"`)

func (u *fleetUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m := modelField.FindSubmatch(body)
	if m == nil {
		http.Error(w, "no model", http.StatusBadRequest)
		return
	}
	model := string(m[1])
	u.mu.Lock()
	u.hits[model]++
	u.mu.Unlock()
	if strings.HasPrefix(model, "model-a") {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"message":"model-a is rate limited","type":"rate_limit_error","param":null,"code":null}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, c := range []string{`{"role":"assistant","content":"hello "}`, `{"content":"from b"}`} {
		fmt.Fprintf(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":%s,"finish_reason":null}]}`+"\n\n", model, c)
	}
	fmt.Fprintf(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n", model)
}

// ask sends one chat request for route "a" and returns the model that
// answered and the attempts it took (the gateway's response headers).
func (b *servedBinary) ask(t *testing.T) (model, attempts string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, b.base()+"/v1/chat/completions",
		strings.NewReader(`{"model": "a", "messages": [{"role": "user", "content": "hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	require.Equalf(t, http.StatusOK, resp.StatusCode, "%s\n%s", body, b.stderr)
	require.Contains(t, string(body), "hello from b")
	return resp.Header.Get("X-Retryhost-Model"), resp.Header.Get("X-Retryhost-Attempts")
}

// TestFleet: three `retryhost serve` processes share their fail-over
// state through one redis-server. Model a is rate limited with a
// Retry-After; the first request, through replica 1, fails over from a to
// b and records a's cooldown in Redis; requests through replicas 2 and 3
// then start on b, with no failed attempt of their own.
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three replicas and a redis-server")
	}
	srv := redistest.Start(t)

	up := &fleetUpstream{hits: map[string]int{}}
	prov := httptest.NewServer(up)
	defer prov.Close()
	pol := filepath.Join(t.TempDir(), "fleet.json")
	require.NoError(t, os.WriteFile(pol, []byte(fmt.Sprintf(`{
	"models": [
		{"name": "a", "provider": "openai", "model": "model-a", "base_url": %[1]q, "api_key_env": "UPSTREAM_KEY"},
		{"name": "b", "provider": "openai", "model": "model-b", "base_url": %[1]q, "api_key_env": "UPSTREAM_KEY"}
	],
	"rules": [{"when": {"status": [429]}, "action": "switch", "model": "b"}],
	"cooldown": {"failures": 3, "for": "1m"},
	"state": {"redis": {"url": %[2]q, "prefix": "fleet:", "op_timeout": "2s"}}
}`, prov.URL+"/v1", srv.URL())), 0o600))

	var reps []*servedBinary
	for range 3 {
		reps = append(reps, startServeBinary(t, "--policy", pol, "--watch=false", "--drain", "2s"))
	}

	model, attempts := reps[0].ask(t)
	require.Equal(t, "b", model)
	require.Equal(t, "2", attempts, "replica 1 tries a, gets the 429 and fails over")
	require.Equal(t, 1, up.count("model-a"))
	ttl, err := srv.Do("PTTL", "{fleet:}c:a")
	require.NoError(t, err)
	require.Regexp(t, `^:[1-9][0-9]*$`, ttl, "a's cooldown is in Redis, with a TTL")

	for i, r := range reps[1:] {
		for range 2 {
			model, attempts := r.ask(t)
			require.Equalf(t, "b", model, "replica %d", i+2)
			require.Equalf(t, "1", attempts, "replica %d starts on b: no failed attempt of its own", i+2)
		}
		m := r.metrics()
		require.Falsef(t, strings.Contains(m, `model="a"`), "replica %d sent nothing to a:\n%s", i+2, m)
		require.Falsef(t, strings.Contains(m, `failovers_total{`), "replica %d failed over:\n%s", i+2, m)
		require.Truef(t, strings.Contains(m, "retryhost_gateway_state_down 0\n"), "replica %d uses the shared state", i+2)
	}
	require.Equal(t, 1, up.count("model-a"), "only replica 1 ever asked model a")
	require.Equal(t, 5, up.count("model-b"))
	require.True(t, strings.Contains(reps[0].metrics(), `retryhost_gateway_attempts_total{class="rate-limit",model="a",outcome="error"} 1`))

	// Redis goes away: the replicas keep answering on their local copies,
	// and say so in their metrics and, once, in their logs.
	srv.Kill()
	for range 3 {
		model, _ := reps[1].ask(t)
		require.Equal(t, "b", model)
	}
	m := reps[1].metrics()
	require.Truef(t, strings.Contains(m, "retryhost_gateway_state_down 1\n"), "%s", m)
	require.Truef(t, strings.Contains(m, "retryhost_gateway_state_outages_total 1\n"), "%s", m)
	require.Equal(t, 1, strings.Count(reps[1].stderr.String(), "shared state unreachable"), reps[1].stderr.String())
	srv.Restart()
	require.Eventually(t, func() bool {
		reps[1].ask(t)
		return strings.Contains(reps[1].metrics(), "retryhost_gateway_state_down 0\n")
	}, 20*time.Second, 50*time.Millisecond, "back on the shared state")
}
