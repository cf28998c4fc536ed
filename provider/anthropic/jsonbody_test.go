package anthropic_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/anthropic"
	"github.com/retryhost/retryhost/provider/internal/adapter"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

const sseText = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"model\":\"c\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

// A 200 whose body is Anthropic's JSON error object in place of the
// events fails the call with its message and type, as a retryable
// provider fault, on both read paths; a 200 JSON body that is no error
// object is read as before.
func TestStreamJSONErrorBody(t *testing.T) {
	for _, tc := range []struct {
		name, ct, body string
		opts           []anthropic.Option
		class          abi.ErrorClass
		typ, msg       string // "" msg: no error at open
		text           string
		truncated      bool
	}{
		{name: "overloaded", ct: "application/json", body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			class: abi.ClassOverloaded, typ: "overloaded_error", msg: "Overloaded"},
		{name: "api_error, sdk path", ct: "application/json", body: `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`,
			opts: []anthropic.Option{anthropic.WithSDKTracing()}, class: abi.ClassServer, typ: "api_error", msg: "Internal server error"},
		{name: "openai shape", ct: "application/json", body: `{"error":{"message":"model overloaded","type":"server_error"}}`,
			class: abi.ClassServer, typ: "server_error", msg: "model overloaded"},
		{name: "no error object", ct: "application/json", body: `{"type":"message","content":[]}`, truncated: true},
		{name: "events under a JSON type", ct: "application/json", body: sseText, text: "hi"},
		{name: "events under a JSON type, sdk path", ct: "application/json", body: sseText, opts: []anthropic.Option{anthropic.WithSDKTracing()}, text: "hi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", tc.ct)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			m, err := anthropic.New("claude-sonnet-4-5", append([]anthropic.Option{anthropic.WithBaseURL(srv.URL),
				anthropic.WithAPIKey("sk-ant-test"), anthropic.WithHTTPClient(srv.Client())}, tc.opts...)...)
			require.NoError(t, err)
			st, err := m.Stream(context.Background(), request())
			if tc.msg != "" {
				require.Nil(t, st)
				var pe *driver.ProviderError
				require.ErrorAs(t, err, &pe)
				require.Equal(t, "anthropic", pe.Provider)
				require.Equal(t, tc.msg, pe.Message)
				require.Equal(t, tc.typ, pe.Type)
				require.Equal(t, tc.class, pe.Class)
				require.True(t, pe.Retryable)
				require.ErrorIs(t, err, adapter.ErrJSONBody)
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

// A 200 text/event-stream whose body is a JSON error object (Anthropic's
// or OpenAI's shape, bare or as its first line) fails the stream before
// any content with the server's message and type, as under a JSON
// Content-Type at open; any other JSON body still ends truncated.
func TestStreamEventStreamJSONErrorBody(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		class      abi.ErrorClass
		typ, msg   string // "" msg: truncated
	}{
		{name: "overloaded", body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			class: abi.ClassOverloaded, typ: "overloaded_error", msg: "Overloaded"},
		{name: "first line, then events", body: `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}` + "\n\n" + sseText,
			class: abi.ClassServer, typ: "api_error", msg: "Internal server error"},
		{name: "openai shape, pretty", body: "{\n  \"error\": {\"message\": \"model overloaded\", \"type\": \"server_error\"}\n}\n",
			class: abi.ClassServer, typ: "server_error", msg: "model overloaded"},
		{name: "no error object", body: `{"type":"message","content":[]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			m, err := anthropic.New("claude-sonnet-4-5", anthropic.WithBaseURL(srv.URL),
				anthropic.WithAPIKey("sk-ant-test"), anthropic.WithHTTPClient(srv.Client()))
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
			require.Equal(t, "anthropic", pe.Provider)
			require.Equal(t, tc.msg, pe.Message)
			require.Equal(t, tc.typ, pe.Type)
			require.Equal(t, tc.class, pe.Class)
			require.True(t, pe.Retryable)
			require.ErrorIs(t, err, adapter.ErrJSONBody)
			require.NotErrorIs(t, err, adapter.ErrTruncated)
		})
	}
}
