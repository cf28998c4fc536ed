package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"sync"
	"sync/atomic"
)

// maxEventBytes bounds one upstream SSE event the filter holds while it
// checks it; a larger event is skipped (and counted) unread.
const maxEventBytes = 4 << 20

// sseFilter is the upstream client's transport: it drops server-sent
// events whose data is neither [DONE] nor a JSON object, so that one
// malformed event from an upstream is skipped (and counted) instead of
// ending the stream in the SDK's decoder.
type sseFilter struct {
	next    http.RoundTripper
	skipped *atomic.Int64
}

func (f *sseFilter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := f.next.RoundTrip(r)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	hook, _ := r.Context().Value(flushKey{}).(*flushHook)
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		resp.Body = &eventReader{src: resp.Body, r: newBufReader(resp.Body), skipped: f.skipped, hook: hook}
	} else if hook != nil {
		resp.Body = &hookedBody{ReadCloser: resp.Body, hook: hook}
	}
	if hook != nil {
		hook.bodies.Add(1)
	}
	return resp, nil
}

// eventBufSize is the filter's read buffer per upstream stream; a longer
// line is gathered past it (up to maxEventBytes), so it only needs to
// hold the common event (a held stream keeps it while it is open).
const eventBufSize = 2 << 10

func newBufReader(r io.Reader) *bufio.Reader {
	return bufio.NewReaderSize(&lfReader{r: r}, eventBufSize)
}

// flushHook lets a streaming answer coalesce its events: the relay arms
// it with a flush of the events it has encoded but not written, and an
// upstream body of the request (made by the gateway's client, which finds
// the hook in the request's context) runs it just before it reads from
// the network, that is, before the relay could wait. So events that
// arrived together go out in one write, and none waits for a later one.
type flushHook struct {
	mu     sync.Mutex // held while fn runs: disarm waits for a flush under way
	fn     func()
	bodies atomic.Int32 // upstream bodies opened with the hook (ever)
}

type flushKey struct{}

func (h *flushHook) arm(fn func()) {
	h.mu.Lock()
	h.fn = fn
	h.mu.Unlock()
}

func (h *flushHook) disarm() {
	h.mu.Lock()
	h.fn = nil
	h.mu.Unlock()
}

// flush runs the armed flush, once. A hedged attempt's body may call it
// from another goroutine; the relay is then inside Recv, and disarm waits.
func (h *flushHook) flush() {
	if h == nil {
		return
	}
	h.mu.Lock()
	if fn := h.fn; fn != nil {
		h.fn = nil
		fn()
	}
	h.mu.Unlock()
}

// hookedBody is an upstream body that is not an event stream: it flushes
// before every read.
type hookedBody struct {
	io.ReadCloser
	hook *flushHook
}

func (b *hookedBody) Read(p []byte) (int, error) {
	b.hook.flush()
	return b.ReadCloser.Read(p)
}

// lfReader folds the line endings SSE allows (CRLF, CR, LF) into LF, in
// place, so that events split on LF.
type lfReader struct {
	r  io.Reader
	cr bool // the last byte read was a CR: a LF right after it is its pair
}

func (l *lfReader) Read(p []byte) (int, error) {
	for {
		n, err := l.r.Read(p)
		if n = l.fold(p[:n]); n > 0 || err != nil || len(p) == 0 {
			return n, err
		}
	}
}

func (l *lfReader) fold(b []byte) int {
	w := 0
	for _, c := range b {
		if l.cr && c == '\n' {
			l.cr = false
			continue
		}
		l.cr = c == '\r'
		if l.cr {
			c = '\n'
		}
		b[w] = c
		w++
	}
	return w
}

// eventReader passes well-formed events through unchanged.
type eventReader struct {
	src     io.ReadCloser
	r       *bufio.Reader
	skipped *atomic.Int64
	hook    *flushHook // nil: no relay waits on this body

	event   []byte // the event being read, its lines as they came
	data    []byte // its data, joined
	partial []byte // a line longer than the read buffer, so far
	hasData bool
	tooBig  bool
	started bool   // past the first line
	out     []byte // released bytes; out[off:] not yet read
	off     int
	err     error
}

func (e *eventReader) Close() error { return e.src.Close() }

func (e *eventReader) Read(p []byte) (int, error) {
	for len(e.out) == 0 && e.err == nil {
		e.step()
	}
	if len(e.out) > 0 {
		n := copy(p, e.out[e.off:])
		if e.off += n; e.off == len(e.out) {
			e.out, e.off = e.out[:0], 0
		}
		return n, nil
	}
	return 0, e.err
}

// step reads one line and, at the blank line that ends an event, releases
// or drops it.
func (e *eventReader) step() {
	if e.hook != nil {
		if buf, _ := e.r.Peek(e.r.Buffered()); bytes.IndexByte(buf, '\n') < 0 {
			e.hook.flush() // the next line needs the network
		}
	}
	chunk, err := e.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) { // a long line: gather it, up to the cap
		if !e.tooBig {
			if len(e.event)+len(e.partial)+len(chunk) > maxEventBytes {
				e.tooBig, e.partial = true, e.partial[:0]
			} else {
				e.partial = append(e.partial, chunk...)
			}
		}
		return
	}
	line := chunk
	if len(e.partial) > 0 {
		e.partial = append(e.partial, chunk...)
		line = e.partial
	}
	if len(line) > 0 {
		e.line(line)
	}
	e.partial = e.partial[:0]
	if err != nil {
		if len(e.event) > 0 && !e.tooBig {
			e.out = append(e.out, e.event...) // a last event with no blank line: as it came
		}
		e.event = nil
		e.err = err
	}
}

func (e *eventReader) line(line []byte) {
	if !e.started { // a byte-order mark may open the stream
		e.started = true
		line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
	}
	trimmed := bytes.TrimSuffix(line, []byte("\n"))
	if len(trimmed) == 0 { // the end of an event
		if len(e.event) > 0 || e.tooBig {
			if e.hasData && !e.tooBig && wellFormed(e.data) {
				e.out = append(append(e.out, e.event...), line...)
			} else if e.hasData || e.tooBig {
				e.skipped.Add(1)
			} else {
				e.out = append(append(e.out, e.event...), line...) // comments, ids: as they came
			}
		} else {
			e.out = append(e.out, line...)
		}
		e.event, e.data, e.hasData, e.tooBig = e.event[:0], e.data[:0], false, false
		return
	}
	if e.tooBig {
		return
	}
	if len(e.event)+len(line) > maxEventBytes {
		e.tooBig, e.event, e.data = true, e.event[:0], e.data[:0]
		return
	}
	e.event = append(e.event, line...)
	if v, ok := bytes.CutPrefix(trimmed, []byte("data:")); ok {
		if e.hasData {
			e.data = append(e.data, '\n')
		}
		e.hasData = true
		e.data = append(e.data, bytes.TrimPrefix(v, []byte(" "))...)
	}
}

// wellFormed reports whether an event's data is [DONE] or a JSON object.
func wellFormed(data []byte) bool {
	d := bytes.TrimSpace(data)
	if string(d) == "[DONE]" {
		return true
	}
	return len(d) > 0 && d[0] == '{' && json.Valid(d)
}
