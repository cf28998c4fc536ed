package adapter

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"

	"github.com/retryhost/retryhost/internal/leaf/sseline"
)

// bom is the UTF-8 byte-order mark, which the SSE spec lets a stream open
// with and tells the parser to drop.
var bom = []byte{0xEF, 0xBB, 0xBF}

// SSEBody wraps the body of an event stream so that the SDKs' decoders,
// which split lines on "\n" only and take a leading byte-order mark for
// part of the first field's name, read it as the SSE spec says: a leading
// UTF-8 BOM is dropped and every "\r\n" and lone "\r" becomes "\n". It
// rewrites in place as it reads (no buffering of the body, no allocation
// per read) and keeps one bit of state for a "\r\n" split across reads.
// Close closes the wrapped body. Not safe for concurrent Reads (no body is).
//
// The body is an [EventBody] too: read with ReadEvent instead (never
// both), it splits the events itself, with one small buffer.
func SSEBody(rc io.ReadCloser) EventBody {
	return &sseBody{rc: rc, lr: sseline.Reader{Src: rc, Size: eventBufSize, MaxLead: MaxBody}}
}

// LeadingJSON returns the JSON the body opened with in place of events
// (a server's error object under text/event-stream), nil when it did not
// or has not been read that far. Only ReadEvent looks for it (not Read,
// the SDKs' decoders' way): see sseline.Reader.Lead. Stream.Recv asks a
// body for it when the stream ends before the provider finished it (see
// Stream.SetBody); the gateway's upstream bodies have it too.
func (b *sseBody) LeadingJSON() []byte { return b.lr.Lead() }

// EventBody is an event stream's body that splits its events itself, so
// that a decoder gets each event's data as one slice, with no line
// scanning and no copy of its own. The bodies SSEBody makes are
// EventBodies; so are the retryhost gateway's upstream bodies, which
// NormalizeSSE leaves alone (they are normalized already), and which also
// have a method SkipMalformed(data []byte) bool that a decoder calls with
// the data of an event it cannot decode: true means the event is to be
// skipped (the gateway counts it).
type EventBody interface {
	io.ReadCloser
	// ReadEvent returns the next event that has data or a type, split as
	// the SDKs' decoders split events (a field's name ends at its first
	// colon and one space after that is dropped; data lines are joined,
	// each followed by a LF): its type and its data, valid until the next
	// call. An event with a type and no data line comes with empty data
	// (a data line gives at least its LF): Anthropic's decoder keeps such
	// an event, OpenAI's drops it; an event with neither is none. At the end of the body it
	// returns the error that ended it (io.EOF); an event without its
	// blank line is dropped there.
	ReadEvent() (typ, data []byte, err error)
}

// Events returns body as an EventBody: itself if it is one, else
// SSEBody(body) (a body a middleware replaced after NormalizeSSE ran:
// normalizing it again changes nothing in a normalized one).
func Events(body io.ReadCloser) EventBody {
	if eb, ok := body.(EventBody); ok {
		return eb
	}
	return SSEBody(body)
}

// Releaser is an EventBody that can give its read buffer back once its
// consumer has seen the end marker and will read no more ([DONE]): the
// data ReadEvent returned last is invalid afterwards. It is called on the
// reading goroutine, between reads.
type Releaser interface{ Release() }

type sseBody struct {
	rc      io.ReadCloser
	started bool
	head    [3]byte
	pend    []byte // the opening bytes read to look for the BOM, still to deliver
	err     error  // the error that ended the opening read, after pend; sticky

	// ReadEvent's state: lr reads the body line by line (its Fold also
	// serves Read, the other way, never used with it); data and typ gather
	// an event that is not one line in lr's buffer.
	lr        sseline.Reader
	data, typ []byte
}

// eventBufSize is ReadEvent's read buffer: a longer line is gathered past
// it, so it need only hold a common event (a held stream keeps it).
// maxKeptData is the most ReadEvent keeps of what it gathered an event in.
const (
	eventBufSize = 1 << 10
	maxKeptData  = 4 << 10
)

// maxEventLine is the SDK decoder's line limit (bufio.MaxScanTokenSize<<9):
// a longer line ends the stream with bufio.ErrTooLong, as there.
const maxEventLine = bufio.MaxScanTokenSize << 9

func (b *sseBody) ReadEvent() (typ, data []byte, err error) {
	if cap(b.data) > maxKeptData {
		b.data = nil
	}
	b.typ, b.data = b.typ[:0], b.data[:0]
	var (
		lent    []byte // the data while it is one line in buf
		hasData bool
		long    int // the length of a long line so far
		into    *[]byte
	)
	for {
		if lent != nil && !b.lr.Buffered() {
			b.data, lent = append(b.data, lent...), nil // the next read may move it
		}
		line, more, err := b.lr.Line()
		if err != nil {
			return nil, nil, err
		}
		if long > 0 { // more of a long line
			n := len(line)
			if !more {
				n-- // its LF
			}
			if long += n; long >= maxEventLine {
				b.lr.Fail(bufio.ErrTooLong)
				return nil, nil, bufio.ErrTooLong
			}
			if into != nil {
				*into = append(*into, line...)
			}
		} else {
			if len(line) == 1 { // a blank line: the end of an event
				switch {
				case hasData && lent != nil:
					return b.typ, lent, nil
				case hasData:
					return b.typ, b.data, nil
				case len(b.typ) > 0:
					return b.typ, b.data[:0], nil
				}
				b.typ = b.typ[:0]
				continue
			}
			name, value := sseline.Field(line, more)
			into = nil
			switch string(name) {
			case "data":
				hasData = true
				if lent == nil && len(b.data) == 0 && !more {
					lent = value // the common event: no copy
					break
				}
				if lent != nil {
					b.data, lent = append(b.data, lent...), nil
				}
				b.data = append(b.data, value...)
				into = &b.data
			case "event":
				b.typ = append(b.typ[:0], value...)
				into = &b.typ
			}
			if more {
				long = len(line)
			}
		}
		if !more {
			long = 0
			if into == &b.typ {
				b.typ = b.typ[:len(b.typ)-1] // its LF
			}
		}
	}
}

func (b *sseBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if !b.started {
		b.started = true
		n, err := io.ReadAtLeast(b.rc, b.head[:], len(bom))
		b.pend = bytes.TrimPrefix(b.head[:n], bom)
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF // a body shorter than a BOM is just short
		}
		b.err = err
	}
	for {
		var n int
		var err error
		switch {
		case len(b.pend) > 0:
			n = copy(p, b.pend)
			b.pend = b.pend[n:]
			if len(b.pend) == 0 {
				err = b.err
			}
		case b.err != nil:
			err = b.err
		default:
			n, err = b.rc.Read(p)
		}
		n = b.lr.Fold(p[:n])
		if n > 0 || err != nil {
			return n, err
		}
		// Only a '\n' that completed a "\r\n" came: read on rather than
		// return 0, nil.
	}
}

func (b *sseBody) Close() error { return b.rc.Close() }

// Release gives the line reader's buffer back (Releaser).
func (b *sseBody) Release() { b.lr.Release() }

// NormalizeSSE is an SDK middleware (the signature of both SDKs'
// option.Middleware) that wraps a successful response's body in
// [SSEBody], unless it is an [EventBody] already. Stream calls install
// it; error responses are JSON and left alone.
func NormalizeSSE(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	resp, err := next(req)
	if err == nil && resp != nil && resp.Body != nil && resp.StatusCode < 300 {
		if _, ok := resp.Body.(EventBody); !ok {
			resp.Body = SSEBody(resp.Body)
		}
	}
	return resp, err
}
