// Package wiretest replays recorded provider HTTP responses on a loopback
// server, so that adapter tests drive the real SDK clients over real HTTP.
//
// A transcript (testdata/wire/<provider>/<name>.json) is one HTTP response:
//
//	{
//	  "description": "what the transcript shows",
//	  "status": 200,                        // default 200
//	  "headers": {"Content-Type": "text/event-stream"},
//	  "body": "…",                          // a plain body (error JSON); exclusive with events
//	  "stall_before_headers": false,        // true: never answer, wait for the client to go
//	  "events": [                           // SSE events, written and flushed one by one
//	    {"delay_ms": 5, "event": "message_start", "data": {…}},
//	    {"data": "[DONE]"},                 // a JSON string is written as is
//	    {"comment": "keep-alive"},          // ": keep-alive"
//	    {"raw": "event: error\n\n"}         // written byte for byte, newline ignored
//	  ],
//	  "newline": "\n",                      // line ending: "\n" (default), "\r\n", "\r",
//	                                        // or "mixed" (\n, \r, \r\n in turn)
//	  "bom": false,                         // true: a UTF-8 byte-order mark opens the body
//	  "end": ""                             // "" (finish normally), "cut" (drop the TCP
//	                                        // connection without ending the chunked body)
//	                                        // or "stall" (write nothing more until the
//	                                        // client goes away)
//	}
//
// Object data is written compacted on one "data:" line, as providers do.
// A provider whose stream is not SSE (an AWS event stream) renders each
// event with its own Framer (ServeFileFramed); the rest is the same.
// Delays are honoured but a client that goes away interrupts them; the
// server records whether the client left before the transcript finished.
package wiretest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"
)

// The ways a transcript can end.
const (
	EndNormal = ""      // the response completes
	EndCut    = "cut"   // the connection is closed mid-body
	EndStall  = "stall" // nothing more is written until the client leaves
)

// Transcript is one recorded HTTP response. See the package doc for the file
// format. A Transcript must not be modified while a Server replays it.
type Transcript struct {
	Description        string            `json:"description"`
	Status             int               `json:"status"`
	Headers            map[string]string `json:"headers"`
	Body               string            `json:"body"`
	StallBeforeHeaders bool              `json:"stall_before_headers"`
	Events             []Event           `json:"events"`
	Newline            string            `json:"newline"`
	BOM                bool              `json:"bom"`
	End                string            `json:"end"`
}

// The line endings a transcript can use besides "\n".
const (
	NewlineCRLF  = "\r\n"
	NewlineCR    = "\r"
	NewlineMixed = "mixed"
)

// Event is one server-sent event, or a comment line.
type Event struct {
	DelayMS int             `json:"delay_ms"`
	Event   string          `json:"event"`
	Data    json.RawMessage `json:"data"`
	Comment string          `json:"comment"`
	Raw     string          `json:"raw"`
}

// Load reads and validates a transcript file.
func Load(path string) (*Transcript, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var tr Transcript
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tr); err != nil {
		return nil, fmt.Errorf("wiretest: %s: %w", path, err)
	}
	if err := tr.validate(); err != nil {
		return nil, fmt.Errorf("wiretest: %s: %w", path, err)
	}
	return &tr, nil
}

func (tr *Transcript) validate() error {
	if tr.Status == 0 {
		tr.Status = http.StatusOK
	}
	if tr.Status < 100 || tr.Status > 999 {
		return fmt.Errorf("bad status %d", tr.Status)
	}
	if tr.Body != "" && len(tr.Events) > 0 {
		return errors.New("body and events are exclusive")
	}
	switch tr.End {
	case EndNormal, EndCut, EndStall:
	default:
		return fmt.Errorf("bad end %q (want \"\", %q or %q)", tr.End, EndCut, EndStall)
	}
	switch tr.Newline {
	case "", "\n", NewlineCRLF, NewlineCR, NewlineMixed:
	default:
		return fmt.Errorf("bad newline %q (want \"\\n\", \"\\r\\n\", \"\\r\" or %q)", tr.Newline, NewlineMixed)
	}
	for i, e := range tr.Events {
		if e.DelayMS < 0 {
			return fmt.Errorf("event %d: negative delay", i)
		}
		if e.Raw != "" && (len(e.Data) > 0 || e.Comment != "" || e.Event != "") {
			return fmt.Errorf("event %d: raw excludes event, data and comment", i)
		}
		if len(e.Data) == 0 && e.Comment == "" && e.Raw == "" {
			return fmt.Errorf("event %d: no data, no comment and no raw", i)
		}
		if len(e.Data) > 0 {
			if _, err := e.line(); err != nil {
				return fmt.Errorf("event %d: %w", i, err)
			}
		}
	}
	return nil
}

// line returns the event's data as it goes on the wire.
func (e *Event) line() ([]byte, error) {
	var s string
	if err := json.Unmarshal(e.Data, &s); err == nil {
		return []byte(s), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, e.Data); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Request is a request the server received.
type Request struct {
	Path   string
	Body   []byte
	Header http.Header
}

// Result is what the server observed of one request once it handled it.
type Result struct {
	Request
	// Finished reports that the whole transcript was written (for EndCut:
	// up to the cut).
	Finished bool
	// ClientGone reports that the client closed the connection (or its
	// request context ended) before the transcript finished.
	ClientGone bool
}

// Server replays one transcript for every request it receives.
// Its methods are safe for concurrent use.
type Server struct {
	*httptest.Server
	tr    *Transcript
	frame Framer // nil: SSE

	mu       sync.Mutex
	requests []Request
	done     chan Result
}

// Serve starts a loopback server replaying tr and closes it when the test
// ends. It fails the test if tr is invalid (and fills in defaults).
func Serve(t testing.TB, tr *Transcript) *Server {
	t.Helper()
	return serve(t, tr, nil)
}

func serve(t testing.TB, tr *Transcript, frame Framer) *Server {
	t.Helper()
	if err := tr.validate(); err != nil {
		t.Fatalf("wiretest: %v", err)
	}
	s := &Server{tr: tr, frame: frame, done: make(chan Result, 16)}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.Close)
	return s
}

// ServeFile loads the transcript at path and serves it; it fails the test
// on a bad file.
func ServeFile(t testing.TB, path string) *Server {
	t.Helper()
	return ServeFileFramed(t, path, nil)
}

// Framer renders one event as it goes on the wire: data is the event's
// data, compacted (or the string as is). A Framer must be safe for
// concurrent use.
type Framer func(e *Event, data []byte) ([]byte, error)

// ServeFileFramed is ServeFile for a stream that is not SSE: frame renders
// every event (nil: SSE). The transcript's newline and bom do not apply.
func ServeFileFramed(t testing.TB, path string, frame Framer) *Server {
	t.Helper()
	tr, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return ServeFramed(t, tr, frame)
}

// ServeFramed is Serve for a stream that is not SSE: frame renders every
// event (nil: SSE).
func ServeFramed(t testing.TB, tr *Transcript, frame Framer) *Server {
	t.Helper()
	return serve(t, tr, frame)
}

// Wait returns the result of the next request to finish, or false if none
// finishes within d (a generous bound: it only guards against a hang).
func (s *Server) Wait(d time.Duration) (Result, bool) {
	select {
	case r := <-s.done:
		return r, true
	case <-time.After(d):
		return Result{}, false
	}
}

// Requests returns the requests received so far. A request is recorded
// before its response is written, so a client that got a response finds its
// request here.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	res := Result{Request: Request{Path: r.URL.Path, Body: body, Header: r.Header.Clone()}}
	s.mu.Lock()
	s.requests = append(s.requests, res.Request)
	s.mu.Unlock()
	res.Finished, res.ClientGone = s.replay(w, r)
	select {
	case s.done <- res:
	default:
	}
}

// replay writes the transcript; it reports whether it finished and whether
// the client left first.
func (s *Server) replay(w http.ResponseWriter, r *http.Request) (finished, gone bool) {
	tr := s.tr
	ctx := r.Context()
	if tr.StallBeforeHeaders {
		<-ctx.Done()
		return false, true
	}
	for k, v := range tr.Headers {
		w.Header().Set(k, v)
	}
	if len(tr.Events) > 0 && w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "text/event-stream")
	}
	w.WriteHeader(tr.Status)
	if tr.Body != "" {
		if _, err := io.WriteString(w, tr.Body); err != nil {
			return false, true
		}
	}
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return false, true
	}
	f := newFramer(tr)
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.DelayMS > 0 {
			t := time.NewTimer(time.Duration(e.DelayMS) * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return false, true
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			return false, true
		}
		b, err := s.render(f, e)
		if err != nil {
			return false, false
		}
		if _, err := w.Write(b); err != nil {
			return false, true
		}
		if err := rc.Flush(); err != nil {
			return false, true
		}
	}
	switch tr.End {
	case EndCut:
		// Hijack and close: the client sees the connection drop in the
		// middle of a chunked body, as when a proxy or the provider dies.
		conn, brw, err := rc.Hijack()
		if err != nil {
			return false, ctx.Err() != nil
		}
		_ = brw.Flush()
		_ = conn.Close()
		return true, false
	case EndStall:
		<-ctx.Done()
		return false, true
	}
	return true, false
}

// render renders one event: by the server's Framer, or as SSE.
func (s *Server) render(f *framer, e *Event) ([]byte, error) {
	if s.frame == nil {
		return f.frame(e), nil
	}
	data, _ := e.line() // validated at load
	return s.frame(e, data)
}

// framer renders events as they go on the wire, with the transcript's
// line endings and byte-order mark.
type framer struct {
	newline string
	bom     bool // still to write
	lines   int  // lines written, to cycle the mixed endings
}

func newFramer(tr *Transcript) *framer { return &framer{newline: tr.Newline, bom: tr.BOM} }

// mixed is the cycle of line endings NewlineMixed uses. A "\r" is never
// followed by a "\n", which would read as one "\r\n".
var mixed = [...]string{"\n", "\r", "\r\n"}

func (f *framer) end(b *bytes.Buffer) {
	switch f.newline {
	case "":
		b.WriteByte('\n')
	case NewlineMixed:
		b.WriteString(mixed[f.lines%len(mixed)])
	default:
		b.WriteString(f.newline)
	}
	f.lines++
}

// frame renders one event.
func (f *framer) frame(e *Event) []byte {
	var b bytes.Buffer
	if f.bom {
		f.bom = false
		b.WriteString("\uFEFF")
	}
	if e.Raw != "" {
		b.WriteString(e.Raw)
		return b.Bytes()
	}
	if e.Comment != "" {
		b.WriteString(": " + e.Comment)
		f.end(&b)
	}
	if e.Event != "" {
		b.WriteString("event: " + e.Event)
		f.end(&b)
	}
	if len(e.Data) > 0 {
		line, _ := e.line() // validated at load
		b.WriteString("data: ")
		b.Write(line)
		f.end(&b)
	}
	f.end(&b)
	return b.Bytes()
}

// SSE renders a transcript's events as the raw text/event-stream body.
func SSE(tr *Transcript) string {
	var b bytes.Buffer
	f := newFramer(tr)
	for i := range tr.Events {
		b.Write(f.frame(&tr.Events[i]))
	}
	return b.String()
}

// Capture starts a loopback server (over TLS when tls) that answers every
// request 200 with body as contentType, and hands over each request and
// its body (up to 4 unread ones before a handler waits); the server closes
// when the test ends. It is for tests of what an adapter sends.
func Capture(t testing.TB, contentType string, body []byte, tls bool) (*httptest.Server, <-chan *http.Request, <-chan []byte) {
	t.Helper()
	reqs, bodies := make(chan *http.Request, 4), make(chan []byte, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reqs <- r
		bodies <- b
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(body)
	}))
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, reqs, bodies
}
