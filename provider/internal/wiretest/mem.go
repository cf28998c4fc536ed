package wiretest

import (
	"bytes"
	"io"
	"net/http"
	"path/filepath"
	"testing"
)

// MemTransport answers every request with the same in-memory SSE body, so
// a benchmark measures decoding and mapping, not sockets, and a fuzz
// target runs without a server. It is safe for concurrent use.
type MemTransport struct{ Body []byte }

// RoundTrip drains and closes the request body and answers 200 with Body
// as an event stream.
func (m MemTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(m.Body)), ContentLength: -1, Request: r}, nil
}

// SeedSSE adds the SSE body of every transcript in dir that has events to
// f's seed corpus.
func SeedSSE(f *testing.F, dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, p := range files {
		tr, err := Load(p)
		if err != nil {
			f.Fatal(err)
		}
		if len(tr.Events) > 0 {
			f.Add([]byte(SSE(tr)))
		}
	}
}
