package openai_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
	"github.com/retryhost/retryhost/provider/openai"
)

// jsonServer answers every call with a 200 of the given Content-Type and body.
func jsonServer(t *testing.T, ct, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ct)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

const sseText = "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n" +
	"data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
	"data: [DONE]\n\n"

// A 200 whose body is a JSON error object in place of the events fails
// the call with the server's message, type and code, as a retryable
// provider fault (never a client one), on every read path; a 200 JSON
// body that is no error object is read as before.
func TestStreamJSONErrorBody(t *testing.T) {
	for _, tc := range []struct {
		name, ct, body string
		opts           []openai.Option
		class          abi.ErrorClass
		typ, msg       string // "" msg: no error at open
		text           string // the text read when there is none
		truncated      bool
	}{
		{name: "server_error", ct: "application/json", body: `{"error":{"message":"model overloaded","type":"server_error"}}`,
			class: abi.ClassServer, typ: "server_error", msg: "model overloaded"},
		{name: "sdk path", ct: "application/json; charset=utf-8", body: `{"error":{"message":"model overloaded","type":"server_error"}}`,
			opts: []openai.Option{openai.WithRawChunks()}, class: abi.ClassServer, typ: "server_error", msg: "model overloaded"},
		{name: "responses", ct: "application/json", body: `{"error":{"message":"model overloaded","type":"server_error"}}`,
			opts: []openai.Option{openai.WithResponsesAPI()}, class: abi.ClassServer, typ: "server_error", msg: "model overloaded"},
		{name: "code only", ct: "application/json", body: "\n{\"error\":{\"code\":\"overloaded\",\"message\":\"busy\"}}\n",
			class: abi.ClassOverloaded, typ: "overloaded", msg: "busy"},
		{name: "rate limit", ct: "application/json", body: `{"error":{"message":"slow down","type":"rate_limit_error","code":429}}`,
			class: abi.ClassRateLimit, typ: "rate_limit_error", msg: "slow down"},
		{name: "request type stays the server's fault", ct: "application/json", body: `{"error":{"message":"bad","type":"invalid_request_error"}}`,
			class: abi.ClassServer, typ: "invalid_request_error", msg: "bad"},
		{name: "string error", ct: "application/problem+json", body: `{"error":"upstream exploded"}`,
			class: abi.ClassServer, msg: "upstream exploded"},
		{name: "no error object", ct: "application/json", body: `{"id":"x","error":null}`, truncated: true},
		{name: "events under a JSON type", ct: "application/json", body: sseText, text: "hi"},
		{name: "events under a JSON type, sdk path", ct: "application/json", body: sseText, opts: []openai.Option{openai.WithRawChunks()}, text: "hi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := jsonServer(t, tc.ct, tc.body)
			m, err := openai.New("gpt-4o-mini", append([]openai.Option{openai.WithBaseURL(srv.URL + "/v1"),
				openai.WithAPIKey("sk-test"), openai.WithHTTPClient(srv.Client())}, tc.opts...)...)
			require.NoError(t, err)
			st, err := m.Stream(context.Background(), request())
			if tc.msg != "" {
				require.Nil(t, st)
				var pe *driver.ProviderError
				require.ErrorAs(t, err, &pe)
				require.Equal(t, "openai", pe.Provider)
				require.Equal(t, tc.msg, pe.Message)
				require.Equal(t, tc.typ, pe.Type)
				require.Equal(t, tc.class, pe.Class)
				require.True(t, pe.Retryable)
				require.Zero(t, pe.Status, "the 200 said nothing about the error")
				require.ErrorIs(t, err, adapter.ErrJSONBody)
				require.Contains(t, err.Error(), tc.msg)
				return
			}
			require.NoError(t, err)
			parts, err := wiretest.Collect(st, 100)
			if tc.truncated {
				require.ErrorIs(t, err, adapter.ErrTruncated)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.text, wiretest.Text(parts, abi.KindTextDelta))
		})
	}
}

// A 200 text/event-stream whose body is a JSON error object (bare,
// pretty-printed, or as its first line before events) fails the stream
// before any content with the server's message, type and code, as the
// same body under a JSON Content-Type does at open: a retryable provider
// fault, never a truncated stream. A JSON body that is no error object
// still ends as a truncated stream.
func TestStreamEventStreamJSONErrorBody(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		opts       []openai.Option
		class      abi.ErrorClass
		typ, msg   string // "" msg: truncated
	}{
		{name: "bare", body: `{"error":{"message":"model overloaded","type":"server_error","code":null}}`,
			class: abi.ClassServer, typ: "server_error", msg: "model overloaded"},
		{name: "pretty", body: "\n{\n  \"error\": {\n    \"message\": \"slow down\",\n    \"type\": \"rate_limit_error\",\n    \"code\": 429\n  }\n}\n",
			class: abi.ClassRateLimit, typ: "rate_limit_error", msg: "slow down"},
		{name: "first line, then events", body: `{"error":{"message":"busy","code":"overloaded"}}` + "\n\n" + sseText,
			class: abi.ClassOverloaded, typ: "overloaded", msg: "busy"},
		{name: "request type stays the server's fault", body: `{"error":{"message":"bad","type":"invalid_request_error"}}`,
			class: abi.ClassServer, typ: "invalid_request_error", msg: "bad"},
		{name: "responses", body: `{"error":{"message":"model overloaded","type":"server_error"}}`,
			opts: []openai.Option{openai.WithResponsesAPI()}, class: abi.ClassServer, typ: "server_error", msg: "model overloaded"},
		{name: "no error object", body: `{"id":"x","object":"chat.completion"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := jsonServer(t, "text/event-stream", tc.body)
			m, err := openai.New("gpt-4o-mini", append([]openai.Option{openai.WithBaseURL(srv.URL + "/v1"),
				openai.WithAPIKey("sk-test"), openai.WithHTTPClient(srv.Client())}, tc.opts...)...)
			require.NoError(t, err)
			st, err := m.Stream(context.Background(), request())
			require.NoError(t, err, "an event stream opens; its body is read by Recv")
			parts, err := wiretest.Collect(st, 100)
			require.Empty(t, wiretest.Text(parts, abi.KindTextDelta), "no content before the error")
			if tc.msg == "" {
				require.ErrorIs(t, err, adapter.ErrTruncated)
				return
			}
			var pe *driver.ProviderError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "openai", pe.Provider)
			require.Equal(t, tc.msg, pe.Message)
			require.Equal(t, tc.typ, pe.Type)
			require.Equal(t, tc.class, pe.Class)
			require.True(t, pe.Retryable)
			require.Zero(t, pe.Status)
			require.Equal(t, "text/event-stream", pe.Header.Get("Content-Type"))
			require.ErrorIs(t, err, adapter.ErrJSONBody)
			require.NotErrorIs(t, err, adapter.ErrTruncated)
		})
	}
}
