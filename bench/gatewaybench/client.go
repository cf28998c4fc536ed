package main

// The load generator's HTTP/1.1 client. It shares the two cores with the
// upstream and the proxy, and net/http's client (a read and a write
// goroutine per connection, a header map, a context and a trace per
// request) cost about as much as the bare proxy it measured, so that the
// closed loop direct to the upstream was no faster than through a proxy.
// This one does a request in the calling goroutine over a kept-alive
// net.Conn: the request's bytes are built once per target and mode, the
// response is parsed in place (status line, the few headers that frame the
// body, a Content-Length or chunked body) and the answer is checked as it
// is read, with no allocation per request once a connection is warm.
// The held streams keep net/http (h2c needs it; they are not timed).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// reqTimeout bounds one request, as the net/http client's Timeout did.
const reqTimeout = 30 * time.Second

// A status, header or chunk-size line longer than a connection's reader
// (32 KiB), or an SSE line longer than the line reader (16 KiB), fails the
// request: the answers here have lines of about 150 bytes.
var (
	errLineTooLong = errors.New("line too long")
	errBadFraming  = errors.New("malformed response framing")
)

// rawClient sends one target's requests over a pool of kept-alive
// connections (one per concurrent request at most, reused LIFO).
type rawClient struct {
	addr string
	req  [2][]byte // [0] non-streaming, [1] streaming: the whole request
	want string    // the answer's content

	mu   sync.Mutex
	idle []*rawConn
}

type rawConn struct {
	nc     net.Conn
	br     *bufio.Reader // the connection
	body   body          // the current response's body, framed
	lines  *bufio.Reader // SSE lines, over body
	buf    []byte        // a JSON answer
	reused bool
	// idleUntil: past it the server may have closed the connection idle
	// (its Keep-Alive timeout; zero: none said).
	idleUntil time.Time
	idleFor   time.Duration // the last answer's Keep-Alive timeout
}

// newRawClient builds the request bytes for a chat completions URL and
// the extra headers (Portkey's) once.
func newRawClient(rawURL, model string, headers http.Header) (*rawClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("client: %s: only http:// is spoken", rawURL)
	}
	c := &rawClient{addr: u.Host, want: expected()}
	for i, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":%q,"stream":%t,"messages":[{"role":"user","content":"hello"}]}`, model, stream)
		var b bytes.Buffer
		fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: gatewaybench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", u.RequestURI(), u.Host, len(body))
		for k, vs := range headers {
			for _, v := range vs {
				fmt.Fprintf(&b, "%s: %s\r\n", k, v)
			}
		}
		b.WriteString("\r\n")
		b.WriteString(body)
		c.req[i] = b.Bytes()
	}
	return c, nil
}

// closeIdle closes the pooled connections.
func (c *rawClient) closeIdle() {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, rc := range idle {
		rc.nc.Close()
	}
}

// get takes the most recently used idle connection (closing those the
// server may have closed, by their Keep-Alive timeout), or dials one; fresh
// dials one anyway.
func (c *rawClient) get(ctx context.Context, fresh bool) (*rawConn, error) {
	if !fresh {
		now := time.Now()
		c.mu.Lock()
		for n := len(c.idle); n > 0; n = len(c.idle) {
			rc := c.idle[n-1]
			c.idle = c.idle[:n-1]
			if rc.idleUntil.IsZero() || now.Before(rc.idleUntil) {
				c.mu.Unlock()
				return rc, nil
			}
			rc.nc.Close()
		}
		c.mu.Unlock()
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	return newRawConn(nc, nc), nil
}

// newRawConn reads answers from r (nc itself but in tests) and writes to nc.
func newRawConn(nc net.Conn, r io.Reader) *rawConn {
	rc := &rawConn{nc: nc, br: bufio.NewReaderSize(r, 32<<10)}
	rc.body.br = rc.br
	rc.lines = bufio.NewReaderSize(&rc.body, 16<<10)
	return rc
}

func (c *rawClient) put(rc *rawConn) {
	rc.reused = true
	rc.idleUntil = time.Time{}
	if rc.idleFor > 0 {
		rc.idleUntil = time.Now().Add(rc.idleFor * 9 / 10)
	}
	c.mu.Lock()
	c.idle = append(c.idle, rc)
	c.mu.Unlock()
}

// do sends one request and reads its answer. A request that fails on a
// reused connection before any byte of the answer came is sent once more
// on a new one (the server may have closed the idle connection; net/http's
// client retries too).
func (c *rawClient) do(ctx context.Context, stream bool) result {
	if ctx.Err() != nil {
		return result{}
	}
	start := time.Now()
	for try := 0; try < 2; try++ {
		rc, err := c.get(ctx, try > 0)
		if err != nil {
			return result{}
		}
		r, keep, err := rc.roundTrip(c.req[b2i(stream)], stream, c.want, start)
		if keep {
			c.put(rc)
		} else {
			rc.nc.Close()
		}
		if errors.Is(err, errNothingRead) && rc.reused && !isTimeout(err) {
			continue
		}
		return r
	}
	return result{}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

var errNothingRead = errors.New("connection closed before the answer")

// roundTrip writes req and reads the answer; keep says whether the
// connection can carry another request.
func (rc *rawConn) roundTrip(req []byte, stream bool, want string, start time.Time) (r result, keep bool, err error) {
	if err := rc.nc.SetDeadline(start.Add(reqTimeout)); err != nil {
		return r, false, err
	}
	if _, err := rc.nc.Write(req); err != nil {
		return r, false, fmt.Errorf("%w: %w", errNothingRead, err)
	}
	if _, err := rc.br.Peek(1); err != nil {
		return r, false, fmt.Errorf("%w: %w", errNothingRead, err)
	}
	r.firstByte = time.Since(start)
	keep, err = rc.readAnswer(&r, stream, want, start)
	return r, keep, err
}

// readAnswer reads one response from rc.br: its head, then its body,
// checked against want (an SSE stream or a JSON answer) and timed.
func (rc *rawConn) readAnswer(r *result, stream bool, want string, start time.Time) (keep bool, err error) {
	h, err := readHead(rc.br)
	if err != nil {
		return false, err
	}
	rc.body.reset(h)
	rc.idleFor = h.idleFor
	if h.status != http.StatusOK {
		_, err := io.Copy(io.Discard, &rc.body)
		return err == nil && !h.close, err
	}
	if !stream {
		rc.buf = rc.buf[:0]
		for {
			if len(rc.buf) == cap(rc.buf) {
				rc.buf = append(rc.buf, 0)[:len(rc.buf)]
			}
			n, err := rc.body.Read(rc.buf[len(rc.buf):cap(rc.buf)])
			rc.buf = rc.buf[:len(rc.buf)+n]
			if err == io.EOF {
				break
			}
			if err != nil {
				return false, err
			}
		}
		r.firstContent = time.Since(start)
		r.done = r.firstContent
		r.ok = jsonIntact(rc.buf, want)
		return !h.close, nil
	}
	rc.lines.Reset(&rc.body)
	s := streamCheck{want: want}
	for {
		line, err := rc.lines.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return false, errLineTooLong
		}
		if len(line) > 0 && s.line(line) && r.firstContent == 0 {
			r.firstContent = time.Since(start)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return false, err
		}
	}
	r.done = time.Since(start)
	r.ok = s.ok()
	return !h.close, nil
}

// head is what frames a response's body.
type head struct {
	status  int
	length  int64 // Content-Length; -1: none
	chunked bool
	close   bool          // the connection ends after this response
	idleFor time.Duration // Keep-Alive: timeout=N (0: none)
}

// readHead reads a status line and headers (skipping 1xx answers).
func readHead(br *bufio.Reader) (head, error) {
	for {
		line, err := readLine(br)
		if err != nil {
			return head{}, err
		}
		// HTTP/1.x NNN reason
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
			return head{}, fmt.Errorf("%w: status line %q", errBadFraming, line)
		}
		status, err := strconv.Atoi(string(line[9:12]))
		if err != nil {
			return head{}, fmt.Errorf("%w: status line %q", errBadFraming, line)
		}
		h := head{status: status, length: -1, close: line[7] == '0'}
		for {
			line, err := readLine(br)
			if err != nil {
				return head{}, err
			}
			if len(line) == 0 {
				break
			}
			i := bytes.IndexByte(line, ':')
			if i <= 0 {
				return head{}, fmt.Errorf("%w: header %q", errBadFraming, line)
			}
			name, value := line[:i], bytes.TrimSpace(line[i+1:])
			switch {
			case asciiEqualFold(name, "Content-Length"):
				n, err := strconv.ParseInt(string(value), 10, 64)
				if err != nil || n < 0 {
					return head{}, fmt.Errorf("%w: Content-Length %q", errBadFraming, value)
				}
				h.length = n
			case asciiEqualFold(name, "Transfer-Encoding"):
				if !asciiEqualFold(value, "chunked") {
					return head{}, fmt.Errorf("%w: Transfer-Encoding %q", errBadFraming, value)
				}
				h.chunked = true
			case asciiEqualFold(name, "Keep-Alive"):
				h.idleFor = keepAliveTimeout(value)
			case asciiEqualFold(name, "Connection"):
				if asciiEqualFold(value, "close") {
					h.close = true
				} else if asciiEqualFold(value, "keep-alive") {
					h.close = false
				}
			}
		}
		if status >= 100 && status < 200 && status != http.StatusSwitchingProtocols {
			continue
		}
		if h.chunked {
			h.length = -1
		}
		if !h.chunked && h.length < 0 && status != http.StatusNoContent && status != http.StatusNotModified {
			h.close = true // the body runs to the end of the connection
		}
		return h, nil
	}
}

// keepAliveTimeout reads the timeout=N (seconds) of a Keep-Alive header
// (Node's servers send timeout=5 and close idle connections then).
func keepAliveTimeout(v []byte) time.Duration {
	for len(v) > 0 {
		var p []byte
		p, v, _ = bytes.Cut(v, []byte(","))
		k, n, ok := bytes.Cut(bytes.TrimSpace(p), []byte("="))
		if !ok || !asciiEqualFold(bytes.TrimSpace(k), "timeout") {
			continue
		}
		if s, err := strconv.Atoi(string(bytes.TrimSpace(n))); err == nil && s > 0 {
			return time.Duration(s) * time.Second
		}
	}
	return 0
}

// readLine returns a line without its CRLF (or LF); it is valid until the
// next read from br.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, errLineTooLong
	}
	if err == io.EOF && len(line) > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// body reads one response's body from br: Content-Length bytes, chunked
// (to the last chunk and its trailers), or, with neither, to the end of
// the connection. A body cut short is io.ErrUnexpectedEOF, never io.EOF.
type body struct {
	br      *bufio.Reader
	chunked bool
	left    int64 // bytes left: of the body, or of the current chunk; -1: to EOF
	done    bool
}

func (b *body) reset(h head) {
	b.chunked, b.left, b.done = h.chunked, h.length, false
	if h.chunked {
		b.left = 0
	}
	if h.status == http.StatusNoContent || h.status == http.StatusNotModified {
		b.chunked, b.left = false, 0
	}
}

func (b *body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	if b.chunked && b.left == 0 {
		if err := b.nextChunk(); err != nil {
			return 0, err
		}
		if b.done {
			return 0, io.EOF
		}
	}
	if !b.chunked && b.left == 0 {
		b.done = true
		return 0, io.EOF
	}
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	if err == io.EOF {
		if b.left == -1 {
			b.done = true
			return n, io.EOF
		}
		return n, io.ErrUnexpectedEOF
	}
	if err != nil {
		return n, err
	}
	if b.chunked && b.left == 0 { // the CRLF after a chunk's data
		line, err := readLine(b.br)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return n, err
		}
		if len(line) != 0 {
			return n, fmt.Errorf("%w: chunk data longer than its size", errBadFraming)
		}
	}
	return n, nil
}

// nextChunk reads a chunk-size line (and, after the last chunk, the trailers).
func (b *body) nextChunk() error {
	line, err := readLine(b.br)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return err
	}
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimSpace(line)
	n, err := strconv.ParseInt(string(line), 16, 64)
	if err != nil || n < 0 || len(line) == 0 || len(line) > 15 {
		return fmt.Errorf("%w: chunk size %q", errBadFraming, line)
	}
	if n > 0 {
		b.left = n
		return nil
	}
	for { // trailers, to the empty line
		line, err := readLine(b.br)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		if len(line) == 0 {
			b.done = true
			return nil
		}
	}
}

// streamCheck follows an SSE answer line by line: it is intact when every
// content delta, in order, spells want exactly, [DONE] came, and nothing
// came after it.
type streamCheck struct {
	want string
	off  int // how much of want has arrived
	bad  bool
	done bool
}

// line takes one line (with its line ending) and says whether it carried content.
func (s *streamCheck) line(l []byte) bool {
	l = bytes.TrimRight(l, "\r\n")
	if !bytes.HasPrefix(l, []byte("data:")) {
		return false
	}
	data := bytes.TrimSpace(l[5:])
	if bytes.Equal(data, []byte("[DONE]")) {
		if s.done {
			s.bad = true
		}
		s.done = true
		return false
	}
	c, ok := content(data)
	if !ok || len(c) == 0 {
		return false
	}
	if s.done || len(c) > len(s.want)-s.off || string(c) != s.want[s.off:s.off+len(c)] {
		s.bad = true
	} else {
		s.off += len(c)
	}
	return true
}

func (s *streamCheck) ok() bool { return !s.bad && s.done && s.off == len(s.want) }

// jsonIntact says whether b is a chat completion, valid JSON, whose one
// message content is want.
func jsonIntact(b []byte, want string) bool {
	if !json.Valid(b) || bytes.Count(b, []byte(`"content":`)) != 1 {
		return false
	}
	c, ok := content(b)
	return ok && string(c) == want
}

// content pulls a "content" string out of a chunk or an answer without a
// full JSON decode (the load generator shares the cores with the proxies);
// contents here carry no escapes.
func content(data []byte) ([]byte, bool) {
	i := bytes.Index(data, []byte(`"content":"`))
	if i < 0 {
		return nil, false
	}
	rest := data[i+len(`"content":"`):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return nil, false
	}
	return rest[:j], true
}
