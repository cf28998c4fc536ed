package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
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
