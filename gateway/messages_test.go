package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/policy"
)

// The tests of POST /v1/messages run an anthropic-sdk-go client against
// the gateway, over loopback upstreams that speak Anthropic's Messages API
// (serveAnthropic, or a recorded transcript) or OpenAI's Chat Completions.

func msgParams(model string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 256,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Capital of France?"))}}
}

// anthStreamed is what an anthropic-sdk-go client read from a stream.
type anthStreamed struct {
	msg       anthropic.Message // accumulated
	text      string
	events    []string // event types, in order
	err       error
	accumErr  error
	sawStop   bool
	startedAs string // message_start's model
}

func (r *rig) anthStream(p anthropic.MessageNewParams, opts ...aoption.RequestOption) anthStreamed {
	r.t.Helper()
	s := r.anth.Messages.NewStreaming(context.Background(), p, opts...)
	defer s.Close()
	var out anthStreamed
	var b strings.Builder
	for s.Next() {
		ev := s.Current()
		out.events = append(out.events, ev.Type)
		if out.accumErr == nil {
			out.accumErr = out.msg.Accumulate(ev)
		}
		switch ev.Type {
		case "message_start":
			out.startedAs = string(ev.Message.Model)
		case "content_block_delta":
			b.WriteString(ev.Delta.Text)
		case "message_stop":
			out.sawStop = true
		}
	}
	out.text, out.err = b.String(), s.Err()
	return out
}

// anthHealthy is healthy for the Messages door: a plain non-streaming
// request right after a fault succeeds.
func (r *rig) anthHealthy() {
	r.t.Helper()
	for _, u := range r.up {
		u.play(act{chunks: []string{"fine"}})
	}
	m, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
	require.NoError(r.t, err, "the gateway is not healthy after the fault")
	require.Equal(r.t, "fine", m.Content[0].Text)
	require.Equal(r.t, "primary", string(m.Model))
	for _, u := range r.up {
		u.reset()
	}
}

// rawMessages posts body to /v1/messages and returns the raw answer.
func (r *rig) rawMessages(body string, hdr ...string) (*http.Response, string) {
	r.t.Helper()
	return r.rawPost("/v1/messages", body, hdr...)
}

// metricsText returns the gateway's /metrics page.
func (r *rig) metricsText() string {
	r.t.Helper()
	resp, err := r.hc.Get(r.srv.URL + "/metrics")
	require.NoError(r.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(r.t, err)
	return string(b)
}

// streamsNow reads the inflight_streams gauge.
func (m *metrics) streamsNow() float64 {
	var pb dto.Metric
	if m.streams.Write(&pb) != nil {
		return -1
	}
	return pb.GetGauge().GetValue()
}

// sseEvents splits an SSE body into (event name, data) pairs.
func sseEvents(body string) (names, data []string) {
	for _, block := range strings.Split(body, "\n\n") {
		var name, d string
		for _, line := range strings.Split(block, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				d = v
			}
		}
		if name != "" || d != "" {
			names, data = append(names, name), append(data, d)
		}
	}
	return names, data
}

var allAnthropic = []string{"primary", "backup", "third"}

func TestMessagesStreamAndCallThroughAnthropicClient(t *testing.T) {
	r := newRigOf(t, "", allAnthropic)
	r.up["primary"].play(act{chunks: []string{"Paris", " is the capital."}})
	got := r.anthStream(msgParams("primary"))
	require.NoError(t, got.err)
	require.NoError(t, got.accumErr)
	require.True(t, got.sawStop)
	require.Equal(t, "Paris is the capital.", got.text)
	require.Equal(t, "primary", got.startedAs, "the model is the route that answered")
	require.Equal(t, "primary", string(got.msg.Model))
	require.Equal(t, anthropic.StopReasonEndTurn, got.msg.StopReason)
	require.Len(t, got.msg.Content, 1)
	require.Equal(t, "Paris is the capital.", got.msg.Content[0].Text)
	u := got.msg.Usage // the upstream's counts, as it sent them
	require.EqualValues(t, 25, u.InputTokens)
	require.EqualValues(t, 100, u.CacheReadInputTokens)
	require.EqualValues(t, 10, u.CacheCreationInputTokens)
	require.EqualValues(t, 2, u.OutputTokens)
	require.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}, got.events)

	r.up["primary"].play(act{chunks: []string{"Paris."}, finish: "max_tokens"})
	var raw *http.Response
	m, err := r.anth.Messages.New(context.Background(), msgParams("primary"), aoption.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Equal(t, "primary", string(m.Model))
	require.Equal(t, "message", string(m.Type))
	require.Equal(t, "assistant", string(m.Role))
	require.Len(t, m.Content, 1)
	require.Equal(t, "text", m.Content[0].Type)
	require.Equal(t, "Paris.", m.Content[0].Text)
	require.Equal(t, anthropic.StopReasonMaxTokens, m.StopReason)
	require.EqualValues(t, 25, m.Usage.InputTokens)
	require.EqualValues(t, 1, m.Usage.OutputTokens)
	require.True(t, strings.HasPrefix(m.ID, "msg_"), m.ID)
	require.Equal(t, "primary", raw.Header.Get("X-Retryhost-Model"))
	require.Equal(t, "up-primary", raw.Header.Get("X-Retryhost-Upstream-Model"))
	require.Equal(t, m.ID, raw.Header.Get("X-Request-Id"))

	hits := r.up["primary"].requests()
	require.Len(t, hits, 2)
	require.Equal(t, "/v1/messages", hits[0].path)
	require.Equal(t, `"up-primary"`, string(hits[0].body["model"]), "the upstream gets its own model id")
	require.Equal(t, `true`, string(hits[1].body["stream"]), "the gateway always streams upstream")
}

// Every failure before the first content part fails over where the
// client cannot see it, whichever API the backup speaks.
func TestMessagesFailuresBeforeCommitAreInvisible(t *testing.T) {
	for _, backup := range []string{"anthropic", "openai"} {
		t.Run("backup "+backup, func(t *testing.T) {
			kinds := []string{"primary"}
			if backup == "anthropic" {
				kinds = allAnthropic
			}
			r := newRigOf(t, "", kinds)
			for _, c := range []struct {
				name string
				a    act
			}{
				{"500", act{status: 500}},
				{"529 overloaded", act{status: 529}},
				{"connection reset at once", act{cut: true}},
				{"overloaded error event before content", act{errorEvent: "Overloaded"}},
				{"ended without message_stop before content", act{noFinish: true}},
				{"a declared refusal", act{refusal: "no"}},
			} {
				t.Run(c.name, func(t *testing.T) {
					r.up["primary"].reset()
					r.up["backup"].reset()
					r.up["primary"].play(c.a)
					r.up["backup"].play(act{preamble: true, chunks: []string{"Paris", "."}})
					got := r.anthStream(msgParams("primary"))
					require.NoError(t, got.err)
					require.NoError(t, got.accumErr)
					require.Equal(t, "Paris.", got.text)
					require.Equal(t, "backup", string(got.msg.Model))
					require.Equal(t, anthropic.StopReasonEndTurn, got.msg.StopReason)
					require.EqualValues(t, 2, got.msg.Usage.OutputTokens)
					require.Len(t, r.up["primary"].requests(), 1)
					require.Len(t, r.up["backup"].requests(), 1)
					r.anthHealthy()
				})
			}
		})
	}
}

// A failure after commit ends the stream with Anthropic's in-band error
// event and no message_stop: the SDK's stream reports an error, never a
// clean end.
func TestMessagesFailureAfterCommitIsInBand(t *testing.T) {
	r := newRigOf(t, "", allAnthropic)
	for _, c := range []struct {
		name, typ string
		a         act
	}{
		{"connection reset", "api_error", act{chunks: []string{"Par"}, cut: true}},
		{"overloaded error event", "overloaded_error", act{chunks: []string{"Par"}, errorEvent: "Overloaded"}},
		{"ended without message_stop", "api_error", act{chunks: []string{"Par"}, noFinish: true}},
		{"stream idle past the gap deadline", "timeout_error", act{chunks: []string{"Par"}, afterText: make(chan struct{})}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r.up["primary"].play(c.a)
			got := r.anthStream(msgParams("primary"))
			require.Error(t, got.err, "a truncated answer must not read as complete")
			var apiErr *anthropic.Error
			require.ErrorAs(t, got.err, &apiErr)
			require.EqualValues(t, c.typ, apiErr.Type())
			require.False(t, got.sawStop)
			require.Equal(t, "Par", got.text)
			require.Empty(t, r.up["backup"].requests(), "nothing is re-run after commit")

			r.up["primary"].play(c.a)
			resp, body := r.rawMessages(`{"model":"primary","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
			names, data := sseEvents(body)
			require.NotContains(t, names, "message_stop")
			require.NotContains(t, names, "message_delta")
			require.Equal(t, "error", names[len(names)-1], body)
			var last struct {
				Type  string
				Error struct{ Type, Message string }
			}
			require.NoError(t, json.Unmarshal([]byte(data[len(data)-1]), &last), body)
			require.Equal(t, "error", last.Type)
			require.Equal(t, c.typ, last.Error.Type, body)
			require.Contains(t, body, `"text_delta","text":"Par"`)
			require.Contains(t, r.logs.String(), `"outcome":"truncated"`)
			r.anthHealthy()
		})
	}
}

// 429: the Retry-After is honoured before the same model is tried again;
// when the policy gives up, the client gets the 429 with the Retry-After,
// as Anthropic's error.
func TestMessagesRateLimit(t *testing.T) {
	t.Parallel()
	r := newRigOf(t, "", allAnthropic)
	r.up["primary"].play(act{status: 429, header: http.Header{"Retry-After": {"1"}}}, act{chunks: []string{"ok"}})
	got := r.anthStream(msgParams("primary"))
	require.NoError(t, got.err)
	hits := r.up["primary"].requests()
	require.Len(t, hits, 2)
	require.GreaterOrEqual(t, hits[1].at.Sub(hits[0].at), 950*time.Millisecond, "the retry came before the Retry-After")
	require.Empty(t, r.up["backup"].requests())

	r2 := newRigOf(t, `"rules": []`, allAnthropic)
	r2.up["primary"].play(act{status: 429, header: http.Header{"Retry-After": {"7"}}})
	_, err := r2.anth.Messages.New(context.Background(), msgParams("primary"))
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)
	require.EqualValues(t, "rate_limit_error", apiErr.Type())
	require.Equal(t, "7", apiErr.Response.Header.Get("Retry-After"))
	require.Len(t, r2.up["primary"].requests(), 1)
}

// A 400 is returned as the upstream sent it (an Anthropic error body byte
// for byte; an OpenAI upstream's in Anthropic's shape), with no retry and
// no fail-over, not even to the request's fallbacks.
func TestMessagesBadRequestReturnedAsIs(t *testing.T) {
	r := newRigOf(t, "", []string{"primary", "backup"})
	const body = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"},"request_id":"req_011"}`
	r.up["primary"].play(act{status: 400, body: body})
	resp, out := r.rawMessages(`{"model":"primary","max_tokens":10,"fallbacks":["backup"],"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, body, out)
	require.Len(t, r.up["primary"].requests(), 1)
	require.Empty(t, r.up["backup"].requests())
	_, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.EqualValues(t, "invalid_request_error", apiErr.Type())
	require.Contains(t, apiErr.Error(), "prompt is too long")

	// An OpenAI upstream's 400 reaches an Anthropic client in Anthropic's shape.
	r.up["third"].play(act{status: 400, body: `{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`})
	resp, out = r.rawMessages(`{"model":"third","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.JSONEq(t, `{"type":"error","error":{"type":"invalid_request_error","message":"Invalid value for 'temperature'"}}`, out)
	r.anthHealthy()
}

// Every field of a Messages request reaches an Anthropic upstream as the
// client sent it (the gateway's own fields excepted).
func TestMessagesUnmodeledFieldsForwardedUnchanged(t *testing.T) {
	r := newRigOf(t, "", allAnthropic)
	body := `{"model":"primary","stream":true,"fallbacks":["backup"],"max_tokens":777,
		"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":[{"type":"text","text":"What is in"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]},
			{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"sig=="},{"type":"tool_use","id":"toolu_1","name":"look","input":{"q":1}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"a cat"}],"is_error":false}]}],
		"tools":[{"name":"look","description":"Look.","input_schema":{"type":"object","properties":{"q":{"type":"integer"}}},"cache_control":{"type":"ephemeral"}},
			{"type":"web_search_20250305","name":"web_search","max_uses":2}],
		"tool_choice":{"type":"auto","disable_parallel_tool_use":true},
		"metadata":{"user_id":"u-1"},"thinking":{"type":"enabled","budget_tokens":1024},
		"stop_sequences":["\n\nHuman:"],"temperature":0.25,"top_k":5,"top_p":0.5,"service_tier":"auto",
		"x-vendor.ext":{"deep":[1,2.50,"three",null]}}`
	resp, out := r.rawMessages(body, "x-api-key", "client-key", "anthropic-beta", "interleaved-thinking-2025-05-14")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	got := r.up["primary"].requests()[0]
	require.Equal(t, "interleaved-thinking-2025-05-14", got.header.Get("Anthropic-Beta"), "the beta the fields need")
	require.NotContains(t, got.header.Get("X-Api-Key")+got.header.Get("Authorization"), "client-key", "the client's key is not the upstream's")
	var sent map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &sent))
	for k := range sent {
		switch k {
		case "model", "stream", "fallbacks":
			continue
		}
		require.Contains(t, got.body, k)
		require.JSONEq(t, string(sent[k]), string(got.body[k]), k)
	}
	require.NotContains(t, got.body, "fallbacks")
	require.NotContains(t, string(got.raw), "fallbacks")
	require.Equal(t, `"up-primary"`, string(got.body["model"]))
	require.Equal(t, `true`, string(got.body["stream"]))
}

// The request's own fallbacks run, in order, when its route fails; the
// answer names the route that answered.
func TestMessagesFallbacks(t *testing.T) {
	r := newRigOf(t, `"rules": []`, allAnthropic)
	r.up["primary"].play(act{status: 503})
	r.up["backup"].play(act{status: 500})
	r.up["third"].play(act{chunks: []string{"third answers"}})
	p := msgParams("primary")
	got := r.anthStream(p, aoption.WithJSONSet("fallbacks", []string{"backup", "third"}))
	require.NoError(t, got.err)
	require.Equal(t, "third answers", got.text)
	require.Equal(t, "third", string(got.msg.Model))
	for _, n := range []string{"primary", "backup", "third"} {
		require.Len(t, r.up[n].requests(), 1, n)
		require.NotContains(t, r.up[n].requests()[0].body, "fallbacks")
	}
	// "fallbacks": [] is accepted; an unknown one is a 404 in Anthropic's shape.
	r.up["primary"].play(act{chunks: []string{"ok"}})
	_, err := r.anth.Messages.New(context.Background(), p, aoption.WithJSONSet("fallbacks", []string{}))
	require.NoError(t, err)
	_, err = r.anth.Messages.New(context.Background(), p, aoption.WithJSONSet("fallbacks", []string{"nope"}))
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	require.EqualValues(t, "not_found_error", apiErr.Type())
}

// Client keys: x-api-key (what Anthropic clients send) and Authorization:
// Bearer both work on /v1/messages; anything else is a 401 in Anthropic's
// shape.
func TestMessagesAPIKeys(t *testing.T) {
	r := newRigOf(t, "", allAnthropic, WithAPIKeys("k-one", "k-two"))
	for _, key := range []string{"k-one", "k-two"} {
		c := r.newAnthropicClient(key)
		_, err := c.Messages.New(context.Background(), msgParams("primary"))
		require.NoError(t, err, key)
	}
	c := r.newAnthropicClient("wrong")
	_, err := c.Messages.New(context.Background(), msgParams("primary"))
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
	require.EqualValues(t, "authentication_error", apiErr.Type())
	resp, out := r.rawMessages(`{"model":"primary","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "Authorization", "Bearer k-two")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	resp, out = r.rawMessages(`{"model":"primary","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.JSONEq(t, `{"type":"error","error":{"type":"authentication_error","message":"retryhost gateway: missing or invalid API key"}}`, out)
	require.Len(t, r.up["primary"].requests(), 3, "refused requests reach no upstream")
}

func TestMessagesRequestErrors(t *testing.T) {
	r := newRigOf(t, "", allAnthropic)
	for _, c := range []struct {
		body, typ string
		status    int
	}{
		{`{"model":"nope","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "not_found_error", 404},
		{`{"model":"primary","max_tokens":5,"messages":[]}`, "invalid_request_error", 400},
		{`{"model":"primary","max_tokens":5,"messages":[{"role":"system","content":"hi"}]}`, "invalid_request_error", 400},
		{`{"model":"primary","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`, "invalid_request_error", 400},
		{`{"model":"primary","system":7,"messages":[{"role":"user","content":"hi"}]}`, "invalid_request_error", 400},
		{`{"model":"primary","messages":[{"role":"user","content":[{"type":"tool_result"}]}]}`, "invalid_request_error", 400},
		{`{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "invalid_request_error", 400},
		{`[1,2]`, "invalid_request_error", 400},
	} {
		resp, out := r.rawMessages(c.body)
		require.Equal(t, c.status, resp.StatusCode, c.body)
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		require.NoError(t, json.Unmarshal([]byte(out), &e), out)
		require.Equal(t, "error", e.Type, out)
		require.Equal(t, c.typ, e.Error.Type, c.body)
		require.NotEmpty(t, e.Error.Message)
	}
	resp, out := r.rawMessages("")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, out)
	req, _ := http.NewRequest(http.MethodGet, r.srv.URL+"/v1/messages", nil)
	res, err := r.hc.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
	for _, u := range r.up {
		require.Empty(t, u.requests(), "a bad request reaches no upstream")
	}
}

// Limits, metrics and logs are the chat door's: a body over the cap is a
// 413 and a full gateway a 429 with Retry-After, each in Anthropic's
// shape; requests are counted by route; the access log has no text.
func TestMessagesLimitsMetricsAndLogs(t *testing.T) {
	r := newRigOf(t, "", allAnthropic, WithMaxBodyBytes(256), WithMaxConcurrent(1))
	resp, out := r.rawMessages(`{"model":"primary","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("x", 300) + `"}]}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Contains(t, out, `"type":"request_too_large"`)

	hold := make(chan struct{})
	r.up["primary"].play(act{hold: hold, chunks: []string{"SECRET-OUTPUT"}})
	done := make(chan anthStreamed, 1)
	go func() {
		done <- r.anthStream(anthropic.MessageNewParams{Model: "primary", MaxTokens: 5,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("SECRET-PROMPT"))}})
	}()
	require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 5*time.Second, time.Millisecond)
	_, err := r.anth.Messages.New(context.Background(), msgParams("backup"))
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)
	require.EqualValues(t, "rate_limit_error", apiErr.Type())
	require.NotEmpty(t, apiErr.Response.Header.Get("Retry-After"))
	require.Empty(t, r.up["backup"].requests())
	close(hold)
	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, "SECRET-OUTPUT", got.text)

	// The stream's client has its end before the gateway closes the
	// request: its count and log line follow.
	var mb string
	require.Eventually(t, func() bool {
		mb = r.metricsText()
		return strings.Contains(mb, `retryhost_gateway_requests_total{code="200",outcome="ok",route="primary"} 1`)
	}, 10*time.Second, time.Millisecond)
	logs := r.logs.String()
	require.Contains(t, logs, `"path":"/v1/messages"`)
	require.Contains(t, logs, `"id":"msg_rh`)
	require.NotContains(t, logs, "SECRET")
	require.Contains(t, mb, `retryhost_gateway_requests_total{code="429",outcome="rejected",route=""} 1`)
}

// Shutdown ends a /v1/messages stream in flight past the drain deadline
// with the in-band error (overloaded_error) and no message_stop.
func TestMessagesShutdownEndsStreamsInBand(t *testing.T) {
	r := newRigOf(t, "", allAnthropic)
	hold := make(chan struct{})
	defer close(hold)
	r.up["primary"].play(act{chunks: []string{"Par"}, afterText: hold})
	done := make(chan anthStreamed, 1)
	go func() { done <- r.anthStream(msgParams("primary")) }()
	require.Eventually(t, func() bool { return r.gw.metrics.streamsNow() == 1 }, 5*time.Second, time.Millisecond,
		"the stream is committed and relayed")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, r.gw.Shutdown(ctx), context.DeadlineExceeded)
	got := <-done
	var apiErr *anthropic.Error
	require.ErrorAs(t, got.err, &apiErr)
	require.EqualValues(t, "overloaded_error", apiErr.Type())
	require.False(t, got.sawStop)
	require.Equal(t, "Par", got.text)
	resp, out := r.rawMessages(`{"model":"primary","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Contains(t, out, `"type":"overloaded_error"`)
}

// A reload takes effect on /v1/messages too: a new route is served.
func TestMessagesAfterReload(t *testing.T) {
	r := newRigOf(t, "", allAnthropic)
	_, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
	require.NoError(t, err)
	require.NoError(t, r.gw.Reload(context.Background()))
	m, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
	require.NoError(t, err)
	require.Equal(t, "primary", string(m.Model))
	require.EqualValues(t, 1, r.gw.stats.reloads.Load())
}

// Non-streaming: a committed answer that fails is a 502 api_error (the
// client saw nothing), and a request the policy's budget ends a 504
// timeout_error, never a truncated message.
func TestMessagesNonStreamingFailures(t *testing.T) {
	r := newRigOf(t, `"rules": [{"when": {"class": ["timeout"]}, "action": "retry", "attempts": 100}],
		"deadlines": {"first_content": "300ms", "budget": "1s"}`, allAnthropic)
	r.up["primary"].play(act{chunks: []string{"Par"}, cut: true})
	_, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadGateway, apiErr.StatusCode)
	require.EqualValues(t, "api_error", apiErr.Type())

	silent := make(chan struct{})
	defer close(silent)
	r.up["primary"].play(act{beforeText: silent, chunks: []string{"never"}})
	_, err = r.anth.Messages.New(context.Background(), msgParams("primary"))
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusGatewayTimeout, apiErr.StatusCode)
	require.EqualValues(t, "timeout_error", apiErr.Type())
	require.Contains(t, apiErr.Error(), "total")
	r.anthHealthy()
}

// An Anthropic client lists the routes in Anthropic's shape.
func TestMessagesModelsList(t *testing.T) {
	r := newRigOf(t, "", allAnthropic)
	page, err := r.anth.Models.List(context.Background(), anthropic.ModelListParams{})
	require.NoError(t, err)
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
		require.EqualValues(t, "model", m.Type)
	}
	require.Equal(t, []string{"backup", "primary", "third"}, ids)
	require.False(t, page.HasMore)
	require.Equal(t, "backup", page.FirstID)
	require.Equal(t, "third", page.LastID)
	// An OpenAI client still gets OpenAI's shape.
	list, err := r.client.Models.List(context.Background())
	require.NoError(t, err)
	require.Equal(t, "list", string(list.Object))
	require.Len(t, list.Data, 3)
}

// BenchmarkStreamMessages measures one streamed answer of 100 text deltas
// on /v1/messages, read by a plain HTTP client: direct from an Anthropic
// upstream, through the gateway to it, and through the gateway to an
// OpenAI upstream (the cross-API path).
// go test ./gateway -run '^$' -bench StreamMessages -benchmem
func BenchmarkStreamMessages(b *testing.B) {
	chunks := make([]string, 100)
	for i := range chunks {
		chunks[i] = "word "
	}
	anth, oai := newUpstream("primary", act{chunks: chunks}), newUpstream("backup", act{chunks: chunks})
	defer anth.srv.Close()
	defer oai.srv.Close()
	pol := `{"models": [{"name": "primary", "provider": "anthropic", "model": "m", "base_url": "` + anth.srv.URL + `", "api_key_env": "K"},
		{"name": "backup", "provider": "openai", "model": "m", "base_url": "` + oai.url() + `", "api_key_env": "K"}]}`
	gw, err := New(context.Background(), Bytes("bench", []byte(pol), policy.Options{Getenv: func(string) string { return "k" }}))
	require.NoError(b, err)
	defer gw.Close(context.Background())
	srv := newTestServer(b, gw)
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	for _, c := range []struct{ name, url, route string }{
		{"direct", anth.srv.URL + "/v1/messages", "primary"},
		{"gateway", srv.URL + "/v1/messages", "primary"},
		{"gateway-from-openai", srv.URL + "/v1/messages", "backup"},
	} {
		body := `{"model":"` + c.route + `","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := hc.Post(c.url, "application/json", strings.NewReader(body))
				require.NoError(b, err)
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				require.Equal(b, http.StatusOK, resp.StatusCode)
				require.NotZero(b, n)
			}
		})
	}
}

// max_tokens is required by Anthropic's API, and a positive integer: the
// Messages door refuses a request without one (or with null, a
// non-integer, 0 or less) with a 400 in Anthropic's shape and words,
// whichever API the route's upstream speaks, and reaches no upstream.
func TestMessagesMaxTokensRequired(t *testing.T) {
	r := newRigOf(t, `"rules": []`, []string{"primary"}) // backup speaks OpenAI's API
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		name, field, msg string
	}{
		{"missing", ``, "max_tokens: Field required"},
		{"null", `"max_tokens":null,`, "max_tokens: Field required"},
		{"zero", `"max_tokens":0,`, "max_tokens: Input should be greater than or equal to 1"},
		{"negative", `"max_tokens":-1,`, "max_tokens: Input should be greater than or equal to 1"},
		{"a fraction", `"max_tokens":5.5,`, "max_tokens: Input should be a valid integer"},
		{"a string", `"max_tokens":"5",`, "max_tokens: Input should be a valid integer"},
		{"a bool", `"max_tokens":true,`, "max_tokens: Input should be a valid integer"},
		{"too large for an int", `"max_tokens":1e400,`, "max_tokens: Input should be a valid integer"},
	} {
		for _, model := range []string{"primary", "backup"} {
			for _, stream := range []string{"true", "false"} {
				body := `{"model":"` + model + `",` + c.field + `"stream":` + stream + `,` + msgs + `}`
				resp, out := r.rawMessages(body, "anthropic-version", "2023-06-01")
				require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", c.name, out)
				require.JSONEq(t, `{"type":"error","error":{"type":"invalid_request_error","message":`+strconv.Quote(c.msg)+`}}`, out, c.name)
			}
		}
	}
	for _, u := range r.up {
		require.Empty(t, u.requests(), "a request without a valid max_tokens reaches no upstream")
	}

	// anthropic-sdk-go always sends max_tokens (a required field): 0 is refused
	// as Anthropic refuses it, 1 is the least it takes.
	for _, model := range []string{"primary", "backup"} {
		p := msgParams(model)
		p.MaxTokens = 0
		_, err := r.anth.Messages.New(context.Background(), p)
		var apiErr *anthropic.Error
		require.ErrorAs(t, err, &apiErr, model)
		require.Equal(t, http.StatusBadRequest, apiErr.StatusCode, model)
		require.EqualValues(t, "invalid_request_error", apiErr.Type(), model)
		require.Contains(t, apiErr.Error(), "max_tokens: Input should be greater than or equal to 1", model)
		require.Empty(t, r.up[model].requests(), model)

		p.MaxTokens = 1
		m, err := r.anth.Messages.New(context.Background(), p)
		require.NoError(t, err, model)
		require.Equal(t, "ok", m.Content[0].Text, model)
		hits := r.up[model].requests()
		require.Len(t, hits, 1, model)
		key := "max_tokens"
		if model == "backup" {
			key = "max_completion_tokens" // what the OpenAI adapter sends for it
		}
		require.JSONEq(t, `1`, string(hits[0].body[key]), "%s: %s", model, hits[0].raw)
	}
}

// A request in one of Anthropic's message threads (the conversation the
// server holds between turns) is refused on every route, before any
// upstream: the thread is the one account's that answered its last turn,
// which a fail-over would not reach. The error's details carry the code
// on which Anthropic's SDKs send the turn again whole, unthreaded; a null
// thread is no thread.
func TestMessages_RefusesAThreadWithTheCodeSDKsReplayOn(t *testing.T) {
	r := newRigOf(t, `"rules": []`, []string{"primary"})
	r.up["primary"].play(act{chunks: []string{"Paris."}})
	for _, thread := range []string{`{"type":"create"}`, `{"type":"continue","previous_message_id":"msg_1"}`} {
		resp, body := r.rawMessages(`{"model":"primary","max_tokens":16,"thread":` + thread + `,"messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
		var env struct {
			Type  string
			Error struct {
				Type, Message string
				Details       struct {
					ErrorCode   string   `json:"error_code"`
					Unsupported []string `json:"unsupported"`
				}
			}
		}
		require.NoError(t, json.Unmarshal([]byte(body), &env), body)
		require.Equal(t, "invalid_request_error", env.Error.Type)
		require.Equal(t, "thread_unsupported_request", env.Error.Details.ErrorCode)
		require.Equal(t, []string{"thread"}, env.Error.Details.Unsupported)
		require.Contains(t, env.Error.Message, "whole history")
	}
	require.Empty(t, r.up["primary"].requests())
	resp, body := r.rawMessages(`{"model":"primary","max_tokens":16,"thread":null,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
}
