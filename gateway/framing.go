package gateway

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// StrictFraming wraps ln so that an HTTP/1 request whose body length is
// ambiguous is refused with 400 and its connection closed, as RFC 9112
// (6.1, 6.3) asks, instead of being served: a request with both
// Content-Length and Transfer-Encoding, with Transfer-Encoding in
// HTTP/1.0, or with a header folded onto a second line (obs-fold). A proxy
// in front that reads such a body by one header and net/http by the other
// disagree on where the next request starts, which is how a request is
// smuggled past the proxy. net/http alone (Go 1.26) serves the first by
// Transfer-Encoding and keeps the connection, and ignores Transfer-Encoding
// in HTTP/1.0: the handler cannot tell, as net/http removes the header it
// did not follow.
//
// Each connection follows its requests' framing as net/http reads it
// (request head, Content-Length or chunked body, trailers); at the end of
// a refused head it hands net/http a malformed header line in place of
// the blank line, which net/http answers with its own "400 Bad Request"
// and "Connection: close", after the answers to the requests before it.
// Framing that net/http itself refuses (a bad chunk line, two different
// Content-Lengths, an unknown transfer coding) is left to it: it closes
// the connection. An HTTP/2 connection (h2c prior knowledge) is not
// looked at past its preface. It costs a look at each byte of request
// heads and chunk-size lines; bodies are counted, not read. Wrap the
// listener that yields plain HTTP/1 connections (inside TLS, not outside
// it). retryhost serve wraps its own.
func StrictFraming(ln net.Listener) net.Listener { return framingListener{ln} }

type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c}, nil
}

// framingConn is a connection whose incoming bytes pass through a framing
// tracker. Reads are the server's own (one goroutine at a time, as
// net/http reads); Close may come from another.
type framingConn struct {
	net.Conn
	f       framer
	pending []byte // what is left of the malformed line to hand over
	mu      sync.Mutex
	refused bool // a head was refused: the rest of the stream is dropped
}

// refusedLine replaces the blank line that ends a refused head: a header
// line without a colon, which net/http refuses with 400 and closes on.
const refusedLine = "Retryhost-Refused-Ambiguous-Framing\r\n\r\n"

func (c *framingConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	if c.f.state == frameRefused {
		return 0, io.EOF
	}
	n, err := c.Conn.Read(p)
	if i := c.f.feed(p[:n]); i >= 0 {
		// p[i] is the '\n' of the refused head's blank line (a '\r'
		// before it, here or already handed over, is harmless: net/http
		// trims it off the line below).
		c.mu.Lock()
		c.refused = true
		c.mu.Unlock()
		m := copy(p[i:], refusedLine)
		c.pending = []byte(refusedLine[m:])
		return i + m, nil
	}
	return n, err
}

// Close closes the connection. After a refused head it first half-closes
// and reads what the client still sends, for a moment: closing with unread
// data makes the kernel reset the connection, which can destroy the 400
// before the client reads it.
func (c *framingConn) Close() error {
	c.mu.Lock()
	refused := c.refused
	c.mu.Unlock()
	if refused {
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
			_ = c.Conn.SetReadDeadline(time.Now().Add(refusedLinger))
			_, _ = io.CopyN(io.Discard, c.Conn, refusedDrain)
		}
	}
	return c.Conn.Close()
}

// refusedLinger and refusedDrain bound what Close reads after a refused
// head, as net/http bounds its own wait after a 431.
const (
	refusedLinger = 500 * time.Millisecond
	refusedDrain  = 256 << 10
)

// CloseWrite half-closes the connection when the one wrapped can.
func (c *framingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// frameState is where a framer is in the byte stream of its connection.
type frameState uint8

const (
	frameHead      frameState = iota // a request head, line by line
	frameBody                        // a Content-Length body: left bytes to go
	frameChunkLine                   // a chunk-size line
	frameChunkData                   // a chunk's data: left bytes to go
	frameChunkEnd                    // the CRLF after a chunk's data
	frameTrailer                     // trailer lines, to a blank one
	framePass                        // not followed any further: net/http refuses the framing, or speaks HTTP/2
	frameRefused                     // a head was refused
)

// headerSpace is what net/http trims off a header value.
const headerSpace = " \t\r\n"

// maxFrameLine bounds the line a framer keeps: a longer line is followed
// only for its end. A request line that long has its version out of
// reach, and a Content-Length or Transfer-Encoding line its value: see
// lineDone and headDone.
const maxFrameLine = 4 << 10

// framer follows HTTP/1 request framing as net/http reads it: where each
// head ends, and how long the body after it is.
type framer struct {
	state frameState
	left  int64  // bytes to go in frameBody, frameChunkData; bytes seen in frameChunkEnd
	line  []byte // the current line, up to maxFrameLine bytes
	long  bool   // the current line was longer than maxFrameLine

	// The head being read.
	requestLine bool // its request line is read
	proto11     bool // its version is HTTP/1.1 or later
	cl          []string
	te          []string
	folded      bool // a header line was folded (obs-fold)
	tooLong     bool // a Content-Length or Transfer-Encoding line past maxFrameLine
}

// feed follows the bytes b, the next ones of the stream; it returns the
// index in b of the '\n' that ends a refused head, or -1.
func (f *framer) feed(b []byte) int {
	for i := 0; i < len(b); {
		switch f.state {
		case framePass, frameRefused:
			return -1
		case frameBody, frameChunkData:
			n := min(f.left, int64(len(b)-i))
			f.left -= n
			i += int(n)
			if f.left == 0 {
				if f.state == frameBody {
					f.state = frameHead
				} else {
					f.state = frameChunkEnd
				}
			}
		case frameChunkEnd:
			// net/http wants exactly "\r\n" after a chunk's data.
			if b[i] != "\r\n"[f.left] {
				f.state = framePass
				return -1
			}
			i++
			if f.left++; f.left == 2 {
				f.left, f.state = 0, frameChunkLine
			}
		default: // frameHead, frameChunkLine, frameTrailer: lines
			if f.state == frameHead && !f.requestLine && len(f.line) == 0 && !f.long && (b[i] == '\r' || b[i] == '\n') {
				i++ // before a request line (net/http skips a few after a POST, else refuses)
				continue
			}
			j := bytes.IndexByte(b[i:], '\n')
			end := len(b)
			if j >= 0 {
				end = i + j
			}
			seg := b[i:end]
			if room := maxFrameLine - len(f.line); len(seg) > room {
				seg, f.long = seg[:room], true
			}
			f.line = append(f.line, seg...)
			if j < 0 {
				return -1
			}
			i = end + 1
			refused := f.lineDone()
			f.line, f.long = f.line[:0], false
			if refused {
				return end
			}
		}
	}
	return -1
}

// lineDone takes the line just ended (without its '\n'); it reports
// whether it ended a head that is refused.
func (f *framer) lineDone() bool {
	switch f.state {
	case frameChunkLine:
		f.chunkLine()
		return false
	case frameTrailer:
		if len(bytes.TrimSuffix(f.line, []byte("\r"))) == 0 && !f.long {
			f.state = frameHead
		}
		return false
	}
	line := bytes.TrimSuffix(f.line, []byte("\r"))
	if !f.requestLine {
		f.requestLine = true
		if f.long {
			// The version is past what is kept. Transfer-Encoding is then
			// refused, as in HTTP/1.0; Content-Length means the same in
			// both.
			f.proto11 = false
			return false
		}
		if string(line) == "PRI * HTTP/2.0" {
			f.state = framePass // HTTP/2 prior knowledge: frames follow
			return false
		}
		// As net/http splits it: the version is what follows the second space.
		_, rest, _ := strings.Cut(string(line), " ")
		_, proto, _ := strings.Cut(rest, " ")
		major, minor, ok := http.ParseHTTPVersion(proto)
		if !ok {
			f.state = framePass // net/http refuses it
			return false
		}
		f.proto11 = major > 1 || (major == 1 && minor >= 1)
		return false
	}
	if len(line) == 0 && !f.long {
		return f.headDone()
	}
	if line[0] == ' ' || line[0] == '\t' {
		f.folded = true
		return false
	}
	name, value, _ := bytes.Cut(line, []byte(":"))
	switch {
	case strings.EqualFold(string(name), "Content-Length"):
		f.tooLong = f.tooLong || f.long
		f.cl = append(f.cl, strings.Trim(string(value), headerSpace))
	case strings.EqualFold(string(name), "Transfer-Encoding"):
		f.tooLong = f.tooLong || f.long
		f.te = append(f.te, strings.Trim(string(value), headerSpace))
	}
	return false
}

// headDone decides on the head just ended: refused (true), or the body
// that follows it.
func (f *framer) headDone() bool {
	cl, te, proto11, folded, tooLong := f.cl, f.te, f.proto11, f.folded, f.tooLong
	f.requestLine, f.proto11, f.cl, f.te, f.folded, f.tooLong = false, false, f.cl[:0], f.te[:0], false, false
	if folded || tooLong || (len(te) > 0 && (len(cl) > 0 || !proto11)) {
		f.state = frameRefused
		return true
	}
	switch {
	case len(te) > 0:
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") {
			f.state = framePass // net/http answers 501 and closes
			return false
		}
		f.state = frameChunkLine
	case len(cl) > 0:
		for _, v := range cl[1:] {
			if v != cl[0] {
				f.state = framePass // net/http refuses different lengths
				return false
			}
		}
		n, err := strconv.ParseUint(cl[0], 10, 63)
		if cl[0] == "" {
			n, err = 0, nil // no body, as net/http reads it with GODEBUG=httplaxcontentlength=1 (it refuses it otherwise)
		}
		if err != nil {
			f.state = framePass // net/http refuses it
			return false
		}
		if n > 0 {
			f.state, f.left = frameBody, int64(n)
		}
	}
	return false
}

// chunkLine reads a chunk-size line as net/http does: CRLF-terminated
// with no other CR, whitespace and an extension after ';' ignored, at
// most 16 hex digits. Anything else net/http refuses: the framer stops
// following.
func (f *framer) chunkLine() {
	line := f.line
	if f.long || len(line) == 0 || bytes.IndexByte(line, '\r') != len(line)-1 {
		f.state = framePass
		return
	}
	line = bytes.TrimRight(line[:len(line)-1], headerSpace)
	line, _, _ = bytes.Cut(line, []byte(";"))
	if len(line) == 0 || len(line) > 16 {
		f.state = framePass
		return
	}
	var n int64
	for _, c := range line {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			f.state = framePass
			return
		}
		n = n<<4 | int64(d)
	}
	if n < 0 {
		f.state = framePass
		return
	}
	if n == 0 {
		f.state = frameTrailer
		return
	}
	f.state, f.left = frameChunkData, n
}
