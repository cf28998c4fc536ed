package gateway

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMistypedFieldNamesTheFieldInJSONTerms: a request whose field has the
// wrong JSON type is a 400 that names the field's JSON path and says what
// was wanted and what came, in the client's terms (never Go's type names
// such as "wireMessage" or "map[string]json.RawMessage"), and reaches no
// upstream.
func TestMistypedFieldNamesTheFieldInJSONTerms(t *testing.T) {
	r := newRig(t, "")
	const msg = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name, body, param, message string
	}{
		{"body empty", ``, "", "the body is empty: want a JSON object"},
		{"body blank", " \n", "", "the body is empty: want a JSON object"},
		{"body a list", `[1,2]`, "", "the body is not a JSON object: got a list"},
		{"body a string", `"hi"`, "", "the body is not a JSON object: got a string"},
		{"stream_options a string", `{"model":"primary","stream":true,"stream_options":"x",` + msg + `}`,
			"stream_options", "stream_options: want an object, got a string"},
		{"include_usage a string", `{"model":"primary","stream":true,"stream_options":{"include_usage":"yes"},` + msg + `}`,
			"stream_options", "stream_options.include_usage: want a boolean, got a string"},
		{"messages an object", `{"model":"primary","messages":{"role":"user"}}`,
			"messages", "messages: want a list, got an object"},
		{"role a number", `{"model":"primary","messages":[{"role":"user","content":"hi"},{"role":5,"content":"hi"}]}`,
			"messages[1]", "messages[1].role: want a string, got a number"},
		{"message a string", `{"model":"primary","messages":["hi"]}`,
			"messages[0]", "messages[0]: want an object, got a string"},
		{"tool call id a number", `{"model":"primary","messages":[{"role":"assistant","tool_calls":[{"id":7,"function":{"name":"f","arguments":"{}"}}]}]}`,
			"messages[0]", "messages[0].tool_calls.id: want a string, got a number"},
		{"tools an object", `{"model":"primary","tools":{},` + msg + `}`,
			"tools", "tools: want a list, got an object"},
		{"tool name a bool", `{"model":"primary","tools":[{"type":"function","function":{"name":true}}],` + msg + `}`,
			"tools[0]", "tools[0].function.name: want a string, got a boolean"},
		{"fallback null", `{"model":"primary","fallbacks":["backup",null],` + msg + `}`,
			"fallbacks[1]", "fallbacks[1]: want a route name (a non-empty string); GET /v1/models lists them"},
		{"fallback empty", `{"model":"primary","fallbacks":[""],` + msg + `}`,
			"fallbacks[0]", "fallbacks[0]: want a route name (a non-empty string); GET /v1/models lists them"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := r.rawPost("/v1/chat/completions", tc.body)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &e), body)
			require.Equal(t, tc.message, e.Error.Message)
			if tc.param == "" {
				require.Nil(t, e.Error.Param)
			} else {
				require.NotNil(t, e.Error.Param)
				require.Equal(t, tc.param, *e.Error.Param)
			}
			for _, u := range r.up {
				require.Empty(t, u.requests())
			}
		})
	}
}

// The same on /v1/messages: a mistyped messages or tools entry is a 400 in
// Anthropic's shape naming the element and the JSON types, never Go's.
func TestMessagesMistypedFieldNamesTheFieldInJSONTerms(t *testing.T) {
	r := newRig(t, "")
	for _, tc := range []struct{ name, body, message string }{
		{"messages an object", `{"model":"primary","max_tokens":5,"messages":{"role":"user"}}`,
			"messages: want a list, got an object"},
		{"role a number", `{"model":"primary","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":5,"content":"hi"}]}`,
			"messages[1].role: want a string, got a number"},
		{"tool name a bool", `{"model":"primary","max_tokens":5,"tools":[{"name":true}],"messages":[{"role":"user","content":"hi"}]}`,
			"tools[0].name: want a string, got a boolean"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := r.rawMessages(tc.body)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &e), body)
			require.Equal(t, "error", e.Type)
			require.Equal(t, "invalid_request_error", e.Error.Type)
			require.Equal(t, tc.message, e.Error.Message)
			for _, u := range r.up {
				require.Empty(t, u.requests())
			}
		})
	}
}
