package adapter

import (
	"bytes"
	"errors"
	"io"
	"net/http"
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
func SSEBody(rc io.ReadCloser) io.ReadCloser { return &sseBody{rc: rc} }

type sseBody struct {
	rc      io.ReadCloser
	started bool
	cr      bool // the last byte seen was a '\r', already written as '\n'
	head    [3]byte
	pend    []byte // the opening bytes read to look for the BOM, still to deliver
	err     error  // the error that ended the opening read, after pend; sticky
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
		n = b.fold(p[:n])
		if n > 0 || err != nil {
			return n, err
		}
		// Only a '\n' that completed a "\r\n" came: read on rather than
		// return 0, nil.
	}
}

// fold rewrites line endings in p in place and returns the new length.
func (b *sseBody) fold(p []byte) int {
	if !b.cr && bytes.IndexByte(p, '\r') < 0 {
		return len(p) // the common case: nothing to do
	}
	w := 0
	for _, c := range p {
		switch {
		case c == '\n' && b.cr:
			b.cr = false // the "\n" of a "\r\n", already written
			continue
		case c == '\r':
			b.cr = true
			c = '\n'
		default:
			b.cr = false
		}
		p[w] = c
		w++
	}
	return w
}

func (b *sseBody) Close() error { return b.rc.Close() }

// NormalizeSSE is an SDK middleware (the signature of both SDKs'
// option.Middleware) that wraps a successful response's body in
// [SSEBody]. Stream calls install it; error responses are JSON and left
// alone.
func NormalizeSSE(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	resp, err := next(req)
	if err == nil && resp != nil && resp.Body != nil && resp.StatusCode < 300 {
		resp.Body = SSEBody(resp.Body)
	}
	return resp, err
}
