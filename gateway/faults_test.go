package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"
)

// Every failure before the first content part fails over where the client
// cannot see it: the client gets the backup's answer alone, on a 200.
func TestFailuresBeforeCommitAreInvisible(t *testing.T) {
	r := newRig(t, "")
	for _, c := range []struct {
		name string
		a    act
	}{
		{"500", act{status: 500}},
		{"503 overloaded", act{status: 503}},
		{"connection reset after the preamble", act{preamble: true, cut: true}},
		{"connection reset at once", act{cut: true}},
		{"in-stream error event before content", act{preamble: true, errorEvent: "boom"}},
		{"ended without finish or [DONE] before content", act{preamble: true, noFinish: true}},
		{"a declared refusal", act{preamble: true, refusal: "I can't help with that."}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r.up["primary"].reset()
			r.up["backup"].reset()
			r.up["primary"].play(c.a)
			r.up["backup"].play(act{preamble: true, chunks: []string{"Paris", "."}})
			got := r.stream("primary")
			require.NoError(t, got.err)
			require.Equal(t, "Paris.", got.text)
			require.Equal(t, map[string]bool{"backup": true}, got.models)
			require.Len(t, r.up["primary"].requests(), 1)
			require.Len(t, r.up["backup"].requests(), 1)
			r.healthy()
		})
	}
}

// Nothing, not even the status line, reaches the client before the first
// content part: while the upstream holds it back after its preamble, the
// client has no response at all.
func TestNothingOnTheWireBeforeFirstContent(t *testing.T) {
	r := newRig(t, "")
	release := make(chan struct{})
	r.up["primary"].play(act{preamble: true, beforeText: release, chunks: []string{"late"}})
	type result struct {
		resp *http.Response
		err  error
	}
	got := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, r.srv.URL+"/v1/chat/completions", strings.NewReader(streamBody("primary")))
		resp, err := r.hc.Do(req)
		got <- result{resp, err}
	}()
	require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(100 * time.Millisecond) // the preamble has reached the gateway (no assertion on time)
	select {
	case res := <-got:
		t.Fatalf("the client got a response before the first content: %v %v", res.resp, res.err)
	default:
	}
	close(release)
	res := <-got
	require.NoError(t, res.err)
	defer res.resp.Body.Close()
	require.Equal(t, http.StatusOK, res.resp.StatusCode)
	require.Equal(t, "primary", res.resp.Header.Get("X-Retryhost-Model"))
	require.Equal(t, "up-primary", res.resp.Header.Get("X-Retryhost-Upstream-Model"))
	require.Equal(t, "1", res.resp.Header.Get("X-Retryhost-Attempts"))
}

// A failure after commit ends the stream with an in-band error event and
// no [DONE]; the client's SDK reports an error, never a complete answer.
func TestFailureAfterCommitIsInBand(t *testing.T) {
	r := newRig(t, "")
	for _, c := range []struct {
		name string
		a    act
		code string
	}{
		{"connection reset", act{preamble: true, chunks: []string{"Par"}, cut: true}, "stream_failed"},
		{"in-stream error event", act{chunks: []string{"Par"}, errorEvent: "overloaded"}, "stream_failed"},
		{"ended without finish or [DONE]", act{chunks: []string{"Par"}, noFinish: true}, "stream_failed"},
		{"stream idle past the gap deadline", act{chunks: []string{"Par"}, afterText: make(chan struct{})}, "gap"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r.up["primary"].play(c.a)
			got := r.stream("primary")
			require.Error(t, got.err, "a truncated answer must not read as complete")
			require.Equal(t, "Par", got.text)
			require.Empty(t, r.up["backup"].requests(), "nothing is re-run after commit")

			r.up["primary"].play(c.a)
			resp, body := r.rawStream(streamBody("primary"))
			require.Equal(t, http.StatusOK, resp.StatusCode)
			ev := events(body)
			require.NotContains(t, ev, "[DONE]")
			var last struct {
				Error struct{ Type, Code, Message string } `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(ev[len(ev)-1]), &last), body)
			require.Equal(t, c.code, last.Error.Code, body)
			require.Contains(t, ev[0], `"content":"Par"`)
			require.Contains(t, r.logs.String(), `"outcome":"truncated"`)
			r.healthy()
		})
	}
}

// A 400 (a content-policy rejection among them) is returned as the
// upstream sent it: no retry, no fail-over, not even to the request's own
// fallbacks, and never resent to the same model.
func TestBadRequestReturnedAsIs(t *testing.T) {
	r := newRig(t, `"rules": [
		{"when": {"status_range": [500, 599]}, "action": "switch", "model": "backup"},
		{"when": {"retryable": true}, "action": "retry", "attempts": 3},
		{"when": {"class": ["network", "timeout"]}, "action": "switch", "model": "backup"}
	]`)
	const body = `{"error":{"message":"Your request was rejected as a result of our safety system.","type":"invalid_request_error","param":"prompt","code":"content_policy_violation"}}`
	r.up["primary"].play(act{status: 400, body: body})
	for _, extra := range []string{``, `,"fallbacks":["third"]`} {
		resp, out := r.rawStream(`{"model":"primary","stream":true,"messages":[{"role":"user","content":"hi"}]` + extra + `}`)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.JSONEq(t, body, out)
		require.Len(t, r.up["primary"].requests(), 1, "a 400 is never resent to the same model")
		require.Empty(t, r.up["backup"].requests())
		require.Empty(t, r.up["third"].requests())
		r.up["primary"].reset()
	}
	r.up["primary"].play(act{status: 400, body: body})
	_, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	var apiErr *oai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.Equal(t, "content_policy_violation", apiErr.Code)
	r.healthy()
}

// 429: Retry-After in seconds, milliseconds or as a date is honoured before
// the same model is tried again.
func TestRateLimitHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		header func() http.Header
		wait   time.Duration
	}{
		{"seconds", func() http.Header { return http.Header{"Retry-After": {"1"}} }, time.Second},
		{"milliseconds", func() http.Header { return http.Header{"Retry-After-Ms": {"700"}} }, 700 * time.Millisecond},
		{"date", func() http.Header { // whole seconds: at least 2 s from now
			return http.Header{"Retry-After": {time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)}}
		}, 2 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, "")
			r.up["primary"].play(act{status: 429, header: c.header()}, act{chunks: []string{"ok"}})
			got := r.stream("primary")
			require.NoError(t, got.err)
			hits := r.up["primary"].requests()
			require.Len(t, hits, 2)
			require.GreaterOrEqual(t, hits[1].at.Sub(hits[0].at), c.wait-50*time.Millisecond,
				"the retry came before the Retry-After")
			require.Empty(t, r.up["backup"].requests())
			r.healthy()
		})
	}
}

// 429 without Retry-After: backoff with jitter, never a burst (at most 2
// attempts in any 1.5 s, 4 in any 3 s on one model), a bounded number of
// attempts, then the backup.
func TestRateLimitBackoffNeverBursts(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.backsOffThenBackup()
	r.healthy()
}

// Bounded waits: a silent upstream (no headers) and a slow first token each
// fail over to the backup.
func TestDeadlinesFailOver(t *testing.T) {
	r := newRig(t, "", WithUpstreamHeaderTimeout(300*time.Millisecond))
	for _, c := range []struct {
		name string
		a    act
	}{
		{"no response headers", act{holdFor: time.Minute}},
		{"a slow first token", act{preamble: true, slowFirst: time.Minute, chunks: []string{"late"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r.up["primary"].play(c.a)
			r.up["backup"].play(act{chunks: []string{"on time"}})
			got := r.stream("primary")
			require.NoError(t, got.err)
			require.Equal(t, "on time", got.text)
			r.healthy()
		})
	}
}

// Malformed upstream events are skipped and counted; the answer is intact.
func TestMalformedEventsSkipped(t *testing.T) {
	r := newRig(t, "")
	r.up["primary"].play(act{preamble: true, malformed: 2, chunks: []string{"Par", "is"}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Paris", got.text)
	require.EqualValues(t, 4, r.gw.MalformedEvents())
	require.Empty(t, r.up["backup"].requests())
	r.healthy()
}

// Line endings other than LF (which SSE allows) reach the client as a
// normal stream, malformed events among them still skipped.
func TestUpstreamLineEndings(t *testing.T) {
	r := newRig(t, "")
	for _, eol := range []string{"\r", "\r\n"} {
		r.up["primary"].play(act{eol: eol, malformed: 1, chunks: []string{"Par", "is"}})
		got := r.stream("primary")
		require.NoError(t, got.err, "%q", eol)
		require.Equal(t, "Paris", got.text, "%q", eol)
	}
	require.EqualValues(t, 4, r.gw.MalformedEvents())
	require.Empty(t, r.up["backup"].requests())
}

// Per-request fallbacks run, in order, when the route's policy request fails.
func TestPerRequestFallbacks(t *testing.T) {
	r := newRig(t, `"rules": []`)
	r.up["primary"].play(act{status: 503})
	r.up["backup"].play(act{status: 500})
	r.up["third"].play(act{chunks: []string{"third answers"}})
	resp, body := r.rawStream(`{"model":"primary","stream":true,"fallbacks":["backup","third"],"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "third", resp.Header.Get("X-Retryhost-Model"))
	require.Equal(t, "3", resp.Header.Get("X-Retryhost-Attempts"), "the chain's attempts, all of them")
	require.Contains(t, body, `"model":"third"`)
	require.Len(t, r.up["primary"].requests(), 1)
	require.Len(t, r.up["backup"].requests(), 1)
	for _, h := range r.up["third"].requests() {
		require.NotContains(t, h.body, "fallbacks")
	}
	// A move on to the request's own fallbacks has failed over as much as
	// one the policy's rules switch: failovers_total counts each move, by
	// the model moved to, beside the rules' switches.
	wants := []string{
		`retryhost_gateway_failovers_total{to="backup"} 1`,
		`retryhost_gateway_failovers_total{to="third"} 1`,
		`retryhost_gateway_commits_total{model="third"} 1`,
		`retryhost_gateway_requests_total{code="200",outcome="ok",route="primary"} 1`,
	}
	var text string
	require.Eventually(t, func() bool {
		text = r.metricsText()
		for _, w := range wants {
			if !strings.Contains(text, w) {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	for _, w := range wants {
		require.Contains(t, text, w)
	}
	r.healthy()
	// The upstream refusing the gateway's own credentials moves on too.
	r.up["primary"].play(act{status: 401})
	r.up["backup"].play(act{chunks: []string{"backup answers"}})
	resp, body = r.rawStream(`{"model":"primary","stream":true,"fallbacks":["backup"],"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "backup", resp.Header.Get("X-Retryhost-Model"))
	// Without fallbacks, the route's failure is the answer: a 502.
	r.up["primary"].play(act{status: 503})
	resp, body = r.rawStream(streamBody("primary"))
	require.Equal(t, http.StatusBadGateway, resp.StatusCode, body)
	r.healthy()
}

// An upstream that answers a stream with a 200 and a JSON error object
// instead of events (some OpenAI-compatible servers do) is failed over
// like a server error; when every model does, the client's 502 carries
// the last upstream's own message, not a truncated stream's.
func TestUpstreamJSONErrorIn200(t *testing.T) {
	r := newRigOf(t, "", []string{"backup"})
	openaiErr := func(msg string) string { return `{"error":{"message":"` + msg + `","type":"server_error"}}` }
	r.up["primary"].play(act{status: http.StatusOK, body: openaiErr("primary overloaded")})
	r.up["backup"].play(act{chunks: []string{"backup answers"}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "backup answers", got.text)
	require.Len(t, r.up["primary"].requests(), 1)

	for _, backup := range []string{
		openaiErr("backup overloaded"),
		`{"type":"error","error":{"type":"overloaded_error","message":"backup overloaded"}}`,
	} {
		r.up["primary"].play(act{status: http.StatusOK, body: openaiErr("primary overloaded")})
		r.up["backup"].play(act{status: http.StatusOK, body: backup})
		got = r.stream("primary")
		var apiErr *oai.Error
		require.ErrorAs(t, got.err, &apiErr)
		require.Equal(t, http.StatusBadGateway, apiErr.StatusCode)
		require.Contains(t, apiErr.Message, "backup overloaded", "the last upstream's own message")
		require.NotContains(t, apiErr.Message, "stream ended before the provider finished it")
	}
	r.healthy()
}

// The same under text/event-stream: an upstream that answers a stream
// with a 200 event stream whose body is a JSON error object (bare,
// pretty-printed, or as its first line before events), OpenAI's or
// Anthropic's, is failed over before commit; when every model does, the
// client's 502 carries the last upstream's own message.
func TestUpstreamJSONErrorIn200EventStream(t *testing.T) {
	const sse = "text/event-stream; charset=utf-8"
	openaiErr := func(msg string) string {
		return `{"error":{"message":"` + msg + `","type":"server_error","code":null}}`
	}
	anthErr := func(msg string) string {
		return `{"type":"error","error":{"type":"overloaded_error","message":"` + msg + `"}}`
	}
	for _, tc := range []struct {
		name     string
		backupIs []string // the routes speaking Anthropic's API
		body     func(msg string) string
	}{
		{"openai, bare", nil, openaiErr},
		{"openai, pretty", nil, func(msg string) string {
			return "{\n  \"error\": {\n    \"message\": \"" + msg + "\",\n    \"type\": \"server_error\"\n  }\n}\n"
		}},
		{"openai, first line", nil, func(msg string) string { return openaiErr(msg) + "\n\ndata: [DONE]\n\n" }},
		{"anthropic, bare", []string{"backup"}, anthErr},
		{"anthropic, first line", []string{"backup"}, func(msg string) string {
			return anthErr(msg) + "\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRigOf(t, "", tc.backupIs)
			r.up["primary"].play(act{status: http.StatusOK, ctype: sse, body: openaiErr("primary overloaded")})
			r.up["backup"].play(act{chunks: []string{"backup answers"}})
			got := r.stream("primary")
			require.NoError(t, got.err)
			require.Equal(t, "backup answers", got.text)
			require.Len(t, r.up["primary"].requests(), 1)

			r.up["backup"].play(act{status: http.StatusOK, ctype: sse, body: tc.body("backup overloaded")})
			got = r.stream("primary")
			var apiErr *oai.Error
			require.ErrorAs(t, got.err, &apiErr)
			require.Equal(t, http.StatusBadGateway, apiErr.StatusCode)
			require.Contains(t, apiErr.Message, "backup overloaded", "the last upstream's own message")
			require.NotContains(t, apiErr.Message, "stream ended before the provider finished it")
			r.healthy()
		})
	}
}

// Shutdown drains: a stream in flight past the drain deadline ends with
// the in-band error and no [DONE]; new requests and /readyz get 503.
func TestShutdownEndsInFlightStreamsInBand(t *testing.T) {
	r := newRig(t, "")
	hold := make(chan struct{})
	defer close(hold)
	r.up["primary"].play(act{chunks: []string{"Par"}, afterText: hold})
	done := make(chan string, 1)
	go func() {
		_, body := r.rawStream(streamBody("primary"))
		done <- body
	}()
	require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, r.gw.Shutdown(ctx), context.DeadlineExceeded)
	body := <-done
	ev := events(body)
	require.NotContains(t, ev, "[DONE]")
	require.Contains(t, ev[len(ev)-1], "shutting_down")

	resp, _ := r.rawStream(streamBody("primary"))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	rz, err := r.hc.Get(r.srv.URL + "/readyz")
	require.NoError(t, err)
	rz.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, rz.StatusCode)
}

// A drain whose streams all finish in time ends none of them.
func TestShutdownWaitsForStreams(t *testing.T) {
	r := newRig(t, "")
	r.up["primary"].play(act{chunks: []string{"a", "b", "c"}, gap: 50 * time.Millisecond})
	done := make(chan streamed, 1)
	go func() { done <- r.stream("primary") }()
	require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, r.gw.Shutdown(context.Background()))
	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, "abc", got.text)
}

// During an outage, once the primary cools down, requests go straight to
// the fallback without waiting on the dead primary; after the cooldown a
// probe finds it healthy and it serves again.
func TestOutageCooldownAndRecovery(t *testing.T) {
	r := newRig(t, `"rules": [{"when": {"status_range": [500, 599]}, "action": "switch", "model": "backup"}],
		"cooldown": {"failures": 2, "for": "400ms"}`)
	r.skipsDeadPrimary(5, 2)

	r.primaryRecovers()
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, map[string]bool{"primary": true}, got.models)
}

// skipsDeadPrimary makes the primary answer 503 and the backup stream,
// sends n requests, and requires each served by the backup while the
// primary saw only its first tries: after them the cooldown skips it.
func (r *rig) skipsDeadPrimary(n, tries int) {
	r.t.Helper()
	r.up["primary"].play(act{status: 503})
	r.up["backup"].play(act{chunks: []string{"backup"}})
	for i := range n {
		got := r.stream("primary")
		require.NoError(r.t, got.err, "request %d", i)
		require.Equal(r.t, map[string]bool{"backup": true}, got.models, "request %d", i)
	}
	require.Len(r.t, r.up["primary"].requests(), tries, "after %d failures the dead primary is skipped", tries)
	require.Len(r.t, r.up["backup"].requests(), n)
}

// primaryRecovers makes the primary answer again and requires that a
// request is served by it once its cooldown has ended (a guard of 30 s
// against a hang, not a timing assertion).
func (r *rig) primaryRecovers() {
	r.t.Helper()
	r.up["primary"].play(act{chunks: []string{"primary"}})
	require.Eventually(r.t, func() bool {
		got := r.stream("primary")
		require.NoError(r.t, got.err)
		return got.models["primary"]
	}, 30*time.Second, 50*time.Millisecond, "the recovered primary is used again")
}

// Upstreams that stay silent never hold the client past the policy's
// budget: it gets a 504 (streaming or not), and the gateway stays healthy.
func TestSilentUpstreamsBoundedByBudget(t *testing.T) {
	r := newRig(t, `"rules": [{"when": {"class": ["timeout"]}, "action": "retry", "attempts": 100}],
		"deadlines": {"first_content": "300ms", "budget": "1s"}, "backoff": {"delay": "50ms"}`)
	silent := make(chan struct{})
	defer close(silent)
	for _, u := range r.up {
		u.play(act{preamble: true, beforeText: silent, chunks: []string{"never"}})
	}
	resp, body := r.rawStream(streamBody("primary"))
	require.Equal(t, http.StatusGatewayTimeout, resp.StatusCode, body)
	require.Contains(t, body, `"type":"timeout"`)
	require.Contains(t, body, `"code":"total"`, "the budget ended it")
	_, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	var apiErr *oai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusGatewayTimeout, apiErr.StatusCode)
	r.healthy()
}

// An upstream's response headers are bounded (upstreamMaxHeaderBytes, not
// net/http's 10 MiB): past the cap the attempt fails over, streamed or
// not, while headers under it are served.
func TestUpstreamResponseHeadersBounded(t *testing.T) {
	r := newRig(t, "")
	big := func(n int) http.Header { return http.Header{"X-Big": {strings.Repeat("h", n)}} }
	for _, stream := range []bool{true, false} {
		r.up["primary"].reset()
		r.up["backup"].reset()
		r.up["primary"].play(act{header: big(upstreamMaxHeaderBytes + 1024), preamble: true, chunks: []string{"from primary"}})
		r.up["backup"].play(act{preamble: true, chunks: []string{"from backup"}})
		if stream {
			got := r.stream("primary")
			require.NoError(t, got.err)
			require.Equal(t, "from backup", got.text)
		} else {
			cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
			require.NoError(t, err)
			require.Equal(t, "from backup", cc.Choices[0].Message.Content)
			require.Equal(t, "backup", cc.Model)
		}
		require.Len(t, r.up["primary"].requests(), 1, "stream %t", stream)
	}
	r.up["primary"].play(act{header: big(upstreamMaxHeaderBytes / 2), preamble: true, chunks: []string{"from primary"}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "from primary", got.text, "headers under the cap are served")
	r.healthy()
}
