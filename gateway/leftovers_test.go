package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// TestStreamOptionsOnlyWithStream: stream_options on a request that does
// not stream (stream false or absent) is a 400 invalid_request_error with
// param "stream_options", as OpenAI's API answers, and reaches no
// upstream; a null stream_options, which OpenAI accepts, is accepted.
func TestStreamOptionsOnlyWithStream(t *testing.T) {
	r := newRig(t, "")
	const msg = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"stream false", `{"model":"primary","stream":false,"stream_options":{"include_usage":true},` + msg + `}`, http.StatusBadRequest},
		{"stream absent", `{"model":"primary","stream_options":{"include_usage":true},` + msg + `}`, http.StatusBadRequest},
		{"stream null", `{"model":"primary","stream":null,"stream_options":{},` + msg + `}`, http.StatusBadRequest},
		{"empty object", `{"model":"primary","stream_options":{},` + msg + `}`, http.StatusBadRequest},
		{"null without stream", `{"model":"primary","stream_options":null,` + msg + `}`, http.StatusOK},
		{"null with stream false", `{"model":"primary","stream":false,"stream_options":null,` + msg + `}`, http.StatusOK},
		{"with stream", `{"model":"primary","stream":true,"stream_options":{"include_usage":true},` + msg + `}`, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, u := range r.up {
				u.reset()
			}
			resp, body := r.rawPost("/v1/chat/completions", tc.body)
			require.Equal(t, tc.status, resp.StatusCode, body)
			if tc.status == http.StatusOK {
				return
			}
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &e), body)
			require.Equal(t, "invalid_request_error", e.Error.Type)
			require.Equal(t, "The 'stream_options' parameter is only allowed when 'stream' is enabled.", e.Error.Message)
			require.NotNil(t, e.Error.Param)
			require.Equal(t, "stream_options", *e.Error.Param)
			for _, u := range r.up {
				require.Empty(t, u.requests(), "a refused request reaches no upstream")
			}
		})
	}
}

// TestUncleanPathServedAsItsCleanForm: a path with a doubled slash or dot
// segments (a base URL with a trailing slash, joined by hand) is served as
// its clean form, not answered with ServeMux's 307 redirect, which
// clients do not follow with a POST body; an unknown path stays a 404 in
// the door's error shape.
func TestUncleanPathServedAsItsCleanForm(t *testing.T) {
	r := newRig(t, "")
	noFollow := &http.Client{Transport: r.hc.Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	const chat = `{"model":"primary","messages":[{"role":"user","content":"hi"}]}`
	const msgs = `{"model":"primary","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		want                     string // in the body
	}{
		{"double slash first", "POST", "//v1/chat/completions", chat, nil, 200, `"content":"ok"`},
		{"double slash inside", "POST", "/v1//chat/completions", chat, nil, 200, `"content":"ok"`},
		{"dot segment", "POST", "/v1/./chat/completions", chat, nil, 200, `"content":"ok"`},
		{"dot-dot segment", "POST", "/v1/x/../chat/completions", chat, nil, 200, `"content":"ok"`},
		{"messages door", "POST", "//v1/messages", msgs, []string{"anthropic-version", "2023-06-01"}, 200, `"text":"ok"`},
		{"models", "GET", "//v1/models", "", nil, 200, `"id":"primary"`},
		{"unknown, OpenAI shape", "POST", "//v1/nope", chat, nil, 404, `"code":"not_found"`},
		{"unknown, Anthropic shape", "POST", "//v1/messages/nope", msgs, []string{"anthropic-version", "2023-06-01"}, 404, `"type":"not_found_error"`},
		{"trailing slash", "POST", "/v1/chat/completions/", chat, nil, 404, `"code":"not_found"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, r.srv.URL+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			require.Equal(t, tc.path, req.URL.EscapedPath(), "the client sends the path as written")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer client-key")
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				req.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			resp, err := noFollow.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode, "%s %s", resp.Header.Get("Location"), b)
			require.Contains(t, string(b), tc.want)
		})
	}
}

// TestMessagesParallelToolCallsDoNotOverlap: parallel tool calls from an
// OpenAI-compatible model (whose argument deltas may interleave by index)
// reach a /v1/messages client as blocks one after the other, as
// Anthropic's API streams them (content_block_start … _stop before the
// next start), each with its whole input, in the order the calls began;
// anthropic-sdk-go accumulates the same message.
func TestMessagesParallelToolCallsDoNotOverlap(t *testing.T) {
	r := newRigOf(t, `"rules": []`, nil)
	chunk := func(delta, finish string) string {
		return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":` + delta +
			`,"finish_reason":` + finish + `}]}` + "\n\n"
	}
	start := func(i, id, name string) string {
		return chunk(`{"tool_calls":[{"index":`+i+`,"id":"`+id+`","type":"function","function":{"name":"`+name+`","arguments":""}}]}`, "null")
	}
	args := func(i, a string) string {
		b, _ := json.Marshal(a)
		return chunk(`{"tool_calls":[{"index":`+i+`,"function":{"arguments":`+string(b)+`}}]}`, "null")
	}
	end := chunk(`{}`, `"tool_calls"`) + "data: [DONE]\n\n"
	type tool struct{ id, name, input string }
	ab := []tool{{"call_a", "f", `{"x":1,"y":"a"}`}, {"call_b", "g", `{"z":[2,3]}`}}
	for _, tc := range []struct {
		name, body string
		text       string
		tools      []tool
	}{
		{"interleaved", start("0", "call_a", "f") + start("1", "call_b", "g") + args("0", `{"x":1,`) + args("1", `{"z":`) +
			args("0", `"y":"a"}`) + args("1", `[2,3]}`) + end, "", ab},
		{"one after the other", start("0", "call_a", "f") + args("0", `{"x":1,`) + args("0", `"y":"a"}`) +
			start("1", "call_b", "g") + args("1", `{"z":`) + args("1", `[2,3]}`) + end, "", ab},
		{"both in one chunk", chunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":"{\"x\":1,"}},`+
			`{"index":1,"id":"call_b","type":"function","function":{"name":"g","arguments":"{\"z\":"}}]}`, "null") +
			args("1", `[2,3]}`) + args("0", `"y":"a"}`) + end, "", ab},
		{"text, then three tools, text between", chunk(`{"role":"assistant","content":"Checking."}`, "null") +
			start("0", "call_a", "f") + start("1", "call_b", "g") + args("1", `{"z":[2,3]}`) +
			chunk(`{"content":" More."}`, "null") + start("2", "call_c", "h") + args("0", `{"x":1,"y":"a"}`) + end,
			"Checking. More.", append(ab[:2:2], tool{"call_c", "h", `{}`})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.up["primary"].play(act{status: http.StatusOK, ctype: "text/event-stream", body: tc.body})
			resp, out := r.rawMessages(`{"model":"primary","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, http.StatusOK, resp.StatusCode, out)
			names, data := sseEvents(out)
			open, next := -1, 0
			var got []tool
			var text strings.Builder
			for i, n := range names {
				var ev struct {
					Index        int
					ContentBlock struct{ Type, ID, Name string } `json:"content_block"`
					Delta        struct {
						Type, Text  string
						PartialJSON string `json:"partial_json"`
					}
				}
				require.NoError(t, json.Unmarshal([]byte(data[i]), &ev), data[i])
				switch n {
				case "content_block_start":
					require.Equal(t, -1, open, "block %d opens while block %d is open:\n%s", ev.Index, open, out)
					require.Equal(t, next, ev.Index, out)
					open, next = ev.Index, next+1
					if ev.ContentBlock.Type == "tool_use" {
						got = append(got, tool{id: ev.ContentBlock.ID, name: ev.ContentBlock.Name})
					}
				case "content_block_delta":
					require.Equal(t, open, ev.Index, "a delta of a block not open:\n%s", out)
					switch ev.Delta.Type {
					case "input_json_delta":
						got[len(got)-1].input += ev.Delta.PartialJSON
					case "text_delta":
						text.WriteString(ev.Delta.Text)
					}
				case "content_block_stop":
					require.Equal(t, open, ev.Index, out)
					open = -1
				}
			}
			require.Equal(t, -1, open, out)
			for i := range got {
				if got[i].input == "" { // no delta: the start's input, {}
					got[i].input = "{}"
				}
			}
			require.Equal(t, tc.tools, got, out)
			require.Equal(t, tc.text, text.String())

			r.up["primary"].play(act{status: http.StatusOK, ctype: "text/event-stream", body: tc.body})
			s := r.anthStream(msgParams("primary"))
			require.NoError(t, s.err)
			require.NoError(t, s.accumErr)
			var acc []tool
			for _, b := range s.msg.Content {
				if b.Type == "tool_use" {
					acc = append(acc, tool{b.ID, b.Name, string(b.Input)})
				}
			}
			require.Equal(t, tc.tools, acc)
			require.Equal(t, "tool_use", string(s.msg.StopReason))
		})
	}
}

// TestMessagesHeldBlocksBounded: the blocks held back behind an open
// tool_use block (text an OpenAI-compatible model sends while a tool
// call's input is open) are held up to maxWaiting; past it they go out at
// once, beside the tool_use block, whole, rather than grow: the stream
// stays one anthropic-sdk-go accumulates.
func TestMessagesHeldBlocksBounded(t *testing.T) {
	const mib = 1 << 20
	chunk := strings.Repeat("t", mib)
	parts := []abi.Part{{Kind: abi.KindToolInputStart, ID: "call_a", Tool: &abi.ToolInfo{Name: "f"}},
		{Kind: abi.KindToolInputDelta, ID: "call_a", Delta: `{"x":`}}
	for range maxWaiting/mib + 1 {
		parts = append(parts, abi.Part{Kind: abi.KindTextDelta, ID: "text", Delta: chunk})
	}
	parts = append(parts, abi.Part{Kind: abi.KindToolInputDelta, ID: "call_a", Delta: `1}`},
		abi.Part{Kind: abi.KindTextEnd, ID: "text"}, abi.Part{Kind: abi.KindToolInputEnd, ID: "call_a"},
		abi.Part{Kind: abi.KindToolCall, ID: "call_a", Tool: &abi.ToolInfo{Name: "f", Input: `{"x":1}`}},
		abi.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonToolCalls}}})

	enc := &messagesEncoder{id: "msg_rh1", model: "route"}
	var out []byte
	for i := range parts {
		out = enc.appendPart(out, &parts[i])
		if i == 1+maxWaiting/mib { // maxWaiting held: nothing of the text out yet
			require.NotContains(t, string(out), "text_delta")
			require.Equal(t, maxWaiting, enc.waitingBytes)
		}
	}
	require.Empty(t, enc.waiting)
	msg := accumulated(t, out)
	require.Len(t, msg.Content, 2)
	require.Equal(t, "tool_use", msg.Content[0].Type)
	require.JSONEq(t, `{"x":1}`, string(msg.Content[0].Input))
	require.Equal(t, "text", msg.Content[1].Type)
	require.Len(t, msg.Content[1].Text, (maxWaiting/mib+1)*mib)
	checkEncoded(t, parts)
}

// TestMessagesHeldWholeToolCallsBounded: tool calls that come whole (an
// adapter's tool-call part, not deltas) while a tool_use block is open are
// held under the same bound as deltas: past maxWaiting they go out at once.
func TestMessagesHeldWholeToolCallsBounded(t *testing.T) {
	const mib = 1 << 20
	input := `{"x":"` + strings.Repeat("t", mib) + `"}`
	parts := []abi.Part{{Kind: abi.KindToolInputStart, ID: "call_a", Tool: &abi.ToolInfo{Name: "f"}},
		{Kind: abi.KindToolInputDelta, ID: "call_a", Delta: `{"x":`}}
	n := maxWaiting/len(input) + 1
	for i := range n {
		parts = append(parts, abi.Part{Kind: abi.KindToolCall, ID: fmt.Sprintf("call_%d", i), Tool: &abi.ToolInfo{Name: "g", Input: input}})
	}
	parts = append(parts, abi.Part{Kind: abi.KindToolInputDelta, ID: "call_a", Delta: `1}`},
		abi.Part{Kind: abi.KindToolInputEnd, ID: "call_a"},
		abi.Part{Kind: abi.KindToolCall, ID: "call_a", Tool: &abi.ToolInfo{Name: "f", Input: `{"x":1}`}},
		abi.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonToolCalls}}})

	enc := &messagesEncoder{id: "msg_rh1", model: "route"}
	var out []byte
	for i := range parts {
		out = enc.appendPart(out, &parts[i])
		require.LessOrEqual(t, enc.waitingBytes, maxWaiting, "part %d", i)
	}
	require.True(t, enc.overlap, "the bound was passed")
	require.Empty(t, enc.waiting)
	msg := accumulated(t, out)
	require.Len(t, msg.Content, n+1)
	require.JSONEq(t, `{"x":1}`, string(msg.Content[0].Input))
	for _, c := range msg.Content[1:] {
		require.JSONEq(t, input, string(c.Input))
	}
}

// TestFailClosedPluginIsPluginFailed: a request a fail-closed plugin
// failed is the gateway's own failure, not an upstream's: on the chat door
// a 502 with type server_error and code plugin_failed (it was
// upstream_error/upstream_failed, which sent an operator to the upstream),
// streamed or not; on /v1/messages Anthropic's api_error (its shape has no
// code) whose message names the plugin.
func TestFailClosedPluginIsPluginFailed(t *testing.T) {
	r := newRig(t, `"rules": [], "transforms": [{"plugin": {"path": "../host/testdata/trap.wasm", "fail": "closed"}}]`)
	for _, stream := range []bool{true, false} {
		r.up["primary"].play(act{chunks: []string{"Paris"}})
		body := `{"model":"primary","messages":[{"role":"user","content":"hi"}]}`
		if stream {
			body = streamBody("primary")
		}
		resp, out := r.rawStream(body)
		require.Equal(t, http.StatusBadGateway, resp.StatusCode, out)
		var e struct {
			Error struct{ Message, Type, Code string }
		}
		require.NoError(t, json.Unmarshal([]byte(out), &e), out)
		require.Equal(t, "plugin_failed", e.Error.Code, out)
		require.Equal(t, "server_error", e.Error.Type, out)
		require.Contains(t, e.Error.Message, "transform trap.wasm failed")
	}
	r.up["primary"].play(act{chunks: []string{"Paris"}})
	resp, out := r.rawMessages(`{"model":"primary","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusBadGateway, resp.StatusCode, out)
	var a struct {
		Type  string
		Error struct{ Type, Message string }
	}
	require.NoError(t, json.Unmarshal([]byte(out), &a), out)
	require.Equal(t, "error", a.Type)
	require.Equal(t, "api_error", a.Error.Type)
	require.Contains(t, a.Error.Message, "transform trap.wasm failed")
	// The access log and requests_total say it too: outcome plugin_failed
	// (it was upstream_error), for each of the three requests.
	require.Eventually(t, func() bool { return len(accessRecords(t, r.logs.String())) == 3 }, 10*time.Second, time.Millisecond)
	for _, rec := range accessRecords(t, r.logs.String()) {
		require.Equal(t, "plugin_failed", rec["outcome"], rec)
		require.Equal(t, "plugin", rec["error_class"], rec)
		require.EqualValues(t, http.StatusBadGateway, rec["status"], rec)
	}
	require.Contains(t, r.metricsText(), `retryhost_gateway_requests_total{code="502",outcome="plugin_failed",route="primary"} 3`)
}

// accessRecords returns the access log's records ("msg":"request") among
// the JSON lines of logs.
func accessRecords(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		if rec["msg"] == "request" {
			recs = append(recs, rec)
		}
	}
	return recs
}

// TestFailClosedPluginAfterCommitIsPluginFailed: a fail-closed plugin that
// fails after the answer started (boom.wasm traps on the text "boom") ends
// the stream with the in-band error coded plugin_failed, not
// stream_failed, on the chat door, and Anthropic's api_error naming the
// plugin on /v1/messages.
func TestFailClosedPluginAfterCommitIsPluginFailed(t *testing.T) {
	r := newRig(t, `"rules": [], "transforms": [{"plugin": {"path": "../host/testdata/boom.wasm", "fail": "closed"}}]`)
	r.up["primary"].play(act{chunks: []string{"Paris", "boom"}})
	resp, out := r.rawStream(streamBody("primary"))
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	ev := events(out)
	require.NotEmpty(t, ev)
	last := ev[len(ev)-1]
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	require.NoError(t, json.Unmarshal([]byte(last), &e), out)
	require.Equal(t, "plugin_failed", e.Error.Code, out)
	require.Equal(t, "server_error", e.Error.Type, out)
	require.Contains(t, e.Error.Message, "boom.wasm")
	require.Contains(t, out, `"content":"Paris"`, "it failed after commit")

	r.up["primary"].play(act{chunks: []string{"Paris", "boom"}})
	resp, out = r.rawMessages(`{"model":"primary","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	names, data := sseEvents(out)
	require.Equal(t, "error", names[len(names)-1], out)
	require.Contains(t, data[len(data)-1], `"type":"api_error"`)
	require.Contains(t, data[len(data)-1], "boom.wasm")
	// The access log says plugin_failed after commit too (it was
	// truncated, the outcome of an upstream's stream cut), for both.
	require.Eventually(t, func() bool { return len(accessRecords(t, r.logs.String())) == 2 }, 10*time.Second, time.Millisecond)
	for _, rec := range accessRecords(t, r.logs.String()) {
		require.Equal(t, "plugin_failed", rec["outcome"], rec)
		require.Equal(t, "plugin", rec["error_class"], rec)
		require.EqualValues(t, http.StatusOK, rec["status"], rec)
	}
}

// failingStream replays parts, then fails with err.
type failingStream struct {
	parts []abi.Part
	err   error
}

func (s *failingStream) Recv() (abi.Part, error) {
	if len(s.parts) == 0 {
		return abi.Part{}, s.err
	}
	p := s.parts[0]
	s.parts = s.parts[1:]
	return p, nil
}

func (s *failingStream) Close() error { return nil }

// TestCollectFailureLogsWhatTheClientGot: a non-streaming answer whose
// stream fails while it is collected is answered with a whole error
// (never a short 200), and its access-log line (and requests_total) says
// that answer: a 503 shutdown during a drain, the 502 plugin_failed or
// upstream_error the client was sent, 499 client_closed when it left. It
// was logged as truncated whatever the client got: a shutdown's 503 read
// as an upstream's cut. The driver's replay of an answer held to its end
// does not fail today, so collect is driven here with a stream that does.
func TestCollectFailureLogsWhatTheClientGot(t *testing.T) {
	text := []abi.Part{{Kind: abi.KindTextStart, ID: "t"}, {Kind: abi.KindTextDelta, ID: "t", Delta: "Par"}}
	for _, tc := range []struct {
		name    string
		cause   error // the request's context ends with it; nil: it does not end
		err     error // what the stream fails with
		status  int
		outcome string
		code    string // the error code the client gets; "" for no answer
	}{
		{"gateway shutting down", ErrShuttingDown, fmt.Errorf("read: %w", ErrShuttingDown), http.StatusServiceUnavailable, "shutdown", "shutting_down"},
		{"fail-closed plugin", nil, &abi.TransformError{Transform: "boom.wasm", Class: abi.ClassPlugin, Message: "trap"}, http.StatusBadGateway, "plugin_failed", "plugin_failed"},
		{"upstream cut", nil, errors.New("connection reset by peer"), http.StatusBadGateway, "upstream_error", "upstream_failed"},
		{"client gone", context.Canceled, context.Canceled, 499, "client_closed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, "")
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			if tc.cause != nil {
				cancel(tc.cause)
			}
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			w := httptest.NewRecorder()
			l := accessLog{id: "chatcmpl-x", route: "primary", start: time.Now()}
			s := &failingStream{parts: text, err: tc.err}
			r.gw.collect(ctx, w, chatDoor{}, &l, s, chatDoor{}.encoder(l.id, "primary", &chatRequest{}))
			r.gw.logAccess(ctx, req, &l, nil)

			recs := accessRecords(t, r.logs.String())
			require.Len(t, recs, 1)
			require.Equal(t, tc.outcome, recs[0]["outcome"], recs[0])
			require.EqualValues(t, tc.status, recs[0]["status"], recs[0])
			if tc.code == "" {
				require.Empty(t, w.Body.String(), "nobody to answer")
				return
			}
			require.Equal(t, tc.status, w.Code, "the log says the status the client got")
			var e struct{ Error struct{ Code string } }
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &e), w.Body.String())
			require.Equal(t, tc.code, e.Error.Code, w.Body.String())
			require.Contains(t, r.metricsText(), fmt.Sprintf(`retryhost_gateway_requests_total{code="%d",outcome=%q,route="primary"} 1`, tc.status, tc.outcome))
		})
	}
}
