package openai

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

const (
	rCreated = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"model\":\"m\",\"error\":null}}\n\n"
	rDelta   = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"hi\"}\n\n"
	rDone    = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"model\":\"m\",\"status\":\"completed\",\"error\":null,\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n"
)

// responsesBodies are streams whose events the SDK's stream ends on,
// synthesises or decodes leniently: each read both ways.
var responsesBodies = []string{
	rCreated + rDelta + rDone,
	rCreated + "event: response.output_text.delta\ndata: {oops\n\n" + rDelta + rDone,
	rCreated + "data: [1]\n\n" + rDelta + rDone,
	rCreated + "data: null\n\n" + rDelta + rDone,
	rCreated + "data: [DONE]x\n\n" + rDelta + rDone,
	rCreated + "data: [DONE]\n\n" + rDelta + rDone,
	rCreated + "event: response.output_text.delta\n\n" + rDelta + rDone,
	rCreated + "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n" + rDone,
	rCreated + "data: {\"\\u0065rror\":{\"message\":\"escaped\"}}\n\n" + rDone,
	rCreated + "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"slow down\"}\n\n",
	rCreated + "event: thread.x\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"t\"}\n\n" + rDelta + rDone,
	rCreated + "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":\"0\",\"delta\":5}\n\n" + rDone,
	rCreated + "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\ndata: \"item_id\":\"msg_1\",\"delta\":\"two \\u00e9 lines\"}\n\n" + rDone,
	rCreated + rDelta,
	"\uFEFF" + strings.ReplaceAll(rCreated+rDelta+rDone, "\n", "\r\n"),
}

// responsesParts streams body through a Responses API model that reads
// the events itself (sdk false) or through the SDK's stream.
func responsesParts(t *testing.T, body []byte, sdk, raw bool) ([]abi.Part, string) {
	hc := &http.Client{Transport: wiretest.MemTransport{Body: body}}
	opts := []Option{WithBaseURL("http://mem/v1"), WithAPIKey("k"), WithHTTPClient(hc), WithResponsesAPI()}
	if raw {
		opts = append(opts, WithRawChunks())
	}
	m, err := New("m", opts...)
	require.NoError(t, err)
	m.sdkChunks = sdk
	st, err := m.Stream(context.Background(), &driver.Request{})
	require.NoError(t, err)
	parts, err := wiretest.Collect(st, 1<<14)
	if err == nil {
		return parts, "<nil>"
	}
	s := fmt.Sprintf("%v | %v", err, errors.Unwrap(err))
	var pe *driver.ProviderError
	if errors.As(err, &pe) {
		s += fmt.Sprintf(" | %d %q %v %q %q", pe.Status, pe.Type, pe.Class, pe.Message, pe.Body)
	}
	return parts, s
}

// A Responses API stream gives the same parts, raw parts and error
// whether the adapter reads its events or the SDK's stream does: a
// malformed event still ends a library user's stream.
func TestResponsesReadEventsAsSDK(t *testing.T) {
	for i, body := range responsesBodies {
		for _, raw := range []bool{false, true} {
			t.Run(fmt.Sprint(i, "/raw=", raw), func(t *testing.T) {
				want, wantErr := responsesParts(t, []byte(body), true, raw)
				got, gotErr := responsesParts(t, []byte(body), false, raw)
				require.Equal(t, wantErr, gotErr)
				require.Equal(t, want, got)
			})
		}
	}
}

// Behind a body that skips malformed events (the gateway's), a malformed
// Responses API event is skipped, and a plain one is never shown to it.
func TestResponsesSkipMalformed(t *testing.T) {
	body := rCreated + "event: response.output_text.delta\ndata: {oops\n\n" + "data: [1]\n\n" + "data: [DONE]x\n\n" + rDelta + rDone
	sb := &skipBody{EventBody: adapter.SSEBody(io.NopCloser(strings.NewReader(body)))}
	m, err := New("m", WithBaseURL("http://mem/v1"), WithAPIKey("k"), WithHTTPClient(&http.Client{Transport: skipTransport{sb}}), WithResponsesAPI())
	require.NoError(t, err)
	st, err := m.Stream(context.Background(), &driver.Request{})
	require.NoError(t, err)
	parts, err := wiretest.Collect(st, 1000)
	require.NoError(t, err)
	require.Equal(t, "hi", wiretest.Text(parts, abi.KindTextDelta))
	require.NotNil(t, wiretest.Finish(parts))
	require.Equal(t, []string{"{oops\n", "[1]\n", "[DONE]x\n"}, sb.skipped)
}

// FuzzResponsesReaders: whatever the body, reading its Responses API
// events in the adapter gives what the SDK's stream gives.
func FuzzResponsesReaders(f *testing.F) {
	wiretest.SeedSSE(f, filepath.Join("..", "..", "testdata", "wire", "openai"))
	for _, b := range responsesBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, raw := range []bool{false, true} {
			want, wantErr := responsesParts(t, body, true, raw)
			got, gotErr := responsesParts(t, body, false, raw)
			require.Equal(t, wantErr, gotErr, "body %q", body)
			require.Equal(t, want, got, "body %q", body)
		}
	})
}
