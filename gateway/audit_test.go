package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit"
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

// A provider silent for minutes never holds the client longer than the
// policy's budget, wherever it falls silent: before its response headers
// (the gateway's own header timeout, 60 s by default, is not what ends it),
// before its first content, or in the middle of a committed stream (no gap
// deadline in the policy).
func TestSilenceBoundedByBudgetAlone(t *testing.T) {
	r := newRig(t, `"rules": [{"when": {"class": ["timeout", "network"]}, "action": "switch", "model": "backup"}],
		"deadlines": {"budget": "1s"}`)
	silent := make(chan struct{})
	defer close(silent)
	for _, c := range []struct {
		name      string
		a         act
		committed bool
	}{
		{"before the headers", act{hold: silent}, false},
		{"before the first content", act{preamble: true, beforeText: silent, chunks: []string{"never"}}, false},
		{"after the first content", act{chunks: []string{"Par"}, afterText: silent}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, u := range r.up {
				u.play(c.a)
			}
			// A guard against a hang (the test's failure), not a timing assertion.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			text, err := r.streamText(ctx, "primary")
			require.Error(t, err)
			require.NoError(t, ctx.Err(), "the client was held past the budget")
			if c.committed {
				require.Equal(t, "Par", text)
				require.Contains(t, err.Error(), "total")
			} else {
				var apiErr *oai.Error
				require.True(t, errors.As(err, &apiErr), "%v", err)
				require.Equal(t, http.StatusGatewayTimeout, apiErr.StatusCode)
			}
			_, err = r.client.Chat.Completions.New(ctx, params("primary"))
			require.Error(t, err)
			require.NoError(t, ctx.Err(), "the non-streaming client was held past the budget")
			r.healthy()
		})
	}
}

// An upstream that never stops sending content (no silence for the gap
// deadline to catch) holds a committed stream no longer than the policy's
// budget either: the stream ends with the in-band error, its text cut.
func TestEndlessStreamBoundedByBudget(t *testing.T) {
	r := newRig(t, `"deadlines": {"budget": "1s", "gap": "1s"}`)
	endless := make([]string, 100000)
	for i := range endless {
		endless[i] = "x"
	}
	for _, u := range r.up {
		u.play(act{chunks: endless, gap: 5 * time.Millisecond})
	}
	// A guard against a hang (the test's failure), not a timing assertion.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	text, err := r.streamText(ctx, "primary")
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "the client was held past the budget")
	require.Contains(t, err.Error(), "total")
	require.NotEmpty(t, text)
	require.Less(t, len(text), len(endless))
	r.healthy()
}

// However a policy words its retries, one request makes a bounded number
// of attempts: a rule's own attempts (default 2 for a retry) per model,
// and the policy's max_attempts (default 10) in all.
func TestAttemptsBounded(t *testing.T) {
	for _, c := range []struct {
		name  string
		rules string
		want  int
	}{
		{"a retry without attempts", `"rules": [{"when": {"status": [429]}, "action": "retry"}]`, 2},
		{"a retry of 1000 attempts", `"rules": [{"when": {"status": [429]}, "action": "retry", "attempts": 1000}]`, 10},
		{"max_attempts", `"rules": [{"when": {"status": [429]}, "action": "retry", "attempts": 1000}], "max_attempts": 3`, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, c.rules)
			r.up["primary"].play(act{status: 429, header: http.Header{"Retry-After-Ms": {"1"}}})
			_, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
			var apiErr *oai.Error
			require.True(t, errors.As(err, &apiErr), "%v", err)
			require.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)
			require.Len(t, r.up["primary"].requests(), c.want)
			require.Empty(t, r.up["backup"].requests())
		})
	}
}

// During an outage in which the primary hangs (the costly kind: each try
// waits out the first-content deadline), once the cooldown takes it out
// every request is served by the backup without first waiting on the
// primary, concurrent requests included; after the outage the primary is
// used again.
func TestOutageOfAHangingPrimary(t *testing.T) {
	r := newRig(t, `"rules": [{"when": {"class": ["timeout", "network", "server", "overloaded"]}, "action": "switch", "model": "backup"}],
		"deadlines": {"first_content": "300ms"},
		"cooldown": {"failures": 2, "for": "8s"}`)
	// 8 s, not less: the outage's requests below must all land inside the
	// cooldown even on a loaded CI machine, or a probe reaches the primary.
	dead := make(chan struct{})
	r.up["primary"].play(act{hold: dead})
	r.up["backup"].play(act{chunks: []string{"backup"}})
	for i := range 2 { // the failures that start the cooldown
		got := r.stream("primary")
		require.NoError(t, got.err, "request %d", i)
		require.Equal(t, map[string]bool{"backup": true}, got.models)
	}
	require.Len(t, r.up["primary"].requests(), 2)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
			if err == nil && cc.Model != "backup" {
				err = fmt.Errorf("answered by %s", cc.Model)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, r.up["primary"].requests(), 2, "a request during the outage waited on the dead primary")
	close(dead)

	r.primaryRecovers()
}

// While the gateway drains, /readyz says so (503) and /healthz stays 200:
// a load balancer stops sending new requests, an orchestrator does not
// kill it.
func TestReadyzFalseWhileDraining(t *testing.T) {
	r := newRig(t, "")
	hold := make(chan struct{})
	r.up["primary"].play(act{chunks: []string{"Par"}, afterText: hold})
	done := make(chan streamed, 1)
	go func() { done <- r.stream("primary") }()
	require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 5*time.Second, time.Millisecond)
	status := func(path string) int {
		resp, err := r.hc.Get(r.srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, status("/readyz"))
	shut := make(chan error, 1)
	go func() { shut <- r.gw.Shutdown(context.Background()) }()
	require.Eventually(t, func() bool { return status("/readyz") == http.StatusServiceUnavailable }, 5*time.Second, time.Millisecond)
	require.Equal(t, http.StatusOK, status("/healthz"))
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned with a stream in flight: %v", err)
	default:
	}
	close(hold)
	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, "Par", got.text)
	require.NoError(t, <-shut)
}

// TestUnreadyServesWithReadyz503: after Unready, /readyz is 503 (with
// Retry-After, as while draining) while chat requests are still served
// whole and /healthz is ok: the window serve's --shutdown-delay gives a
// load balancer to see the 503 before the listener closes.
func TestUnreadyServesWithReadyz503(t *testing.T) {
	r := newRig(t, "")
	get := func(path string) (*http.Response, string) {
		resp, err := r.hc.Get(r.srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	resp, _ := get("/readyz")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	r.gw.Unready()
	resp, body := get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "draining\n", body)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	resp, _ = get("/healthz")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, stream := range []bool{true, false} {
		r.up["primary"].play(act{chunks: []string{"Paris"}})
		body := `{"model":"primary","messages":[{"role":"user","content":"hi"}]}`
		if stream {
			body = streamBody("primary")
		}
		resp, out := r.rawStream(body)
		require.Equal(t, http.StatusOK, resp.StatusCode, out)
		require.Contains(t, out, "Paris")
	}
}

// rawEnding makes u answer with chunks of content (none: a role-only
// preamble), then end as said: "[DONE]" without a finish reason, or a
// finish reason without [DONE].
func rawEnding(u *upstream, content []string, ending string) {
	u.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		ch := func(delta, fin string) {
			fmt.Fprintf(w, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`+"\n\n", delta, fin)
		}
		ch(`{"role":"assistant","content":""}`, "null")
		for _, c := range content {
			ch(`{"content":`+strconv.Quote(c)+`}`, "null")
		}
		switch ending {
		case "[DONE]":
			fmt.Fprint(w, "data: [DONE]\n\n")
		case "finish":
			ch(`{}`, `"stop"`)
		}
	})
}

// An upstream that ends its stream without a finish reason (even with a
// [DONE]) has not finished its answer: before the first content that is a
// failure that fails over; after it, a streaming client gets the in-band
// error and no [DONE], a non-streaming one the fallback's answer. A finish
// reason without [DONE] is a whole answer.
func TestEndWithoutFinishReason(t *testing.T) {
	r := newRig(t, "")
	r.up["backup"].play(act{chunks: []string{"from backup"}})

	rawEnding(r.up["primary"], nil, "[DONE]")
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "from backup", got.text)
	require.Equal(t, map[string]bool{"backup": true}, got.models)

	rawEnding(r.up["primary"], []string{"Par"}, "[DONE]")
	got = r.stream("primary")
	require.Error(t, got.err, "an answer without a finish reason must not read as complete")
	require.Equal(t, "Par", got.text)
	resp, body := r.rawStream(streamBody("primary"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	ev := events(body)
	require.NotContains(t, ev, "[DONE]")
	require.Contains(t, ev[len(ev)-1], `"code":"stream_failed"`)
	// Non-streaming, the client has seen nothing: the same ending fails
	// over, and the answer is the backup's alone.
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "from backup", cc.Choices[0].Message.Content)
	require.Equal(t, "backup", cc.Model)

	rawEnding(r.up["primary"], []string{"Par", "is"}, "finish")
	got = r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Paris", got.text)
	require.Equal(t, "stop", got.finish)
	require.Len(t, r.up["backup"].requests(), 2, "only the uncommitted failures failed over")
}

// No prompt or output text reaches the logs, on any path: streamed or
// not, failed over, rate limited, rejected with an upstream error body
// that quotes the prompt, ended in-band after commit; the policy's own
// logger (the driver's warnings) included.
func TestLogsHaveNoTextOnAnyPath(t *testing.T) {
	const prompt, answer = "PROMPT-7f3a", "ANSWER-91bc"
	logs := &testkit.LogBuffer{}
	ups := map[string]*upstream{}
	var models []string
	for _, n := range []string{"primary", "backup", "third"} {
		u := newUpstream(n)
		defer u.srv.Close()
		ups[n] = u
		models = append(models, fmt.Sprintf(`{"name": %q, "provider": "openai", "model": "up-%s", "base_url": %q, "api_key_env": "K"}`, n, n, u.url()))
	}
	rules := strings.Replace(defaultRules, `"delay": "1s", "factor": 2, "max_delay": "4s"`, `"delay": "1ms", "factor": 2, "max_delay": "4ms"`, 1)
	pol := fmt.Sprintf(`{"models": [%s], %s}`, strings.Join(models, ", "), rules)
	gw, err := New(context.Background(), Bytes("p.json", []byte(pol), policy.Options{Getenv: func(string) string { return "k" },
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}),
		WithLogger(slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	require.NoError(t, err)
	srv := httptest.NewServer(gw)
	r := &rig{t: t, gw: gw, srv: srv, up: ups, logs: logs, hc: &http.Client{Transport: &http.Transport{}}}
	r.client = r.newClient("")
	defer func() {
		r.hc.CloseIdleConnections()
		srv.Close()
		require.NoError(t, gw.Close(context.Background()))
	}()
	echo := `{"error":{"message":"rejected: ` + prompt + `","type":"invalid_request_error","param":null,"code":"content_policy_violation"}}`
	ask := func(stream bool) {
		p := oai.ChatCompletionNewParams{Model: "primary", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(prompt)}}
		if stream {
			s := r.client.Chat.Completions.NewStreaming(context.Background(), p)
			for s.Next() {
			}
			s.Close()
			return
		}
		_, _ = r.client.Chat.Completions.New(context.Background(), p)
	}
	for _, c := range []struct {
		name            string
		primary, backup act
	}{
		{"answered", act{chunks: []string{answer}}, act{}},
		{"failed over", act{status: 503, body: `{"error":{"message":"` + prompt + `","type":"server_error"}}`}, act{chunks: []string{answer}}},
		{"rejected", act{status: 400, body: echo}, act{}},
		{"rate limited", act{status: 429, header: http.Header{"Retry-After-Ms": {"1"}}, body: echo}, act{status: 429, body: echo}},
		{"ended in-band", act{chunks: []string{answer}, errorEvent: prompt}, act{}},
		{"a refusal", act{refusal: answer}, act{chunks: []string{answer}}},
	} {
		for _, stream := range []bool{true, false} {
			ups["primary"].play(c.primary)
			ups["backup"].play(c.backup)
			ups["third"].play(c.backup)
			ask(stream)
		}
	}
	out := logs.String()
	require.NotEmpty(t, out)
	require.NotContains(t, out, prompt)
	require.NotContains(t, out, answer)
	if testing.Verbose() {
		t.Log(out)
	}
}

// A client that stops reading loses its stream after the write timeout:
// the gateway lets go of it (and of the upstream) without waiting for the
// client to close.
func TestStalledClientLosesItsStream(t *testing.T) {
	r := newRig(t, "", WithWriteTimeout(200*time.Millisecond))
	big := strings.Repeat("x", 64<<10)
	chunks := make([]string, 400) // 25 MiB: more than the socket buffers hold
	for i := range chunks {
		chunks[i] = big
	}
	r.up["primary"].play(act{chunks: chunks})
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+"/v1/chat/completions", strings.NewReader(streamBody("primary")))
	require.NoError(t, err)
	resp, err := r.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close() // only at the end: the client reads nothing
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Eventually(t, func() bool {
		return strings.Contains(r.logs.String(), `"outcome":"client_closed"`) && len(r.gw.sem) == 0
	}, 30*time.Second, 10*time.Millisecond, "the stalled stream still holds its slot: %s", r.logs)
	resp.Body.Close()
	r.healthy()
}

// Shutdown under load: every stream in flight either finishes whole
// before the drain deadline or ends with the in-band shutting_down error
// (never a short answer with [DONE]); requests after it get 503.
func TestShutdownUnderLoad(t *testing.T) {
	r := newRig(t, "")
	chunks := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	const n = 24
	script := make([]act, n) // fast answers finish within the drain, slow ones cannot
	for i := range script {
		script[i] = act{chunks: chunks, gap: time.Duration(5+100*(i%2)) * time.Millisecond}
	}
	r.up["primary"].play(script...)
	type result struct {
		status int
		events []string
	}
	results := make(chan result, n)
	var started sync.WaitGroup
	for i := range n {
		started.Add(1)
		go func() {
			time.Sleep(time.Duration(i) * 15 * time.Millisecond) // spread over the drain and past it
			started.Done()
			req, _ := http.NewRequest(http.MethodPost, r.srv.URL+"/v1/chat/completions", strings.NewReader(streamBody("primary")))
			resp, err := r.hc.Do(req)
			if err != nil {
				results <- result{status: -1, events: []string{err.Error()}}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			results <- result{status: resp.StatusCode, events: events(string(b))}
		}()
	}
	require.Eventually(t, func() bool { return len(r.up["primary"].requests()) >= n/3 }, 10*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	_ = r.gw.Shutdown(ctx)
	started.Wait()
	var whole, cut, refused int
	for range n {
		res := <-results
		switch {
		case res.status == http.StatusServiceUnavailable:
			refused++
		case res.status == http.StatusOK && res.events[len(res.events)-1] == "[DONE]":
			var text string
			for _, e := range res.events[:len(res.events)-1] {
				var c struct {
					Choices []struct{ Delta struct{ Content string } }
				}
				require.NoError(t, json.Unmarshal([]byte(e), &c))
				for _, ch := range c.Choices {
					text += ch.Delta.Content
				}
			}
			require.Equal(t, strings.Join(chunks, ""), text, "an answer with [DONE] is whole")
			whole++
		case res.status == http.StatusOK:
			require.Contains(t, res.events[len(res.events)-1], `"code":"shutting_down"`)
			require.NotContains(t, res.events, "[DONE]")
			cut++
		default:
			t.Fatalf("unexpected answer: %d %v", res.status, res.events)
		}
	}
	t.Logf("%d whole, %d ended in-band, %d refused", whole, cut, refused)
	require.Equal(t, n, whole+cut+refused)
	require.Positive(t, whole+cut, "no stream was in flight at the drain")
	resp, body := r.rawStream(streamBody("primary"))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "a request after the drain: %s", body)
}

// The Authorization scheme is case-insensitive (RFC 9110): a client that
// sends "bearer KEY" is let in; a wrong scheme or key is not.
func TestAPIKeyBearerSchemeAnyCase(t *testing.T) {
	r := newRig(t, "", WithAPIKeys("k-one"))
	for _, c := range []struct {
		auth string
		want int
	}{
		{"Bearer k-one", http.StatusOK},
		{"bearer k-one", http.StatusOK},
		{"BEARER k-one", http.StatusOK},
		{"Basic k-one", http.StatusUnauthorized},
		{"Bearer k-two", http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"k-one", http.StatusUnauthorized},
	} {
		resp, body := r.rawStream(streamBody("primary"), "Authorization", c.auth)
		require.Equal(t, c.want, resp.StatusCode, "%q: %s", c.auth, body)
	}
}

// TestDefaultDeadlinesBoundASilentUpstream: a policy without deadlines
// still has a first-content and a gap deadline in the gateway (the
// defaults, shortened here), so an upstream that sends its headers and
// then stays silent, before or after its first content, is failed over or
// ended instead of holding the client until it gives up. A deadline the
// file gives wins over the default.
func TestDefaultDeadlinesBoundASilentUpstream(t *testing.T) {
	first, gap := defaultFirstContent, defaultGap
	// A second, not less: under -race on a loaded machine the backup's own
	// first content once took longer than 300 ms, and timed out too.
	defaultFirstContent, defaultGap = time.Second, time.Second
	t.Cleanup(func() { defaultFirstContent, defaultGap = first, gap })
	silent := make(chan struct{})
	defer close(silent)
	rules := `"rules": [{"when": {"class": ["timeout"]}, "action": "switch", "model": "backup"}]`
	for _, c := range []struct {
		name, policy string
		a            act
		want         string // the text the client gets
		failover     bool   // answered by the backup
	}{
		{"silent before the first content", rules, act{preamble: true, beforeText: silent, chunks: []string{"never"}}, "backup", true},
		{"silent after the first content", rules, act{chunks: []string{"Par"}, afterText: silent}, "Par", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, c.policy)
			r.up["primary"].play(c.a)
			r.up["backup"].play(act{chunks: []string{"backup"}})
			// A guard against a hang (the test's failure), not a timing assertion.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			text, err := r.streamText(ctx, "primary")
			require.NoError(t, ctx.Err(), "the client was held by a silent upstream")
			require.Equal(t, c.want, text)
			if c.failover {
				require.NoError(t, err)
			} else {
				require.Error(t, err, "a stream cut by the gap deadline ends with an in-band error")
			}
		})
	}
	t.Run("the file's own deadline wins", func(t *testing.T) {
		defaultFirstContent = time.Hour
		r := newRig(t, rules+`, "deadlines": {"first_content": "1s"}`)
		r.up["primary"].play(act{preamble: true, beforeText: silent, chunks: []string{"never"}})
		r.up["backup"].play(act{chunks: []string{"backup"}})
		got := r.stream("primary")
		require.NoError(t, got.err)
		require.Equal(t, map[string]bool{"backup": true}, got.models)
	})
}
