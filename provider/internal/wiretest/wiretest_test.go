package wiretest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every transcript in testdata/wire loads and is valid.
func TestTranscriptsLoad(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "testdata", "wire", "*", "*.json"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 40)
	for _, f := range files {
		t.Run(filepath.Base(filepath.Dir(f))+"/"+filepath.Base(f), func(t *testing.T) {
			tr, err := Load(f)
			require.NoError(t, err)
			require.NotEmpty(t, tr.Description)
		})
	}
}

func TestLoadRejects(t *testing.T) {
	for name, body := range map[string]string{
		"unknown field":   `{"stauts": 200}`,
		"bad end":         `{"end": "explode"}`,
		"body and events": `{"body": "x", "events": [{"data": "y"}]}`,
		"empty event":     `{"events": [{"event": "ping"}]}`,
		"negative delay":  `{"events": [{"delay_ms": -1, "data": "x"}]}`,
		"bad status":      `{"status": 42}`,
		"bad newline":     `{"newline": "\\n\\n", "events": [{"data": "x"}]}`,
		"raw and data":    `{"events": [{"raw": "data: x\\n\\n", "data": "x"}]}`,
		"raw and event":   `{"events": [{"raw": "data: x\\n\\n", "event": "x"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "t.json")
			require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
			_, err := Load(p)
			require.Error(t, err)
		})
	}
}

func get(t *testing.T, s *Server, ctx context.Context) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, strings.NewReader(`{"q":1}`))
	require.NoError(t, err)
	return s.Client().Do(req)
}

func TestReplayNormal(t *testing.T) {
	tr := &Transcript{Events: []Event{
		{Event: "message_start", Data: []byte(`{ "type": "message_start" }`)},
		{Comment: "keep-alive"},
		{DelayMS: 1, Data: []byte(`"[DONE]"`)},
	}}
	require.NoError(t, tr.validate())
	s := Serve(t, tr)
	resp, err := get(t, s, context.Background())
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "event: message_start\ndata: {\"type\":\"message_start\"}\n\n: keep-alive\n\ndata: [DONE]\n\n", string(body))
	require.Equal(t, SSE(tr), string(body))
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	res, ok := s.Wait(10 * time.Second)
	require.True(t, ok)
	require.True(t, res.Finished)
	require.False(t, res.ClientGone)
	require.Equal(t, `{"q":1}`, string(res.Body))
}

func TestReplayCut(t *testing.T) {
	s := Serve(t, &Transcript{Events: []Event{{Data: []byte(`"partial"`)}}, End: EndCut})
	resp, err := get(t, s, context.Background())
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Equal(t, "data: partial\n\n", string(body))
}

func TestReplayStallEndsWhenClientLeaves(t *testing.T) {
	for name, tr := range map[string]*Transcript{
		"before headers": {StallBeforeHeaders: true},
		"after events":   {Events: []Event{{Data: []byte(`"x"`)}}, End: EndStall},
	} {
		t.Run(name, func(t *testing.T) {
			s := Serve(t, tr)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			resp, err := get(t, s, ctx)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			require.ErrorIs(t, err, context.DeadlineExceeded)
			res, ok := s.Wait(10 * time.Second)
			require.True(t, ok)
			require.True(t, res.ClientGone)
			require.False(t, res.Finished)
		})
	}
}

func TestReplayErrorBody(t *testing.T) {
	s := Serve(t, &Transcript{Status: 429, Headers: map[string]string{"Retry-After": "2"}, Body: `{"error":{}}`})
	resp, err := get(t, s, context.Background())
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 429, resp.StatusCode)
	require.Equal(t, "2", resp.Header.Get("Retry-After"))
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, `{"error":{}}`, string(b))
}

// Line endings, the byte-order mark and raw events render as the
// transcript says; the mark opens the body once.
func TestSSEFraming(t *testing.T) {
	events := []Event{
		{Comment: "hi"},
		{Event: "a", Data: []byte(`{"x": 1}`)},
		{Raw: "event: error\n\n"},
		{Data: []byte(`"[DONE]"`)},
	}
	for _, tc := range []struct {
		newline string
		bom     bool
		want    string
	}{
		{"", false, ": hi\n\nevent: a\ndata: {\"x\":1}\n\nevent: error\n\ndata: [DONE]\n\n"},
		{NewlineCRLF, false, ": hi\r\n\r\nevent: a\r\ndata: {\"x\":1}\r\n\r\nevent: error\n\ndata: [DONE]\r\n\r\n"},
		{NewlineCR, true, "\uFEFF: hi\r\revent: a\rdata: {\"x\":1}\r\revent: error\n\ndata: [DONE]\r\r"},
		{NewlineMixed, false, ": hi\n\revent: a\r\ndata: {\"x\":1}\n\revent: error\n\ndata: [DONE]\r\n\n"},
	} {
		t.Run(fmt.Sprintf("%q bom=%v", tc.newline, tc.bom), func(t *testing.T) {
			tr := &Transcript{Events: events, Newline: tc.newline, BOM: tc.bom}
			require.NoError(t, tr.validate())
			require.Equal(t, tc.want, SSE(tr))
			s := Serve(t, tr)
			resp, err := get(t, s, context.Background())
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, tc.want, string(body), "the server writes what SSE renders")
		})
	}
}

// A Framer renders every event of a framed server, with the event's data
// compacted; the rest of the transcript (headers, end) is replayed as
// for SSE.
func TestServeFileFramed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "framed.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"description": "framed", "headers": {"Content-Type": "application/x-test"},
	  "events": [{"event": "a", "data": {"x": 1}}, {"event": "b", "data": "raw"}]}`), 0o600))
	srv := ServeFileFramed(t, path, func(e *Event, data []byte) ([]byte, error) {
		return []byte("<" + e.Event + ":" + string(data) + ">"), nil
	})
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, `<a:{"x":1}><b:raw>`, string(b))
	require.Equal(t, "application/x-test", resp.Header.Get("Content-Type"))
}
