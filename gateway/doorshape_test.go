package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"
)

// openAIShape reports whether body is an OpenAI error object:
// {"error": {"message": non-empty, "type": a string, …}} and no Anthropic
// envelope ("type": "error" at the top).
func openAIShape(body string) error {
	var e struct {
		Type  *string `json:"type"`
		Error *struct {
			Message string  `json:"message"`
			Type    *string `json:"type"`
		} `json:"error"`
	}
	switch {
	case json.Unmarshal([]byte(body), &e) != nil:
		return errors.New("not JSON")
	case e.Type != nil:
		return errors.New(`an Anthropic envelope ("type" at the top)`)
	case e.Error == nil || e.Error.Message == "" || e.Error.Type == nil:
		return errors.New("no error object with a message and a type")
	}
	return nil
}

// anthropicShape reports whether body is an Anthropic error object:
// {"type": "error", "error": {"type": non-empty, "message": non-empty}}.
func anthropicShape(body string) error {
	var e struct {
		Type  string `json:"type"`
		Error *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	switch {
	case json.Unmarshal([]byte(body), &e) != nil:
		return errors.New("not JSON")
	case e.Type != "error":
		return errors.New(`no "type": "error" at the top`)
	case e.Error == nil || e.Error.Type == "" || e.Error.Message == "":
		return errors.New("no error object with a type and a message")
	}
	return nil
}

// inBandError is the data of the first SSE event of body that carries an
// error ("" if none).
func inBandError(body string) string {
	for _, d := range events(body) {
		if strings.Contains(d, `"error"`) {
			return d
		}
	}
	return ""
}

// A client answers in its own door's error shape whatever API the upstream
// speaks: on /v1/chat/completions over Anthropic upstreams and on
// /v1/messages over OpenAI-compatible ones, for every fault class, before
// the commit (an HTTP error) and after it (an in-band error event); the
// door's own SDK reads each as an API error with a message.
func TestErrorsInTheDoorsShapeAcrossFormats(t *testing.T) {
	anthropicBody := func(typ, msg string) string {
		return `{"type":"error","error":{"type":"` + typ + `","message":"` + msg + `"}}`
	}
	openaiBody := func(typ, code, msg string) string {
		return `{"error":{"message":"` + msg + `","type":"` + typ + `","param":null,"code":"` + code + `"}}`
	}
	both := func(a act) []act { return []act{a, a, a, a} } // every attempt on both upstreams
	type fault struct {
		name   string
		acts   []act // each upstream's answers
		status int   // the client's status; 200: an in-band error after content
	}
	faults := map[string][]fault{
		"chat over anthropic": {
			{"400 invalid request", both(act{status: 400, body: anthropicBody("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")}), 400},
			{"401 authentication", both(act{status: 401, body: anthropicBody("authentication_error", "invalid x-api-key")}), 0},
			{"404 model not found", both(act{status: 404, body: anthropicBody("not_found_error", "model: nope")}), 404},
			{"429 rate limit", both(act{status: 429, body: anthropicBody("rate_limit_error", "slow down")}), 429},
			{"500 api error", both(act{status: 500, body: anthropicBody("api_error", "internal")}), 0},
			{"529 overloaded", both(act{status: 529, body: anthropicBody("overloaded_error", "Overloaded")}), 0},
			{"connection reset", both(act{cut: true}), 0},
			{"error event after content", []act{{chunks: []string{"The capital "}, errorEvent: "Overloaded"}}, 200},
			{"cut after content", []act{{chunks: []string{"The capital "}, cut: true}}, 200},
		},
		"messages over openai": {
			{"400 context length", both(act{status: 400, body: openaiBody("invalid_request_error", "context_length_exceeded", "too long")}), 400},
			{"401 authentication", both(act{status: 401, body: openaiBody("invalid_request_error", "invalid_api_key", "bad key")}), 0},
			{"404 model not found", both(act{status: 404, body: openaiBody("invalid_request_error", "model_not_found", "no such model")}), 404},
			{"429 rate limit", both(act{status: 429, body: openaiBody("requests", "rate_limit_exceeded", "slow down")}), 429},
			{"500 server error", both(act{status: 500, body: openaiBody("server_error", "", "internal")}), 0},
			{"503 unavailable", both(act{status: 503}), 0},
			{"connection reset", both(act{cut: true}), 0},
			{"error event after content", []act{{preamble: true, chunks: []string{"The capital "}, errorEvent: "overloaded"}}, 200},
			{"cut after content", []act{{preamble: true, chunks: []string{"The capital "}, cut: true}}, 200},
		},
	}
	for door, fs := range faults {
		for _, f := range fs {
			t.Run(door+"/"+f.name, func(t *testing.T) {
				var anth []string
				if door == "chat over anthropic" {
					anth = []string{"primary", "backup"}
				}
				r := newPassRig(t, "", anth)
				play := func() {
					r.up["primary"].play(f.acts...)
					r.up["backup"].play(f.acts...)
				}
				play()
				var resp *http.Response
				var body string
				shape := openAIShape
				if door == "chat over anthropic" {
					resp, body = r.rawStream(streamBody("any-model"))
				} else {
					shape = anthropicShape
					resp, body = r.rawMessages(`{"model":"any-model","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
				}
				if f.status == 200 {
					require.Equal(t, http.StatusOK, resp.StatusCode)
					ev := inBandError(body)
					require.NotEmpty(t, ev, "an in-band error event:\n%s", body)
					require.NoError(t, shape(ev), "in-band: %s", ev)
				} else {
					require.GreaterOrEqual(t, resp.StatusCode, 400, body)
					if f.status != 0 {
						require.Equal(t, f.status, resp.StatusCode, body)
					}
					require.NoError(t, shape(body), "%d: %s", resp.StatusCode, body)
				}

				// The door's SDK reads it as an API error with a message.
				play()
				if door == "chat over anthropic" {
					got := r.chatSaw("any-model")
					var apiErr *oai.Error
					if f.status == 200 {
						require.Error(t, got.err)
						return
					}
					require.ErrorAs(t, got.err, &apiErr)
					require.Equal(t, resp.StatusCode, apiErr.StatusCode)
					require.NotEmpty(t, apiErr.Message)
					require.NotEmpty(t, apiErr.Type)
					return
				}
				got := r.messagesSaw("any-model")
				var apiErr *anthropic.Error
				require.ErrorAs(t, got.err, &apiErr, "%v", got.err)
				if f.status != 200 {
					require.Equal(t, resp.StatusCode, apiErr.StatusCode)
				}
				require.NotEmpty(t, apiErr.Message)
			})
		}
	}
}

// The responses door answers an Anthropic upstream's rejection in OpenAI's
// error shape too, with its status and message.
func TestResponsesErrorFromAnthropicUpstreamInOpenAIShape(t *testing.T) {
	r := newPassRig(t, "", []string{"primary", "backup"})
	body := `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}`
	r.up["primary"].play(act{status: 400, body: body})
	r.up["backup"].play(act{status: 400, body: body})
	resp, out := r.rawPost("/v1/responses", `{"model":"any-model","input":"hi","stream":true}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, out)
	require.NoError(t, openAIShape(out), out)
	require.Contains(t, out, "prompt is too long")
}
