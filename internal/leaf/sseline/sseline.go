// Package sseline reads a server-sent event stream line by line, for the
// two readers that split upstream events without copying them: the
// gateway's upstream filter and the provider adapters' event body.
package sseline

import (
	"bytes"
	"io"
	"math/bits"
	"sync"
)

// Reader reads an event stream line by line through its own fixed buffer:
// it folds the line endings SSE allows (CRLF, CR, LF) into LF in place as
// bytes arrive, drops a leading byte-order mark, and hands out lines as
// slices of the buffer, so a byte is copied once, from the network.
// Not safe for concurrent use (no body is).
type Reader struct {
	Src  io.Reader
	Size int // the buffer's size, made at the first read; a longer line comes in pieces
	// Hook, when set, runs before a read from Src, which may wait on the
	// network (the gateway flushes what its relay has encoded).
	Hook interface{ BeforeRead() }
	// MaxLead, when above 0, makes a stream that opens with JSON in place
	// of events (see Lead) be read whole, up to MaxLead bytes, instead of
	// line by line.
	MaxLead int

	buf     []byte
	r, w    int     // buf[r:w] is read and not yet handed out
	cr      bool    // the last byte read was a CR: a LF right after it is its pair
	started bool    // the byte-order mark was looked for
	opened  bool    // a line that is not blank came (Lead was looked for)
	err     error   // what ended Src (or Fail), returned after buf[r:w]
	one     [1]byte // what fill reads into while it holds no buffer (a local would escape)
	lead    []byte  // see Lead
}

// Lead returns the JSON the stream opened with in place of events, when
// MaxLead is set and it did: a stream whose first line that is not blank
// starts with '{' (no event stream's does: a field's name never does) is
// what some servers send a stream they cannot serve, a JSON error object
// under text/event-stream. Line reads such a stream whole (at most
// MaxLead bytes, line endings folded, from that line on), hands out no
// line of it and returns the error that ended it (io.EOF after MaxLead
// bytes); Lead returns what it read, nil for any other stream.
func (l *Reader) Lead() []byte { return l.lead }

// Ended reports whether Src has ended (its end, an error or Fail): no
// later call reads from it.
func (l *Reader) Ended() bool { return l.err != nil }

// Buffered reports whether a whole line is buffered, that is, whether the
// next call to Line leaves the slices it handed out before intact.
func (l *Reader) Buffered() bool { return bytes.IndexByte(l.buf[l.r:l.w], '\n') >= 0 }

// BufSize is the size of the buffer held (0 before the first read, and
// while the reader waits with nothing buffered): it never grows, whatever
// the lines' length.
func (l *Reader) BufSize() int { return len(l.buf) }

// Line returns the next line with its LF, as a slice of the buffer valid
// until the next call. A line longer than the buffer comes in pieces, with
// more set on all but its last. At the end of Src it returns what is left
// (no LF, maybe nothing) and the error that ended it, sticky.
func (l *Reader) Line() (line []byte, more bool, err error) {
	line, more, err = l.line()
	if !l.opened && l.MaxLead > 0 {
		return l.open(line, more, err)
	}
	return line, more, err
}

func (l *Reader) line() (line []byte, more bool, err error) {
	for {
		if i := bytes.IndexByte(l.buf[l.r:l.w], '\n'); i >= 0 {
			line = l.buf[l.r : l.r+i+1]
			l.r += i + 1
			return l.bom(line), false, nil
		}
		if l.err != nil {
			line = l.buf[l.r:l.w]
			l.r = l.w
			return l.bom(line), false, l.err
		}
		if l.buf != nil && l.r == 0 && l.w == len(l.buf) {
			l.w = 0
			return l.bom(l.buf), true, nil
		}
		l.fill()
	}
}

// open looks at the lines up to the first that is not blank, for Lead: a
// blank one is handed out as it came; one that starts with '{' is read
// on to the stream's end (or MaxLead) into lead and none of it is.
func (l *Reader) open(line []byte, more bool, err error) ([]byte, bool, error) {
	t := bytes.TrimLeft(line, " \t")
	if !more && (len(t) == 0 || t[0] == '\n') {
		return line, more, err // blank: an event stream may open with them
	}
	l.opened = true // the first piece of a long line is the line's start
	if len(t) == 0 || t[0] != '{' {
		return line, more, err
	}
	l.lead = append(l.lead, t...)
	for err == nil && len(l.lead) < l.MaxLead {
		line, _, err = l.line()
		l.lead = append(l.lead, line...)
	}
	if len(l.lead) > l.MaxLead {
		l.lead = l.lead[:l.MaxLead]
	}
	if err == nil {
		l.Fail(io.EOF) // past MaxLead: what follows is not read
		err = io.EOF
	}
	return nil, false, err
}

// Field splits a field line from Line (its first piece, when more) as
// the SDKs' decoders do: the name ends at the first colon and one space
// after it is dropped; a line without a colon is a name with an empty
// value. The value keeps the line's LF when the line came whole.
func Field(line []byte, more bool) (name, value []byte) {
	body := line
	if !more {
		body = line[:len(line)-1]
	}
	name, value = body, line[len(body):]
	if i := bytes.IndexByte(body, ':'); i >= 0 {
		name, value = body[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	return name, value
}

// Fail ends the stream with err: what is buffered is dropped and every
// later Line returns err.
func (l *Reader) Fail(err error) {
	l.err = err
	l.r = l.w
}

// bom drops a byte-order mark opening the stream.
func (l *Reader) bom(line []byte) []byte {
	if !l.started {
		l.started = true
		line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
	}
	return line
}

// fill reads once more from Src into the free end of the buffer, after
// moving what is left to its start. With nothing buffered, it gives the
// buffer back to a pool and waits for one byte without it, so that a
// stream waiting on the network (thousands of held streams through the
// gateway) keeps no buffer; the rest of what came is read by the next
// fill, into a buffer taken again.
func (l *Reader) fill() {
	if l.r > 0 {
		l.w = copy(l.buf, l.buf[l.r:l.w])
		l.r = 0
	}
	if l.Hook != nil {
		l.Hook.BeforeRead()
	}
	if l.w == 0 {
		l.putBuf()
		for range 100 {
			n, err := l.Src.Read(l.one[:])
			if n > 0 {
				l.takeBuf()
				l.buf[0] = l.one[0]
				l.w = l.Fold(l.buf[:1])
			}
			if err != nil {
				l.err = err
				return
			}
			if n > 0 {
				return // as below: a fold to nothing reads again from Line
			}
		}
		l.err = io.ErrNoProgress
		return
	}
	for range 100 {
		n, err := l.Src.Read(l.buf[l.w:])
		l.w += l.Fold(l.buf[l.w : l.w+n])
		if err != nil {
			l.err = err
			return
		}
		if n > 0 {
			return // n is what was read: a fold to nothing (the LF of a CRLF) reads again from Line
		}
	}
	l.err = io.ErrNoProgress
}

// Fold rewrites the line endings in b in place and returns its new length.
// A reader that hands out bytes rather than lines may use it on its own
// reads (never together with Line).
func (l *Reader) Fold(b []byte) int {
	if !l.cr && bytes.IndexByte(b, '\r') < 0 {
		return len(b) // the common case: nothing to do
	}
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

// bufPools hold the buffers of readers waiting with nothing buffered, one
// pool per power of two the size is under.
var bufPools [17]sync.Pool

func poolOf(size int) *sync.Pool {
	if i := bits.Len(uint(size)); i < len(bufPools) {
		return &bufPools[i]
	}
	return nil // larger buffers are not pooled
}

// takeBuf gives the reader a buffer of its size, pooled if one is.
func (l *Reader) takeBuf() {
	if l.buf != nil {
		return
	}
	if p := poolOf(l.Size); p != nil {
		if b, ok := p.Get().(*[]byte); ok && cap(*b) >= l.Size {
			l.buf = (*b)[:l.Size]
			*b = nil
			bufBoxes.Put(b)
			return
		}
	}
	l.buf = make([]byte, l.Size)
}

// Release gives the read buffer back to its pool when nothing is buffered
// in it, as a read that finds it empty does: a consumer that stops at its
// stream's end marker ([DONE]) and closes the body never makes that read,
// and the buffer was dropped with every stream. The lines returned so far
// are invalid afterwards. It is for the reader's own goroutine, between
// reads (never beside a Line in flight); a later Line takes a buffer
// again.
func (l *Reader) Release() {
	if l.r == l.w {
		l.r, l.w = 0, 0
		l.putBuf()
	}
}

// putBuf gives the reader's buffer, with nothing in it, back to the pool.
func (l *Reader) putBuf() {
	p := poolOf(len(l.buf))
	if l.buf == nil || p == nil {
		return
	}
	b, _ := bufBoxes.Get().(*[]byte)
	if b == nil {
		b = new([]byte)
	}
	*b, l.buf = l.buf[:cap(l.buf)], nil
	p.Put(b)
}

// bufBoxes recycles the pointers the pools hold buffers in.
var bufBoxes sync.Pool
