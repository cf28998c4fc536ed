package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/leaf/sseline"
)

// maxEventBytes bounds one upstream SSE event the filter holds while it
// checks it; a larger event is skipped (and counted) unread.
const maxEventBytes = 4 << 20

// sseFilter is the upstream client's transport: it drops server-sent
// events whose data is neither [DONE] nor a JSON object, so that one
// malformed event from an upstream is skipped (and counted) instead of
// ending the stream in the SDK's decoder.
//
// It also bounds the wait for a streamed request's response headers
// (WithUpstreamHeaderTimeout), which the transport cannot do per request:
// a request that commits at its end (a non-streaming client's) may be a
// non-streamed one upstream ("upstream_json"), whose headers come only
// with the whole answer, which the policy's first-content deadline bounds.
type sseFilter struct {
	next          http.RoundTripper
	skipped       *atomic.Int64
	headerTimeout time.Duration // 0: none
}

// errUpstreamHeaders is the failure of an upstream that sent no response
// headers within the header timeout: a timeout, as the transport's own.
type errUpstreamHeaders struct{}

func (errUpstreamHeaders) Error() string   { return "net/http: timeout awaiting response headers" }
func (errUpstreamHeaders) Timeout() bool   { return true }
func (errUpstreamHeaders) Temporary() bool { return true }

func (f *sseFilter) RoundTrip(r *http.Request) (*http.Response, error) {
	var (
		resp *http.Response
		err  error
	)
	hook, _ := r.Context().Value(flushKey{}).(*flushHook)
	// A streaming client's request (one with the relay's flush hook) runs
	// under a context of its own that follows the request's cancellation
	// until its body is closed, but can leave it (detach) once the stream's
	// end marker is in: the read of the body's end after it (see
	// eventReader.Close) then outlives the attempt, which ends at the end
	// marker, so the relay sends the answer's end before that read and the
	// connection is still kept.
	var (
		ctx    = r.Context()
		cancel context.CancelCauseFunc
		detach func() bool // nil: the request follows r's context
	)
	if hook != nil {
		parent := ctx
		ctx, cancel = context.WithCancelCause(context.WithoutCancel(parent))
		detach = context.AfterFunc(parent, func() { cancel(context.Cause(parent)) })
	}
	if f.headerTimeout > 0 && !driver.CommitsAtEnd(ctx) {
		// The timer is stopped once the headers are in; the context lives
		// as long as the response body (ended with the request's, when the
		// attempt ends).
		if cancel == nil {
			ctx, cancel = context.WithCancelCause(ctx)
		}
		t := time.AfterFunc(f.headerTimeout, func() { cancel(errUpstreamHeaders{}) })
		resp, err = f.next.RoundTrip(r.WithContext(ctx))
		if !t.Stop() && context.Cause(ctx) == (errUpstreamHeaders{}) {
			if err == nil {
				_ = resp.Body.Close()
			}
			resp, err = nil, errUpstreamHeaders{}
		}
	} else if ctx != r.Context() {
		resp, err = f.next.RoundTrip(r.WithContext(ctx))
	} else {
		resp, err = f.next.RoundTrip(r)
	}
	if err != nil || resp.Body == nil {
		if detach != nil {
			detach()
			cancel(nil)
		}
		return resp, err
	}
	if isEventStream(resp.Header.Get("Content-Type")) {
		e := newEventReader(resp.Body, f.skipped, hook)
		if detach != nil {
			e.detach, e.end = detach, cancel
		}
		resp.Body = e
	} else if hook != nil {
		resp.Body = &hookedBody{ReadCloser: resp.Body, hook: hook, detach: detach, end: cancel}
	}
	if hook != nil {
		hook.bodies.Add(1)
	}
	return resp, nil
}

// isEventStream reports whether a Content-Type is text/event-stream, as
// mime.ParseMediaType would find, without its allocations: the media
// type is what comes before any parameter, in any case.
func isEventStream(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// eventBufSize is the filter's read buffer per upstream stream; a longer
// line is gathered past it (up to maxEventBytes), so it only needs to
// hold the common event (a held stream keeps it while it is open).
const eventBufSize = 2 << 10

// maxKeptData is the most an event reader keeps of the buffer it gathered
// a long event's data in, for the next event: past it, the buffer goes (a
// held stream would keep it while it is open).
const maxKeptData = 2 * eventBufSize

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
	// tail is an upstream body closed after its end marker and before its
	// end: its Close left the read of the rest to endTail, which the relay
	// runs once the answer's end is sent.
	tail atomic.Pointer[eventReader]
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

// BeforeRead is the upstream body's call before a read that may wait on
// the network (sseline.Reader's hook): it flushes.
func (h *flushHook) BeforeRead() { h.flush() }

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

// endTail reads the rest of the body whose Close was left pending (see
// eventReader.Close), if any, and closes it. Safe to call more than once
// and from any goroutine.
func (h *flushHook) endTail() {
	if e := h.tail.Swap(nil); e != nil {
		e.readTail()
		e.closeSrc()
	}
}

// hookedBody is an upstream body that is not an event stream: it flushes
// before every read.
type hookedBody struct {
	io.ReadCloser
	hook   *flushHook
	detach func() bool             // see eventReader
	end    context.CancelCauseFunc // see eventReader
}

func (b *hookedBody) Close() error {
	err := b.ReadCloser.Close()
	if b.end != nil {
		b.detach()
		b.end(nil)
	}
	return err
}

func (b *hookedBody) Read(p []byte) (int, error) {
	b.hook.flush()
	return b.ReadCloser.Read(p)
}

// eventReader is an upstream event stream that drops the events it finds
// malformed. Its reader uses one of two ways, never both:
//
//   - Read passes well-formed events through as they came (folded), for
//     the SDKs' own decoders: it checks every event's data itself.
//   - ReadEvent hands out events already split into their type and data,
//     for a decoder that validates what it decodes anyway (the OpenAI
//     adapter's lean decoder): that one asks SkipMalformed about an event
//     it cannot decode, so the JSON of an event is checked once.
//
// Both skip and count an event past maxEventBytes.
type eventReader struct {
	src     io.ReadCloser
	lr      sseline.Reader
	skipped *atomic.Int64
	hook    *flushHook  // nil: none
	tail    atomic.Bool // Release came before the body's end (see Close)
	// With a hook: detach stops the body's request from following the
	// attempt's cancellation (false when that came already); end ends
	// the request's own context, once the body is closed.
	detach func() bool
	end    context.CancelCauseFunc

	// Read's state.
	event    []byte // the event being read, its lines as they came; released: event[off:] is not read yet
	released bool
	off      int
	data     []byte // its data, joined, past its first data line (ReadEvent's data too)
	value    [2]int // its first data line's value, in event
	nData    int    // its data lines
	partial  []byte // a line longer than the read buffer, so far
	tooBig   bool
	err      error

	typ []byte // ReadEvent's event type
}

func newEventReader(body io.ReadCloser, skipped *atomic.Int64, hook *flushHook) *eventReader {
	e := &eventReader{src: body, lr: sseline.Reader{Src: body, Size: eventBufSize, MaxLead: maxLeadBytes}, skipped: skipped, hook: hook}
	if hook != nil {
		e.lr.Hook = hook
	}
	return e
}

// Close closes the body. When its consumer saw the end marker before the
// body's end (an upstream's chunked body ends in a write of its own after
// [DONE], which can come a moment later), the rest is read first, up to
// maxTailBytes and for at most tailWait: net/http keeps a connection
// whose body was read to its end, and drops one closed before it, which
// would have the next request dial (and, over TLS, shake hands) again.
//
// With the relay's flush hook, that read waits until the relay has sent
// the answer's end: the adapter closes the body at the end marker and
// hands out the answer's finish only then, so Close detaches the body's
// request from the attempt (which ends with the finish) and leaves the
// read and the close to the hook's endTail. Without the hook, or when
// the request is cancelled already, it reads here, after a flush of what
// the relay has encoded.
func (e *eventReader) Close() error {
	if !e.tail.Swap(false) {
		return e.closeSrc()
	}
	if e.hook != nil && e.detach != nil && e.detach() && e.hook.tail.CompareAndSwap(nil, e) {
		return nil
	}
	e.hook.flush()
	e.readTail()
	return e.closeSrc()
}

// readTail reads what is left of the body after its end marker, bounded
// by maxTailBytes and tailWait.
func (e *eventReader) readTail() {
	t := time.AfterFunc(tailWait, func() { _ = e.src.Close() })
	_, _ = io.CopyN(io.Discard, e.src, maxTailBytes)
	t.Stop()
}

// closeSrc closes the body and, with a hook, ends its request's context.
func (e *eventReader) closeSrc() error {
	err := e.src.Close()
	if e.end != nil {
		e.detach()
		e.end(nil)
	}
	return err
}

// tailWait is the longest an upstream body's Close waits for the body's
// end after the end marker; maxTailBytes, the most it reads of it. An
// upstream that sends more, or ends later, has its connection closed, as
// without the wait.
var tailWait = 2 * time.Millisecond

const maxTailBytes = 4 << 10

// Release gives the line reader's buffer back to its pool once its
// consumer, which reads with ReadEvent, has seen the stream's end marker
// (sseline.Reader.Release). The data ReadEvent returned last is invalid
// afterwards. Nothing is released while Read, the other way of reading,
// has an event under way. A body not at its end yet is noted: its Close
// reads the rest.
func (e *eventReader) Release() {
	if len(e.event) == e.off && len(e.partial) == 0 {
		e.lr.Release()
	}
	e.tail.Store(!e.lr.Ended())
}

// maxLeadBytes is the most of a JSON body in place of events that an
// upstream body reads (the adapters' MaxBody, as for one under a JSON
// Content-Type).
const maxLeadBytes = 64 << 10

// LeadingJSON returns the JSON the body opened with in place of events (a
// server's error object under text/event-stream, which no event is read
// from), nil when it did not: the provider adapters ask for it when the
// stream ends unfinished, to fail the attempt with the server's own
// error (see sseline.Reader.Lead).
func (e *eventReader) LeadingJSON() []byte { return e.lr.Lead() }

// ReadEvent returns the next event that has data or a type, split as the
// SDKs' decoders split events (a field's name ends at its first colon and
// one space after that is dropped; data lines are joined, each followed by
// a LF): its type and data, valid until the next call. An event with a
// type and no data line is none, as the SSE standard says: Anthropic's
// SDK decoder would end the stream at an "event: error" with no data, a
// line a server that broke sends before the message goes on or the body
// ends. At the end of the body it returns the error that
// ended it (io.EOF), and an event without its blank line is dropped. An
// event past maxEventBytes is skipped and counted; the JSON of the others
// is not looked at (see SkipMalformed).
func (e *eventReader) ReadEvent() (typ, data []byte, err error) {
	if cap(e.data) > maxKeptData {
		e.data = nil
	}
	e.typ, e.data = e.typ[:0], e.data[:0]
	var (
		lent    []byte // the data while it is one line in the read buffer
		hasData bool
		size    int  // the event's bytes so far
		tooBig  bool // past the cap: skipped to its end
		cont    bool // the rest of a long line comes next
		into    *[]byte
	)
	for {
		if lent != nil && !e.lr.Buffered() {
			e.data, lent = append(e.data, lent...), nil // the next read may move it
		}
		line, more, err := e.lr.Line()
		if err != nil {
			return nil, nil, err
		}
		if !cont && len(line) == 1 { // a blank line: the end of an event
			switch {
			case tooBig:
				e.skipped.Add(1)
			case hasData && lent != nil:
				return e.typ, lent, nil
			case hasData:
				return e.typ, e.data, nil
			}
			// No data line: as the SSE standard says, no event ("event:
			// error" alone does not end the stream).
			e.typ, e.data, lent, hasData, size, tooBig = e.typ[:0], e.data[:0], nil, false, 0, false
			continue
		}
		if size += len(line); size > maxEventBytes && !tooBig {
			tooBig, lent, e.data = true, nil, nil
		}
		if tooBig {
			cont = more
			continue
		}
		if cont { // more of a long line
			if into != nil {
				*into = append(*into, line...)
			}
		} else { // a field: its value, with the line's LF if it came
			name, value := sseline.Field(line, more)
			into = nil
			switch string(name) {
			case "data":
				hasData = true
				if lent == nil && len(e.data) == 0 && !more {
					lent = value // the common event: no copy
					break
				}
				if lent != nil {
					e.data, lent = append(e.data, lent...), nil
				}
				e.data = append(e.data, value...)
				into = &e.data
			case "event":
				e.typ = append(e.typ[:0], value...)
				into = &e.typ
			}
		}
		if cont = more; !more && into == &e.typ {
			e.typ = e.typ[:len(e.typ)-1] // its LF
		}
	}
}

// SkipMalformed reports whether an event's data (from ReadEvent), which
// its reader could not decode, is to be skipped: it is neither [DONE] nor
// a JSON object. Such an event is counted.
func (e *eventReader) SkipMalformed(data []byte) bool {
	if wellFormed(data) {
		return false
	}
	e.skipped.Add(1)
	return true
}

func (e *eventReader) Read(p []byte) (int, error) {
	for !e.released && e.err == nil {
		e.step()
	}
	if !e.released {
		return 0, e.err
	}
	n := copy(p, e.event[e.off:])
	if e.off += n; e.off == len(e.event) {
		e.event, e.off, e.released = e.event[:0], 0, false
		if cap(e.event) > maxKeptData {
			e.event = nil
		}
	}
	return n, nil
}

// step reads one line and, at the blank line that ends an event, releases
// or drops it.
func (e *eventReader) step() {
	chunk, more, err := e.lr.Line()
	if more { // a long line: gather it, up to the cap
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
	if cap(e.partial) > maxKeptData {
		e.partial = nil
	}
	if err != nil {
		if len(e.event) > 0 && !e.tooBig {
			e.released = true // a last event with no blank line: as it came
		}
		e.err = err
	}
}

func (e *eventReader) line(line []byte) {
	trimmed := bytes.TrimSuffix(line, []byte("\n"))
	if len(trimmed) == 0 { // the end of an event
		switch {
		case e.tooBig:
			e.skipped.Add(1)
			e.event = e.event[:0]
		case e.nData > 0 && !e.wellFormed():
			e.skipped.Add(1)
			e.event = e.event[:0]
		default: // well formed; or comments, ids: as they came
			e.event = append(e.event, line...)
			e.released = true
		}
		e.data, e.nData, e.tooBig = e.data[:0], 0, false
		if cap(e.data) > maxKeptData {
			e.data = nil
		}
		return
	}
	if e.tooBig {
		return
	}
	if len(e.event)+len(line) > maxEventBytes {
		e.tooBig, e.event, e.data, e.nData = true, e.event[:0], e.data[:0], 0
		return
	}
	at := len(e.event)
	e.event = append(e.event, line...)
	// A field's name ends at its first colon, as the SDKs' decoders split
	// it: a line "data" is a data line with nothing in it.
	name, v, _ := bytes.Cut(trimmed, []byte(":"))
	if string(name) != "data" {
		return
	}
	v = bytes.TrimPrefix(v, []byte(" "))
	if e.nData++; e.nData == 1 { // the common event: its data is checked where it lies
		start := at + len(trimmed) - len(v)
		e.value = [2]int{start, start + len(v)}
		return
	}
	if e.nData == 2 {
		e.data = append(e.data, e.event[e.value[0]:e.value[1]]...)
	}
	e.data = append(append(e.data, '\n'), v...)
}

// wellFormed reports whether the data of the event Read gathered is
// [DONE] or a JSON object.
func (e *eventReader) wellFormed() bool {
	if e.nData == 1 {
		return wellFormed(e.event[e.value[0]:e.value[1]])
	}
	return wellFormed(e.data)
}

// wellFormed reports whether an event's data is [DONE] or a JSON object.
func wellFormed(data []byte) bool {
	d := bytes.TrimSpace(data)
	if string(d) == "[DONE]" {
		return true
	}
	return len(d) > 0 && d[0] == '{' && json.Valid(d)
}
