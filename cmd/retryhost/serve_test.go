package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
)

var listening = regexp.MustCompile(`listening on (http://\S+)`)

// startServe runs `retryhost serve args...` until the returned stop is
// called; it returns the base URL and the exit code channel.
func startServe(t *testing.T, args ...string) (string, *testkit.LogBuffer, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stderr testkit.LogBuffer
	code := make(chan int, 1)
	go func() {
		code <- dispatch(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), io.Discard, &stderr)
	}()
	var base string
	require.Eventually(t, func() bool {
		if m := listening.FindStringSubmatch(stderr.String()); m != nil {
			base = m[1]
			return true
		}
		select {
		case c := <-code:
			t.Fatalf("serve exited with %d: %s", c, stderr.String())
		default:
		}
		return false
	}, 30*time.Second, 5*time.Millisecond)
	stopped := false
	stop := func() int {
		if stopped {
			return -1
		}
		stopped = true
		cancel()
		return <-code
	}
	t.Cleanup(func() { stop() })
	return base, &stderr, stop
}

// modelsStatus is the status of GET /v1/models with key as the bearer.
func modelsStatus(t *testing.T, base, key string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// With no policy, serve runs the demo: a request for alpha (which refuses)
// is answered by gamma after beta's rate limits, on a fresh clone with no key.
func TestServe_DemoFailsOverOnTheWire(t *testing.T) {
	base, stderr, stop := startServe(t)
	resp, body := post(t, base+"/v1/chat/completions",
		`{"model":"alpha","stream":true,"messages":[{"role":"user","content":"What is the capital of France?"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "gamma", resp.Header.Get("X-Retryhost-Model"))
	require.Contains(t, body, `"model":"gamma"`)
	require.NotContains(t, body, "sorry", "the refusal never reaches the client")
	require.True(t, streamDone(body), body)

	// The requests after the first, while beta cools down after its 429s,
	// are served by gamma too, streamed or not (beta is skipped, not
	// waited on: a rule that would switch to it gives way to the next).
	for i, stream := range []bool{true, false, true} {
		resp, body := post(t, base+"/v1/chat/completions",
			fmt.Sprintf(`{"model":"alpha","stream":%t,"messages":[{"role":"user","content":"What is the capital of France?"}]}`, stream))
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i+2, body)
		require.Equal(t, "gamma", resp.Header.Get("X-Retryhost-Model"))
		require.NotContains(t, body, "sorry")
	}

	resp, body = post(t, base+"/v1/chat/completions", `{"model":"gamma","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var cc struct {
		Model   string
		Choices []struct{ Message struct{ Content string } }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &cc))
	require.Equal(t, "gamma", cc.Model)
	require.Equal(t, "The capital of France is Paris, on the Seine.", cc.Choices[0].Message.Content)

	require.Equal(t, exitOK, stop())
	// Every log line is JSON; the access log is one record per request
	// (beta's cooldown, the gateway's default, is logged as well).
	var logs []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(l, "{") {
			require.NotContains(t, l, "capital", "no prompt or output text in the logs")
			require.NotContains(t, l, "Paris", "no prompt or output text in the logs")
			if strings.Contains(l, `"msg":"request"`) {
				logs = append(logs, l)
			}
		}
	}
	require.Len(t, logs, 5, "one JSON access log record per request")
	for _, l := range logs {
		require.NotContains(t, l, "capital", "no prompt or output text in the logs")
		require.NotContains(t, l, "Paris", "no prompt or output text in the logs")
	}
}

func TestServe_APIKeysAndReload(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	require.NoError(t, os.WriteFile(keys, []byte("# clients\nk-file\n"), 0o600))
	t.Setenv("RETRYHOST_API_KEYS", "k-env")
	t.Setenv("UPSTREAM_KEY", "sk-upstream")
	up := startDemoUpstreamForTest(t)
	pol := filepath.Join(dir, "policy.json")
	write := func(models ...string) {
		var ms []string
		for _, m := range models {
			ms = append(ms, `{"name": "`+m+`", "provider": "openai", "model": "llama-`+m+`", "base_url": "`+up+`", "api_key_env": "UPSTREAM_KEY"}`)
		}
		require.NoError(t, os.WriteFile(pol, []byte(`{"models": [`+strings.Join(ms, ",")+`]}`), 0o600))
	}
	write("one")
	base, stderr, stop := startServe(t, "--policy", pol, "--api-keys-file", keys)
	get := func(key string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/models", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, _ := get("")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get("k-env")
	require.Equal(t, http.StatusOK, code)
	code, body := get("k-file")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"id":"one"`)

	// The file changes: the new routes are served.
	time.Sleep(20 * time.Millisecond) // a distinct modification time
	write("one", "two")
	require.Eventually(t, func() bool { _, b := get("k-env"); return strings.Contains(b, `"id":"two"`) },
		10*time.Second, 20*time.Millisecond, "%s", stderr)
	// A broken policy is rejected; the old one stays.
	require.NoError(t, os.WriteFile(pol, []byte(`{"models": [`), 0o600))
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "policy reload rejected") },
		10*time.Second, 20*time.Millisecond)
	_, body = get("k-env")
	require.Contains(t, body, `"id":"two"`)
	require.Equal(t, exitOK, stop())
}

func TestServe_BadInput(t *testing.T) {
	var stderr bytes.Buffer
	require.Equal(t, exitInput, dispatch(context.Background(), []string{"serve", "--policy", "/nonexistent.json"}, io.Discard, &stderr))
	require.Contains(t, stderr.String(), "nonexistent")
	stderr.Reset()
	require.Equal(t, exitUsage, dispatch(context.Background(), []string{"serve", "extra"}, io.Discard, &stderr))
	stderr.Reset()
	// A negative drain is a mistake (0 is no drain), refused before the
	// gateway starts rather than taken for 0 at the first SIGTERM.
	// The context only ends a gateway that wrongly started.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.Equal(t, exitUsage, dispatch(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--drain", "-1s"}, io.Discard, &stderr))
	require.Contains(t, stderr.String(), "--drain")
	stderr.Reset()
	require.Equal(t, exitUsage, dispatch(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--gc-floor", "-1"}, io.Discard, &stderr))
	require.Contains(t, stderr.String(), "--gc-floor -1: a floor cannot be negative")
	stderr.Reset()
	require.Equal(t, exitUsage, dispatch(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--max-conns", "-1"}, io.Discard, &stderr))
	require.Contains(t, stderr.String(), "--max-conns -1: a limit cannot be negative")
	stderr.Reset()
	empty := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(empty, []byte("# none\n"), 0o600))
	require.Equal(t, exitInput, dispatch(context.Background(), []string{"serve", "--api-keys-file", empty}, io.Discard, &stderr))
	require.Contains(t, stderr.String(), "no API key")
}

// startDemoUpstreamForTest serves the demo's answering provider.
func startDemoUpstreamForTest(t *testing.T) string {
	for _, p := range demoProviders() {
		if p.name == "gamma" {
			p.gap = 0
			srv := p.start()
			t.Cleanup(srv.Close)
			return srv.URL + "/v1"
		}
	}
	t.Fatal("no gamma")
	return ""
}

// The server's own limit on request headers.
func TestServe_HeaderLimit(t *testing.T) {
	base, _, stop := startServe(t)
	req, err := http.NewRequest(http.MethodGet, base+"/v1/models", nil)
	require.NoError(t, err)
	req.Header.Set("X-Big", strings.Repeat("h", serveMaxHeaderBytes+4096))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	require.Equal(t, exitOK, stop())
}

// serve refuses a request with both Content-Length and Transfer-Encoding
// with 400 and closes its connection, so that nothing smuggled after it is
// served (the gateway's StrictFraming tests go through every framing).
func TestServe_RefusesAmbiguousFraming(t *testing.T) {
	base, _, stop := startServe(t, "--max-conns", "8")
	nc, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second))) // a guard against a hang
	_, err = io.WriteString(nc, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.True(t, resp.Close)
	// The answer's body runs to the connection's end: no answer follows.
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "400 Bad Request", string(b), "the smuggled request got no answer")
	require.Equal(t, exitOK, stop())
}

// --body-budget reaches the gateway: a budget below 8 times --max-body
// (what the largest body is charged) is refused, naming the flag's limit.
func TestServe_BodyBudget(t *testing.T) {
	var stderr bytes.Buffer
	require.Equal(t, exitInput, dispatch(context.Background(), []string{"serve", "--max-body", "1048576", "--body-budget", "4194304"}, io.Discard, &stderr))
	require.Contains(t, stderr.String(), "body budget")
	base, _, stop := startServe(t, "--max-body", "1048576", "--body-budget", "8388608")
	resp, body := post(t, base+"/v1/chat/completions", `{"model":"gamma","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, exitOK, stop())
}

// --max-conns bounds the client connections: past it the connection idle
// the longest is closed for a new client, which is served, while a
// connection whose request is under way is left alone (the new one waits
// for it: cmd/internal/connlimit's tests); /metrics counts both.
func TestServe_MaxConns(t *testing.T) {
	base, _, stop := startServe(t, "--max-conns", "2")
	addr := strings.TrimPrefix(base, "http://")
	get := func(nc net.Conn, br *bufio.Reader, path string) string {
		t.Helper()
		_, err := io.WriteString(nc, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		require.NoError(t, nc.SetReadDeadline(time.Now().Add(10*time.Second)))
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		return string(b)
	}
	var (
		ncs []net.Conn
		brs []*bufio.Reader
	)
	for i := range 3 {
		nc, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer nc.Close()
		ncs, brs = append(ncs, nc), append(brs, bufio.NewReader(nc))
		get(nc, brs[i], "/healthz") // then idle, kept alive
		time.Sleep(5 * time.Millisecond)
	}
	// The third was served: the first, idle the longest, was closed for it.
	require.NoError(t, ncs[0].SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err := brs[0].ReadByte()
	require.ErrorIs(t, err, io.EOF)
	metrics := get(ncs[2], brs[2], "/metrics")
	require.Contains(t, metrics, "retryhost_gateway_client_connections 2\n")
	require.Contains(t, metrics, "retryhost_gateway_client_connections_reclaimed_total 1\n")
	// 0, unless serve had not yet seen the first connection go idle.
	require.Regexp(t, `retryhost_gateway_client_connection_waits_total \d+\n`, metrics)
	get(ncs[1], brs[1], "/healthz") // the second is still open
	require.Equal(t, exitOK, stop())
}

// --upstream-conns caps the connections to each upstream host: with 1, a
// second stream waits for the first to end instead of reaching the
// upstream beside it; a cap that is not positive is refused.
func TestServe_UpstreamConns(t *testing.T) {
	var (
		mu   sync.Mutex
		cur  int
		most int
		pair = make(chan struct{}) // closed when two requests are in at once
	)
	// Each request is held until another one arrives beside it, or for a
	// while: beside one another, both are answered; alone, each is.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		cur++
		if most = max(most, cur); cur == 2 {
			close(pair)
		}
		both := pair
		mu.Unlock()
		defer func() { mu.Lock(); cur--; mu.Unlock() }()
		select {
		case <-both:
		case <-time.After(300 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`+"\n\n"+
			`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	pol := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(pol, []byte(`{"models": [{"name": "one", "provider": "openai", "model": "m", "base_url": "`+up.URL+`/v1", "api_key_env": "UPSTREAM_KEY"}]}`), 0o600))
	t.Setenv("UPSTREAM_KEY", "k")

	run := func(args ...string) int {
		mu.Lock()
		most, pair = 0, make(chan struct{})
		mu.Unlock()
		base, _, stop := startServe(t, append([]string{"--policy", pol, "--watch=false"}, args...)...)
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, body := post(t, base+"/v1/chat/completions", `{"model":"one","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
				require.Equal(t, http.StatusOK, resp.StatusCode, body)
				require.True(t, streamDone(body), body)
			}()
		}
		wg.Wait()
		require.Equal(t, exitOK, stop())
		mu.Lock()
		defer mu.Unlock()
		return most
	}
	require.Equal(t, 1, run("--upstream-conns", "1"), "one connection: the streams took turns")
	require.Equal(t, 2, run(), "the default cap lets both through at once")

	var stderr bytes.Buffer
	require.Equal(t, exitInput, dispatch(context.Background(), []string{"serve", "--policy", pol, "--upstream-conns", "0"}, io.Discard, &stderr))
	require.Contains(t, stderr.String(), "upstream connections must be positive")
}

// /metrics counts the calls into the policy's plugins and their failures
// by kind, and shows the breaker that a failing plugin trips: a transform
// that traps on every part (fail open, so the answers still pass).
func TestServe_PluginMetrics(t *testing.T) {
	dir := t.TempDir()
	wasm, err := os.ReadFile(filepath.Join("..", "..", "host", "testdata", "trap.wasm"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "trap.wasm"), wasm, 0o600))
	t.Setenv("UPSTREAM_KEY", "sk-upstream")
	up := startDemoUpstreamForTest(t)
	pol := filepath.Join(dir, "policy.json")
	require.NoError(t, os.WriteFile(pol, []byte(`{
		"models": [{"name": "one", "provider": "openai", "model": "llama", "base_url": "`+up+`", "api_key_env": "UPSTREAM_KEY"}],
		"transforms": [{"plugin": {"path": "trap.wasm", "fail": "open"}}],
		"sandbox": {"breaker": {"failures": 2, "span": "1h"}}
	}`), 0o600))
	base, stderr, stop := startServe(t, "--policy", pol, "--watch=false")
	for range 4 {
		resp, body := post(t, base+"/v1/chat/completions", `{"model":"one","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.True(t, streamDone(body), "a fail-open plugin lets the answer through: %s", body)
	}
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	metrics := string(b)
	value := func(series string) float64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(metrics)
		require.NotNil(t, m, "no %s in /metrics:\n%s\n%s", series, metrics, stderr)
		var v float64
		_, err := fmt.Sscan(m[1], &v)
		require.NoError(t, err)
		return v
	}
	require.GreaterOrEqual(t, value(`retryhost_gateway_plugin_calls_total{op="open",plugin="trap.wasm"}`), 4.0)
	require.GreaterOrEqual(t, value(`retryhost_gateway_plugin_calls_total{op="part",plugin="trap.wasm"}`), 2.0)
	require.Equal(t, 2.0, value(`retryhost_gateway_plugin_failures_total{kind="trap",op="part",plugin="trap.wasm"}`), "the breaker's 2 failures, then no call runs")
	require.GreaterOrEqual(t, value(`retryhost_gateway_plugin_failures_total{kind="disabled",op="open",plugin="trap.wasm"}`), 1.0)
	require.Equal(t, 1.0, value(`retryhost_gateway_plugin_breaker_open{plugin="trap.wasm"}`))
	require.Contains(t, metrics, "retryhost_gateway_requests_total", "beside the gateway's own series")
	require.Equal(t, exitOK, stop())
}

// --print-demo-policy prints the demo's policy as a file that loads, and
// exits without serving.
func TestServe_PrintDemoPolicy(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, dispatch(context.Background(), []string{"serve", "--print-demo-policy"}, &stdout, &stderr), stderr.String())
	require.Empty(t, stderr.String(), "nothing served, nothing logged")
	require.NoError(t, policy.Validate(context.Background(), stdout.Bytes(), policy.Options{Name: "demo.json", Builtin: plugins.Module}))
	for _, route := range []string{`"alpha"`, `"beta"`, `"gamma"`} {
		require.Contains(t, stdout.String(), route)
	}
}

// The --api-keys-file is read again when it changes (and on SIGHUP, the
// same reload): a rotated key is served and the old one refused without a
// restart; a file left with no key is rejected (logged) and the keys in
// use stay. A keys file's change does not reload the policy, whose new
// generation would start with no cooldowns, budgets or sticky fallbacks
// (in-memory state) and a new created time.
func TestServe_APIKeysFileReloads(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	require.NoError(t, os.WriteFile(keys, []byte("k-old\n"), 0o600))
	t.Setenv("RETRYHOST_API_KEYS", "")
	base, stderr, stop := startServe(t, "--api-keys-file", keys)
	code := func(key string) int { return modelsStatus(t, base, key) }
	require.Equal(t, http.StatusOK, code("k-old"))
	require.Equal(t, http.StatusUnauthorized, code("k-new"))

	time.Sleep(20 * time.Millisecond) // a distinct modification time
	require.NoError(t, os.WriteFile(keys, []byte("# rotated\nk-new\n"), 0o600))
	require.Eventually(t, func() bool { return code("k-new") == http.StatusOK }, 10*time.Second, 20*time.Millisecond, "%s", stderr)
	require.Equal(t, http.StatusUnauthorized, code("k-old"))
	require.False(t, strings.Contains(stderr.String(), "policy reloaded"), "a keys file's change reloaded the policy")

	require.NoError(t, os.WriteFile(keys, []byte("# none left\n"), 0o600))
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "API keys reload rejected") },
		10*time.Second, 20*time.Millisecond)
	require.Equal(t, http.StatusOK, code("k-new"))
	require.Equal(t, http.StatusUnauthorized, code(""))
	require.Equal(t, exitOK, stop())
}

// TestServe_APIKeysFileReplacedAlike: a keys file replaced by another of
// the same size and modification time (a rotation by a config manager's
// rename, a ConfigMap's symlink swap within the clock's granularity) is
// seen by its watcher, which is the policy's (fileWatch): the new key is
// served and the old one refused without a SIGHUP.
func TestServe_APIKeysFileReplacedAlike(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(keys, []byte("k-old-1\n"), 0o600))
	t.Setenv("RETRYHOST_API_KEYS", "")
	base, stderr, stop := startServe(t, "--api-keys-file", keys)
	code := func(key string) int { return modelsStatus(t, base, key) }
	require.Equal(t, http.StatusOK, code("k-old-1"))
	writeLike(t, keys, "k-new-1\n", "")
	require.Eventually(t, func() bool { return code("k-new-1") == http.StatusOK }, 10*time.Second, 20*time.Millisecond, "%s", stderr)
	require.Equal(t, http.StatusUnauthorized, code("k-old-1"))
	require.Equal(t, exitOK, stop())
}

// TestServe_APIKeysThatHoldNoKey: keys given but none in them never leave
// the gateway open. RETRYHOST_API_KEYS set to only commas and spaces is
// refused at start, as a keys file with no key is (unset or empty, it
// means no keys: open); a keys file over the reader's 1 MiB is refused
// rather than read cut, which could take a key's first bytes for a key.
func TestServe_APIKeysThatHoldNoKey(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	line := strings.Repeat("k", 99) + "\n"
	require.NoError(t, os.WriteFile(big, []byte(strings.Repeat(line, (1<<20)/len(line)+1)), 0o600))
	for _, tc := range []struct {
		name, file, list string
		want             []string
		err              string
	}{
		{name: "none", want: nil},
		{name: "blank list", list: "  ", want: nil},
		{name: "list", list: " a , ,b ", want: []string{"a", "b"}},
		{name: "commas only", list: " , ,", err: "RETRYHOST_API_KEYS has no key"},
		{name: "file over 1 MiB", file: big, err: "larger than 1 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := apiKeys(tc.file, tc.list)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, keys)
		})
	}
	t.Setenv("RETRYHOST_API_KEYS", ",")
	// The context only ends a gateway that wrongly started open, so that
	// the failure is an exit code, not a hung test.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	require.Equal(t, exitInput, dispatch(ctx, []string{"serve", "--addr", "127.0.0.1:0"}, io.Discard, &stderr))
	require.Contains(t, stderr.String(), "RETRYHOST_API_KEYS has no key")
}

// TestServe_APIKeysFileFormats: a keys file as editors and tools write it
// gives the keys it holds: CRLF line ends, blank and indented lines, #
// comments (a whole line, or after a key and whitespace), no final newline, and a UTF-8 byte order mark (Notepad's
// "UTF-8 with BOM"), which must not become part of the first key: that key
// would be refused with 401 and nothing would say why.
func TestServe_APIKeysFileFormats(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, data string
		want       []string
	}{
		{name: "plain", data: "k1\nk2\n", want: []string{"k1", "k2"}},
		{name: "CRLF", data: "k1\r\nk2\r\n", want: []string{"k1", "k2"}},
		{name: "comments and blank lines", data: "# clients\n\n  k1  \n\t# old: k0\n\nk2", want: []string{"k1", "k2"}},
		{name: "byte order mark", data: "\ufeffk1\r\nk2\r\n", want: []string{"k1", "k2"}},
		{name: "byte order mark before a comment", data: "\ufeff# clients\nk1\n", want: []string{"k1"}},
		// A comment after a key starts at whitespace followed by #; a #
		// inside a key is part of it.
		{name: "inline comments", data: "k1 # ci\nk2\t# staging, until May\nk3  #\nk#4\nk5#x # y\n", want: []string{"k1", "k2", "k3", "k#4", "k5#x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			require.NoError(t, os.WriteFile(file, []byte(tc.data), 0o600))
			keys, err := apiKeys(file, "")
			require.NoError(t, err)
			require.Equal(t, tc.want, keys)
		})
	}
}

// serve keeps the collector off below --gc-floor while it runs, and gives
// the process its own setting back when it stops.
func TestServe_GCFloor(t *testing.T) {
	runtime.GC()
	before := heapGoal()
	require.Less(t, before, uint64(200<<20), "this test's heap is small")

	_, _, stop := startServe(t, "--gc-floor", strconv.Itoa(256<<20))
	require.InDelta(t, 256<<20, heapGoal(), 8<<20, "the heap's goal is the floor while serve runs")
	require.Equal(t, exitOK, stop())
	runtime.GC()
	require.Less(t, heapGoal(), uint64(200<<20), "after serve, Go's own goal")

	_, _, stop = startServe(t, "--gc-floor", "0")
	runtime.GC()
	require.Less(t, heapGoal(), uint64(200<<20), "--gc-floor 0: Go's own goal")
	require.Equal(t, exitOK, stop())
}

func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
