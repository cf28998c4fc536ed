package gateway

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
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
