package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit/redistest"
)

// fleetPolicy writes the fleet test's policy with its state on url.
func fleetPolicy(t *testing.T, upstream, url string) string {
	t.Helper()
	pol := filepath.Join(t.TempDir(), "fleet.json")
	require.NoError(t, os.WriteFile(pol, []byte(fmt.Sprintf(`{
	"models": [
		{"name": "a", "provider": "openai", "model": "model-a", "base_url": %[1]q, "api_key_env": "UPSTREAM_KEY"},
		{"name": "b", "provider": "openai", "model": "model-b", "base_url": %[1]q, "api_key_env": "UPSTREAM_KEY"},
		{"name": "a2", "provider": "openai", "model": "model-a2", "base_url": %[1]q, "api_key_env": "UPSTREAM_KEY"}
	],
	"rules": [{"when": {"status": [429]}, "action": "switch", "model": "b"}],
	"cooldown": {"failures": 3, "for": "1m"},
	"retry_budget": {},
	"state": {"redis": {"url": %[2]q, "prefix": "fleet:", "op_timeout": "2s"}}
}`, upstream+"/v1", url)), 0o600))
	return pol
}

// try sends one chat request for route "a" and reports what went wrong,
// if anything (for a load generator, which must not stop the test from
// another goroutine).
func (b *servedBinary) try() error {
	_, _, err := b.askRoute("a")
	return err
}

// askRoute sends one chat request for route and returns the model that
// answered and the attempts it took.
func (b *servedBinary) askRoute(route string) (model, attempts string, err error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, b.base()+"/v1/chat/completions",
		strings.NewReader(`{"model": "`+route+`", "messages": [{"role": "user", "content": "hi"}]}`))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "hello from b") {
		return "", "", fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	return resp.Header.Get("X-Retryhost-Model"), resp.Header.Get("X-Retryhost-Attempts"), nil
}

// TestFleetSentinelFailover: two `retryhost serve` replicas share their
// state through a Sentinel-watched primary, under steady load. The primary
// is killed: no client request fails (the replicas answer from their local
// copies meanwhile), the Sentinels promote the replica, both replicas
// reconnect to it by themselves, and a cooldown one replica records is
// seen by the other again. The test logs how long after the promotion the
// shared state was back.
func TestFleetSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs two replicas, two redis-servers and three sentinels")
	}
	topo := redistest.StartSentinel(t)
	up := &fleetUpstream{hits: map[string]int{}}
	prov := httptest.NewServer(up)
	defer prov.Close()
	pol := fleetPolicy(t, prov.URL, topo.URL())
	reps := []*servedBinary{
		startServeBinary(t, "--policy", pol, "--watch=false", "--drain", "2s"),
		startServeBinary(t, "--policy", pol, "--watch=false", "--drain", "2s"),
	}
	model, attempts := reps[0].ask(t)
	require.Equal(t, "b", model)
	require.Equal(t, "2", attempts)
	model, attempts = reps[1].ask(t)
	require.Equal(t, "b", model)
	require.Equal(t, "1", attempts, "replica 2 sees a's cooldown through the primary")

	// Steady load on both replicas through the failover.
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				if err := reps[i%2].try(); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	defer halt()
	time.Sleep(200 * time.Millisecond)

	topo.Primary.Kill()
	killed := time.Now()
	topo.WaitPromoted(t)
	promoted := time.Now()
	require.Eventually(t, func() bool {
		for _, r := range reps {
			m := r.metrics()
			if !strings.Contains(m, "retryhost_gateway_state_down 0\n") || strings.Contains(m, "retryhost_gateway_state_outages_total 0\n") {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "both replicas saw the outage and are back on the shared state")
	back := time.Now()

	// A cooldown recorded now through one replica is seen by the other:
	// a2, rate limited too, never asked before.
	model, attempts, err := reps[0].askRoute("a2")
	require.NoError(t, err)
	require.Equal(t, "b", model)
	require.Equal(t, "2", attempts, "replica 1 tries a2, gets the 429 and fails over")
	for range 3 {
		model, attempts, err = reps[1].askRoute("a2")
		require.NoError(t, err)
		require.Equal(t, "b", model)
		require.Equal(t, "1", attempts, "replica 2 sees a2's cooldown on the promoted primary")
	}
	require.Equal(t, 1, up.count("model-a2"))
	halt()
	require.Zerof(t, failed.Load(), "of %d requests under load, %d failed; first: %v", sent.Load(), failed.Load(), firstErr.Load())
	t.Logf("%d requests under load, 0 failed; promoted %v after the kill; shared state back %v after the promotion",
		sent.Load(), promoted.Sub(killed).Round(time.Millisecond), back.Sub(promoted).Round(time.Millisecond))
}

// TestFleetCluster: the fleet test on a three-master Redis Cluster: a's
// cooldown recorded through one replica holds for the other, the
// Retry-After's scope and the retry budget are written to the cluster, and no
// operation fails there (no CROSSSLOT: no outage).
func TestFleetCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs two replicas and a three-node cluster")
	}
	c := redistest.StartCluster(t)
	up := &fleetUpstream{hits: map[string]int{}}
	prov := httptest.NewServer(up)
	defer prov.Close()
	pol := fleetPolicy(t, prov.URL, c.URL())
	reps := []*servedBinary{
		startServeBinary(t, "--policy", pol, "--watch=false", "--drain", "2s"),
		startServeBinary(t, "--policy", pol, "--watch=false", "--drain", "2s"),
	}
	model, attempts := reps[0].ask(t)
	require.Equal(t, "b", model)
	require.Equal(t, "2", attempts, "replica 1 tries a, gets the 429 and fails over")
	for range 3 {
		model, attempts = reps[1].ask(t)
		require.Equal(t, "b", model)
		require.Equal(t, "1", attempts, "replica 2 starts on b")
	}
	require.Equal(t, 1, up.count("model-a"))

	var keys []string
	for _, n := range c.Nodes {
		k, err := n.Query("KEYS", "*")
		require.NoError(t, err)
		keys = append(keys, k...)
	}
	joined := strings.Join(keys, " ")
	for _, want := range []string{"{fleet:}c:a", "{fleet:}h:a", "{fleet:}s:", "{fleet:}b:"} {
		require.Containsf(t, joined, want, "cooldown, sticky Retry-After scope and retry budget on the cluster: %q", keys)
	}
	for i, r := range reps {
		m := r.metrics()
		require.Truef(t, strings.Contains(m, "retryhost_gateway_state_outages_total 0\n"), "replica %d: no operation failed on the cluster:\n%s", i+1, m)
		require.Truef(t, strings.Contains(m, "retryhost_gateway_state_down 0\n"), "replica %d", i+1)
	}
}
