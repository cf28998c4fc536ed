package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/policy"
	"github.com/retryhost/retryhost/provider/openai"
)

func newJSONLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

func TestStreamAndCallThroughOpenAIClient(t *testing.T) {
	r := newRig(t, "")
	r.up["primary"].play(act{preamble: true, chunks: []string{"Paris", " is", " the capital."}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Paris is the capital.", got.text)
	require.Equal(t, map[string]bool{"primary": true}, got.models, "every chunk names the route that answered")
	require.Equal(t, "stop", got.finish)
	require.NotNil(t, got.usage, "include_usage is honoured")
	require.EqualValues(t, 11, got.usage.PromptTokens)
	require.EqualValues(t, 3, got.usage.CompletionTokens)

	r.up["primary"].play(act{chunks: []string{"Paris", "."}})
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "Paris.", cc.Choices[0].Message.Content)
	require.Equal(t, "primary", cc.Model)
	require.Equal(t, "stop", cc.Choices[0].FinishReason)
	require.EqualValues(t, 13, cc.Usage.TotalTokens)

	// Without include_usage there is no usage chunk.
	_, body := r.rawStream(streamBody("primary"))
	ev := events(body)
	require.Equal(t, "[DONE]", ev[len(ev)-1])
	for _, e := range ev {
		require.NotContains(t, e, `"usage"`)
	}
}

func TestRouteIsTheFirstModel(t *testing.T) {
	r := newRig(t, "")
	r.up["backup"].play(act{chunks: []string{"from backup"}})
	got := r.stream("backup")
	require.NoError(t, got.err)
	require.Equal(t, "from backup", got.text)
	require.Empty(t, r.up["primary"].requests(), "a route starts on its own model")
	require.Equal(t, `"up-backup"`, string(r.up["backup"].requests()[0].body["model"]), "the upstream gets its own model id")
}

func TestModelsAndHealth(t *testing.T) {
	r := newRig(t, "")
	page, err := r.client.Models.List(context.Background())
	require.NoError(t, err)
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	require.Equal(t, []string{"backup", "primary", "third"}, ids)
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := r.hc.Get(r.srv.URL + p)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, p)
	}
}

// Fields the driver does not model reach the upstream unchanged; the
// gateway's own (fallbacks) do not, and a client's stream_options goes
// there asking for usage, which the gateway counts.
func TestUnmodeledFieldsForwardedUnchanged(t *testing.T) {
	r := newRig(t, "")
	body := `{"model":"primary","stream":true,"stream_options":{"include_usage":false},"fallbacks":["backup"],
		"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"What is in"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}],"name":"ann"}],
		"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}},
		"seed":42,"logprobs":true,"top_logprobs":2,"tool_choice":"auto",
		"tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object"}}}],
		"max_tokens":77,"temperature":0.25,"user":"u-1","x-vendor.ext":{"deep":[1,2.50,"three",null]}}`
	resp, out := r.rawStream(body)
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	got := r.up["primary"].requests()[0].body
	var sent map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &sent))
	for _, k := range []string{"messages", "response_format", "seed", "logprobs", "top_logprobs", "tool_choice", "tools", "max_tokens", "temperature", "user", "x-vendor.ext"} {
		require.Contains(t, got, k)
		require.JSONEq(t, string(sent[k]), string(got[k]), k)
	}
	require.NotContains(t, got, "fallbacks")
	require.NotContains(t, got, "max_completion_tokens", "the client's max_tokens is not doubled")
	require.JSONEq(t, `{"include_usage":true}`, string(got["stream_options"]), "a client that sent stream_options gets it upstream, asking for usage")
	require.Equal(t, `"up-primary"`, string(got["model"]))
}

func TestRequestErrors(t *testing.T) {
	r := newRig(t, "")
	for _, c := range []struct {
		body, code string
		status     int
	}{
		{`{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, "model_not_found", 404},
		{`{"model":"primary","fallbacks":["nope"],"messages":[{"role":"user","content":"hi"}]}`, "model_not_found", 404},
		{`{"model":"primary","messages":[]}`, "invalid_request", 400},
		{`{"model":"primary","fallbacks":["backup","backup","backup","backup","backup","backup","backup","backup","backup"],"messages":[{"role":"user","content":"hi"}]}`, "invalid_request", 400},
		{`{"model":"primary","n":2,"messages":[{"role":"user","content":"hi"}]}`, "invalid_request", 400},
		{`{"messages":[{"role":"user","content":"hi"}]}`, "invalid_request", 400},
		{`[1,2]`, "invalid_request", 400},
		{`{"model":"primary","messages":[{"role":"user","content":"hi"}]} trailing`, "invalid_request", 400},
	} {
		resp, out := r.rawStream(c.body)
		require.Equal(t, c.status, resp.StatusCode, c.body)
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &e), out)
		require.Equal(t, c.code, e.Error.Code, c.body)
	}
	for _, u := range r.up {
		require.Empty(t, u.requests(), "a bad request reaches no upstream")
	}
	// "fallbacks": [] is accepted.
	resp, out := r.rawStream(`{"model":"primary","fallbacks":[],"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
}

// The access log has one JSON record per request (and one per attempt,
// TestStreamEndsWithAttemptTrail), with no prompt or output text.
func TestAccessLogHasNoText(t *testing.T) {
	r := newRig(t, "")
	r.up["primary"].play(act{chunks: []string{"SECRET-OUTPUT"}})
	_, err := r.client.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "primary",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("SECRET-PROMPT")}})
	require.NoError(t, err)
	logs := r.logs.String()
	require.NotContains(t, logs, "SECRET")
	recs := logRecords(t, logs, "request")
	require.Len(t, recs, 1, logs)
	rec := recs[0]
	require.Equal(t, "primary", rec["model"])
	require.Equal(t, "ok", rec["outcome"])
	require.EqualValues(t, 200, rec["status"])
}

func TestAPIKeys(t *testing.T) {
	r := newRig(t, "", WithAPIKeys("k-one", "k-two"))
	cw := r.newClient("wrong")
	_, err := cw.Chat.Completions.New(context.Background(), params("primary"))
	var apiErr *oai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
	c1 := r.newClient("k-one")
	_, err = c1.Models.List(context.Background())
	require.NoError(t, err)
	c2 := r.newClient("k-two")
	_, err = c2.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	resp, _ := r.rawStream(streamBody("primary"), "X-Api-Key", "k-two")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = r.rawStream(streamBody("primary"))
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	hz, err := r.hc.Get(r.srv.URL + "/healthz")
	require.NoError(t, err)
	hz.Body.Close()
	require.Equal(t, http.StatusOK, hz.StatusCode, "health needs no key")
	require.Len(t, r.up["primary"].requests(), 2, "an unauthorised request reaches no upstream")
}

// TestAPIKeyAnyCredentialMatches: a request is served when any credential
// it presents, Authorization: Bearer or X-Api-Key, is a key, whichever of
// the two is wrong (a client with a stale OPENAI_API_KEY beside the right
// x-api-key was refused: the bearer won); refused when every one is wrong
// or none is sent. On both doors' shapes of /v1/models.
func TestAPIKeyAnyCredentialMatches(t *testing.T) {
	r := newRig(t, "", WithAPIKeys("k-one", "k-two"))
	for _, tc := range []struct {
		name                   string
		authorization, xAPIKey string
		status                 int
	}{
		{"bearer right, x-api-key wrong", "Bearer k-one", "wrong", http.StatusOK},
		{"bearer wrong, x-api-key right", "Bearer wrong", "k-two", http.StatusOK},
		{"both right, different keys", "Bearer k-two", "k-one", http.StatusOK},
		{"empty bearer, x-api-key right", "Bearer ", "k-one", http.StatusOK},
		{"another scheme, x-api-key right", "Basic k-one", "k-one", http.StatusOK},
		{"bearer right alone", "bearer k-one", "", http.StatusOK},
		{"x-api-key right alone", "", "k-two", http.StatusOK},
		{"both wrong", "Bearer wrong", "wrong-too", http.StatusUnauthorized},
		{"bearer wrong alone", "Bearer wrong", "", http.StatusUnauthorized},
		{"x-api-key wrong alone", "", "wrong", http.StatusUnauthorized},
		{"another scheme's right key alone", "Basic k-one", "", http.StatusUnauthorized},
		{"neither", "", "", http.StatusUnauthorized},
	} {
		for _, anthropicVersion := range []string{"", "2023-06-01"} {
			t.Run(tc.name+" "+anthropicVersion, func(t *testing.T) {
				req, err := http.NewRequest(http.MethodGet, r.srv.URL+"/v1/models", nil)
				require.NoError(t, err)
				for h, v := range map[string]string{"Authorization": tc.authorization, "X-Api-Key": tc.xAPIKey, "Anthropic-Version": anthropicVersion} {
					if v != "" {
						req.Header.Set(h, v)
					}
				}
				resp, err := r.hc.Do(req)
				require.NoError(t, err)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.Equal(t, tc.status, resp.StatusCode, string(body))
			})
		}
	}
}

func TestBodyLimit(t *testing.T) {
	r := newRig(t, "", WithMaxBodyBytes(256))
	big := `{"model":"primary","messages":[{"role":"user","content":"` + strings.Repeat("x", 300) + `"}]}`
	resp, out := r.rawStream(big)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, out)
	require.Empty(t, r.up["primary"].requests())
	r.healthy()
}

func TestConcurrencyLimit(t *testing.T) {
	r := newRig(t, "", WithMaxConcurrent(1))
	release := make(chan struct{})
	r.up["primary"].play(act{hold: release, chunks: []string{"slow"}}, act{chunks: []string{"ok"}})
	done := make(chan streamed)
	go func() { done <- r.stream("primary") }()
	require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 5e9, 1e6)
	resp, out := r.rawStream(streamBody("primary"))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, out)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Contains(t, out, "gateway_busy")
	require.Len(t, r.up["primary"].requests(), 1, "the rejected request reached no upstream")
	close(release)
	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, "slow", got.text)
	// The slot frees when the handler returns, just after the client's [DONE].
	require.Eventually(t, func() bool { return len(r.gw.sem) == 0 }, 5*time.Second, time.Millisecond)
	r.healthy()
}

var _ = option.WithHeader

// The per-write deadline does not outlive its request: the next request on
// the same keep-alive connection is served after the deadline has passed
// (net/http clears it after each request; this holds the gateway to it).
func TestWriteDeadlineClearedForKeepAlive(t *testing.T) {
	r := newRig(t, "", WithWriteTimeout(100*time.Millisecond))
	var reused []bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
	ctx := httptrace.WithClientTrace(context.Background(), trace)
	for i := range 3 {
		cc, err := r.client.Chat.Completions.New(ctx, params("primary"))
		require.NoError(t, err, "request %d", i)
		require.Equal(t, "ok", cc.Choices[0].Message.Content)
		time.Sleep(200 * time.Millisecond) // past the write deadline (no assertion on time)
	}
	require.Contains(t, reused, true, "the test needs a reused connection")
}

// On HTTP/2 the per-write deadline does not outlive its write either: a
// stream whose upstream is quiet for longer than the write timeout (the
// gap deadline allows a minute) is not reset by it. Go's HTTP/2 server
// runs the deadline as a timer on the stream, which fired 30 s (the
// default) after the last write of any held stream of `serve --h2c`.
func TestWriteDeadlineClearedOnQuietH2Stream(t *testing.T) {
	r := newRig(t, "", WithWriteTimeout(100*time.Millisecond))
	hold := make(chan struct{})
	r.up["primary"].play(act{chunks: []string{"first"}, afterText: hold})
	srv := httptest.NewUnstartedServer(r.gw)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()

	resp, err := (&http.Client{Transport: tr}).Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(streamBody("primary")))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 2, resp.ProtoMajor)
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, first, `"first"`)
	time.Sleep(500 * time.Millisecond) // the upstream quiet past the write deadline (no assertion on time)
	close(hold)
	rest, err := io.ReadAll(br)
	require.NoError(t, err, "the quiet stream was reset")
	require.True(t, strings.HasSuffix(withoutTrail(string(rest)), "data: [DONE]\n\n"), "%s", rest)
}

// WithUpstreamConns caps the connections to an upstream: a second request
// waits for the first one's connection.
func TestUpstreamConnectionLimit(t *testing.T) {
	r := newRig(t, `"rules": []`, WithUpstreamConns(1))
	hold := make(chan struct{})
	r.up["primary"].play(act{chunks: []string{"first"}, afterText: hold}, act{chunks: []string{"second"}})
	first := make(chan streamed, 1)
	go func() { first <- r.stream("primary") }()
	require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 5*time.Second, time.Millisecond)
	second := make(chan streamed, 1)
	go func() { second <- r.stream("primary") }()
	require.Never(t, func() bool { return len(r.up["primary"].requests()) > 1 }, 200*time.Millisecond, 5*time.Millisecond,
		"a second upstream connection was opened")
	close(hold)
	require.Equal(t, "first", (<-first).text)
	got := <-second
	require.NoError(t, got.err)
	require.Equal(t, "second", got.text)
}

// /metrics exposes requests, attempts, fail-overs, commits, time to first
// content, in-flight gauges and the gateway's own counters.
func TestMetrics(t *testing.T) {
	r := newRig(t, "")
	r.up["primary"].play(act{status: 503})
	r.up["backup"].play(act{chunks: []string{"ok"}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	r.up["primary"].play(act{malformed: 1, chunks: []string{"ok"}})
	require.NoError(t, r.stream("primary").err)
	resp, body := r.rawStream(`{"model":"nope","messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	wants := []string{
		`retryhost_gateway_requests_total{code="200",outcome="ok",route="primary"} 2`,
		`retryhost_gateway_requests_total{code="404",outcome="client_error",route=""} 1`,
		`retryhost_gateway_attempts_total{class="overloaded",model="primary",outcome="error"} 1`,
		`retryhost_gateway_attempts_total{class="",model="backup",outcome="success"} 1`,
		`retryhost_gateway_failovers_total{to="backup"} 1`,
		`retryhost_gateway_commits_total{model="backup"} 1`,
		`retryhost_gateway_time_to_first_content_seconds_count{model="primary"} 1`,
		`retryhost_gateway_inflight_requests 0`,
		`retryhost_gateway_inflight_streams 0`,
		`retryhost_gateway_upstream_malformed_events_total 1`,
		`go_goroutines`,
	}
	// A client has its whole answer a moment before the handler that sent
	// it returns and records it: read /metrics until every request is
	// recorded and nothing is in flight.
	require.Eventually(t, func() bool {
		body = r.metricsText()
		for _, want := range wants {
			if !strings.Contains(body, want) {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	for _, want := range wants {
		require.Contains(t, body, want)
	}
	require.NotContains(t, body, "nope", "a client's unknown route name never becomes a label value")
}

// A body that trickles in past the read timeout gets 408 and frees its slot.
func TestBodyReadTimeout(t *testing.T) {
	r := newRig(t, "", WithReadTimeout(200*time.Millisecond), WithMaxConcurrent(1))
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte(`{"model":"primary",`)) }() // and never the rest
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+"/v1/chat/completions", pr)
	require.NoError(t, err)
	resp, err := r.hc.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode, string(b))
	require.Empty(t, r.up["primary"].requests())
	require.Eventually(t, func() bool { return len(r.gw.sem) == 0 }, 5*time.Second, time.Millisecond)
	r.healthy()
}

// Forwarded fields go only to a provider name whose models all speak Chat
// Completions: a Responses API model under the same name must not get a
// Chat Completions body's fields.
func TestForwardingSkipsResponsesAPIProviders(t *testing.T) {
	resp, err := openai.New("r", openai.WithKey("resp"), openai.WithResponsesAPI(), openai.WithAPIKey("k"), openai.WithBaseURL("http://127.0.0.1:1/v1"))
	require.NoError(t, err)
	vllm, err := openai.New("v", openai.WithKey("vllm"), openai.WithProvider("vllm"), openai.WithAPIKey("k"), openai.WithBaseURL("http://127.0.0.1:1/v1"))
	require.NoError(t, err)
	pol := `{"models": [
		{"name": "chat", "provider": "openai", "model": "c", "base_url": "http://127.0.0.1:1/v1", "api_key_env": "K"},
		{"name": "resp", "provider": "openai", "model": "r"},
		{"name": "vllm", "provider": "openai", "model": "v"}]}`
	gw, err := New(context.Background(), Bytes("p", []byte(pol), policy.Options{Getenv: func(string) string { return "k" },
		Models: map[string]driver.Model{"resp": resp, "vllm": vllm}}))
	require.NoError(t, err)
	defer gw.Close(context.Background())
	require.Equal(t, []string{"vllm"}, gw.cur.Load().providers)
}

// Every configuration mistake is an error from New: a bad policy (with its
// position), a bad option, an empty Source.
func TestNewErrors(t *testing.T) {
	getenv := policy.Options{Getenv: func(string) string { return "k" }}
	_, err := New(context.Background(), Bytes("bad.json", []byte(`{"models": [{"name": "a", "provider": "nope"}]}`), getenv))
	require.ErrorContains(t, err, "bad.json")
	require.ErrorContains(t, err, "provider")
	_, err = New(context.Background(), Source{})
	require.Error(t, err)
	good := Bytes("ok.json", []byte(`{"models": [{"name": "a", "provider": "openai", "model": "m", "base_url": "http://127.0.0.1:1/v1", "api_key_env": "K"}]}`), getenv)
	for _, o := range []Option{WithMaxConcurrent(0), WithMaxBodyBytes(-1), WithAPIKeys(""), WithUpstreamConns(0),
		WithUpstreamHeaderTimeout(0), WithWriteTimeout(-time.Second), WithReadTimeout(0), WithLogger(nil), WithTracerProvider(nil), nil} {
		_, err = New(context.Background(), good, o)
		require.Error(t, err)
	}
	gw, err := New(context.Background(), good)
	require.NoError(t, err)
	require.NoError(t, gw.Close(context.Background()))
}

// countingConn counts the writes on a connection (each one a write syscall
// on a TCP connection: it has no ReadFrom of its own, as a TCP connection's
// for a body that is neither a file nor a socket copies through Write).
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// The upstream client's 1 KiB write buffer does not split a request into
// more writes than net/http's default 4 KiB would: the headers (the
// openai direct path's, a long API key; ~330 bytes) and a body that fits
// the rest of the buffer go in one write, a longer body in one more
// however long it is (up to the copy's 32 KiB). A buffer smaller than the
// headers fails it (256 bytes: 4 writes).
func TestUpstreamRequestWrites(t *testing.T) {
	key := strings.Repeat("k", 164)
	up := newUpstream("primary")
	t.Cleanup(up.srv.Close)
	pol := `{"models": [{"name": "primary", "provider": "openai", "model": "m", "base_url": "` + up.url() + `", "api_key_env": "K"}]}`
	gw, err := New(context.Background(), Bytes("writes", []byte(pol), policy.Options{Getenv: func(string) string { return key }}))
	require.NoError(t, err)
	t.Cleanup(func() { gw.Close(context.Background()) })
	tr := gw.client.Transport.(*sseFilter).next.(*http.Transport)
	require.Equal(t, upstreamWriteBuffer, tr.WriteBufferSize)
	require.Equal(t, upstreamReadBuffer, tr.ReadBufferSize)
	var writes, dials atomic.Int64
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		dials.Add(1)
		return countingConn{Conn: c, writes: &writes}, nil
	}
	srv := newTestServer(t, gw)
	for _, tc := range []struct {
		name   string
		prompt int // bytes of the user message
	}{
		{"short prompt", 2},
		{"1 KiB prompt", 1 << 10},
		{"8 KiB prompt", 8 << 10},
		{"24 KiB prompt", 24 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up.reset()
			prompt := strings.Repeat("w", tc.prompt)
			before := writes.Load()
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"primary","stream":true,"messages":[{"role":"user","content":"`+prompt+`"}]}`))
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
			hits := up.requests()
			require.Len(t, hits, 1)
			require.Equal(t, "Bearer "+key, hits[0].header.Get("Authorization"))
			require.Contains(t, string(hits[0].raw), prompt, "the whole body reached the upstream")
			n := writes.Load() - before
			t.Logf("%d writes for %d body bytes", n, len(hits[0].raw))
			require.Positive(t, dials.Load(), "the counting dialer was not used")
			require.LessOrEqual(t, n, int64(2), "writes for one request of %d body bytes", len(hits[0].raw))
			if tc.prompt < 512 {
				require.Equal(t, int64(1), n, "a short request is one write")
			}
		})
	}
}

// recordingConn keeps what the server writes to a client connection, one
// entry a write.
type recordingConn struct {
	net.Conn
	mu     *sync.Mutex
	writes *[]string
}

func (c recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	*c.writes = append(*c.writes, string(p))
	c.mu.Unlock()
	return c.Conn.Write(p)
}

type recordingListener struct {
	net.Listener
	mu     sync.Mutex
	writes []string
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return recordingConn{Conn: c, mu: &l.mu, writes: &l.writes}, nil
}

// A streamed answer's end marker and the chunked body's terminator go out
// in one write: the relay does not flush the end itself (net/http does as
// the handler returns), which would make the terminator a write of its
// own — a syscall and, on loopback, the receiver's TCP work, per request.
func TestStreamEndSharesTheTerminatorsWrite(t *testing.T) {
	up := newUpstream("primary", act{chunks: []string{"Par", "is"}})
	t.Cleanup(up.srv.Close)
	pol := `{"models": [{"name": "primary", "provider": "openai", "model": "m", "base_url": "` + up.url() + `", "api_key_env": "K"}]}`
	gw, err := New(context.Background(), Bytes("end", []byte(pol), policy.Options{Getenv: func(string) string { return "k" }}))
	require.NoError(t, err)
	t.Cleanup(func() { gw.Close(context.Background()) })
	srv := httptest.NewUnstartedServer(gw)
	rl := &recordingListener{Listener: srv.Listener}
	srv.Listener = rl
	srv.Start()
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(streamBody("primary")))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.True(t, strings.HasSuffix(withoutTrail(string(body)), "data: [DONE]\n\n"), "%s", body)
	rl.mu.Lock()
	defer rl.mu.Unlock()
	require.NotEmpty(t, rl.writes)
	last := rl.writes[len(rl.writes)-1]
	require.Regexp(t, `data: \[DONE\]\n\n: retryhost \{.*\}\n\n\r\n0\r\n\r\n$`, last,
		"the end marker, the trail and the terminator in the last write")
}
