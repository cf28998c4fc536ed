package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
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
	startEv = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"m\",\"usage\":{\"input_tokens\":3}}}\n\n"
	blockEv = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
	deltaEv = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"
	stopEv  = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

// readerBodies are streams whose events the SDK's stream skips, ends on,
// or decodes leniently: each read both ways.
var readerBodies = []string{
	startEv + blockEv + deltaEv + stopEv,
	startEv + "event: ping\ndata: {oops\n\n" + "event: ping\n\n" + ": c\n\n" + "data: {\"type\":\"message_stop\"}\n\n" + blockEv + deltaEv + stopEv,
	startEv + blockEv + "event: content_block_delta\ndata: {oops\n\n" + deltaEv + stopEv,
	startEv + blockEv + "event: content_block_delta\ndata:\n\n" + "event: content_block_delta\n\n" + deltaEv + stopEv,
	startEv + blockEv + "event: content_block_delta\ndata: null\n\n" + deltaEv + stopEv,
	startEv + blockEv + "event: content_block_delta\ndata: [1]\n\n" + deltaEv + stopEv,
	startEv + blockEv + "event: content_block_delta\ndata: [DONE]\n\n" + deltaEv + stopEv,
	startEv + blockEv + "event: content_block_delta\ndata: {\"type\":5}\n\n" + deltaEv + stopEv,
	startEv + blockEv + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\ndata: \"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"two lines\"}}\n\n" + stopEv,
	startEv + "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
	startEv + "event: error\n\n",
	startEv + "event: error\ndata:\n\n",
	startEv + "event: error\ndata: upstream reset\n\n",
	startEv + "event: error\ndata: {\"error\":\n\n" + stopEv,
	startEv + blockEv + deltaEv,
	startEv + blockEv + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + strings.Repeat("long ", 1000) + "\"}}\n\n" + stopEv,
	"\uFEFF" + strings.ReplaceAll(startEv+blockEv+deltaEv+stopEv, "\n", "\r\n"),
}

// readParts streams body through a model that reads the events itself
// (sdk false) or through the SDK's decoder, in each raw-part mode: the
// parts and the error, printed for comparison.
func readParts(t *testing.T, body []byte, sdk bool, opts ...Option) ([]abi.Part, string) {
	hc := &http.Client{Transport: wiretest.MemTransport{Body: body}}
	m, err := New("m", append([]Option{WithBaseURL("http://mem"), WithAPIKey("k"), WithHTTPClient(hc)}, opts...)...)
	require.NoError(t, err)
	m.sdkEvents = sdk
	st, err := m.Stream(context.Background(), &driver.Request{})
	require.NoError(t, err)
	parts, err := wiretest.Collect(st, 1<<16)
	return parts, errString(err)
}

// errString prints an error and what it wraps, and a ProviderError's
// fields.
func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := fmt.Sprintf("%v | %v", err, errors.Unwrap(err))
	var pe *driver.ProviderError
	if errors.As(err, &pe) {
		s += fmt.Sprintf(" | %d %q %q %q", pe.Status, pe.Type, pe.Message, pe.Body)
	}
	return s
}

var rawModes = map[string][]Option{"parts": nil, "raw": {WithRawChunks()}, "unmapped": {WithUnmappedEvents()}}

// A library user's stream (no gateway) gives the same parts, raw parts
// byte for byte, and the same error, whether the adapter reads the events
// itself or the SDK's decoder does: a malformed event still ends it.
func TestStreamReadEventsAsSDK(t *testing.T) {
	for i, body := range readerBodies {
		for name, opts := range rawModes {
			t.Run(fmt.Sprint(i, "/", name), func(t *testing.T) {
				want, wantErr := readParts(t, []byte(body), true, opts...)
				got, gotErr := readParts(t, []byte(body), false, opts...)
				require.Equal(t, wantErr, gotErr)
				require.Equal(t, want, got)
			})
		}
	}
}

// skipBody is an EventBody with the gateway's SkipMalformed rule (skip
// what is neither [DONE] nor a JSON object), counting what it is asked.
type skipBody struct {
	adapter.EventBody
	asked, skipped int
}

func (b *skipBody) SkipMalformed(data []byte) bool {
	b.asked++
	d := bytes.TrimSpace(data)
	if string(d) == "[DONE]" || len(d) > 0 && d[0] == '{' && json.Valid(d) {
		return false
	}
	b.skipped++
	return true
}

// skipTransport answers with a skipBody over body, as the gateway's
// transport answers with its event reader (NormalizeSSE leaves it be).
type skipTransport struct {
	body string
	sb   *skipBody
}

func (s *skipTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	s.sb = &skipBody{EventBody: adapter.SSEBody(io.NopCloser(strings.NewReader(s.body)))}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: s.sb, ContentLength: -1, Request: r}, nil
}

// Behind a body that skips malformed events (the gateway's), the events
// are read from it, not through the SDK's decoder: a malformed event of
// any type is skipped, not the end of the stream, and only the events the
// decoder declined or never decodes are shown to SkipMalformed.
func TestStreamSkipsMalformed(t *testing.T) {
	body := startEv + blockEv + "event: content_block_delta\ndata: {oops\n\n" + "event: content_block_delta\ndata: [1]\n\n" +
		"event: content_block_delta\ndata:\n\n" + "event: ping\ndata: {oops\n\n" + "event: ping\ndata: {\"type\":\"ping\"}\n\n" +
		"event: error\ndata: not json\n\n" + deltaEv + stopEv
	tr := &skipTransport{body: body}
	m, err := New("m", WithBaseURL("http://mem"), WithAPIKey("k"), WithHTTPClient(&http.Client{Transport: tr}))
	require.NoError(t, err)
	st, err := m.Stream(context.Background(), &driver.Request{})
	require.NoError(t, err)
	parts, err := wiretest.Collect(st, 1000)
	require.NoError(t, err)
	require.Equal(t, "hi", wiretest.Text(parts, abi.KindTextDelta))
	require.NotNil(t, wiretest.Finish(parts))
	require.Equal(t, 5, tr.sb.skipped)
	require.Equal(t, 6, tr.sb.asked, "a decoded event is not shown to SkipMalformed, a ping is")
}

// FuzzStreamReaders: whatever the body, reading its events in the adapter
// gives what the SDK's decoder gives (parts, raw parts, error).
func FuzzStreamReaders(f *testing.F) {
	wiretest.SeedSSE(f, filepath.Join("..", "..", "testdata", "wire", "anthropic"))
	for _, b := range readerBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, opts := range [][]Option{nil, {WithUnmappedEvents()}} {
			want, wantErr := readParts(t, body, true, opts...)
			got, gotErr := readParts(t, body, false, opts...)
			require.Equal(t, wantErr, gotErr, "body %q", body)
			require.Equal(t, want, got, "body %q", body)
		}
	})
}
