// Package connlimit bounds the connections a server holds open at once.
//
// Every open connection costs a server memory (net/http keeps a goroutine
// and 8 KiB of buffers for each, idle or not) and a file descriptor, and a
// client decides how many it opens: a keep-alive pool left large, or an
// attacker. Past the bound, Accept closes the connection that has been idle
// the longest (one between two requests, which its client reopens when it
// needs it) to make room; with none idle the new connection waits,
// unanswered, for one to close or go idle. So idle
// connections never keep a new client out, and a request in progress is
// never cut to make room.
//
// golang.org/x/net/netutil.LimitListener has the waiting half; it cannot
// tell an idle connection from a busy one, which only the server knows:
// the listener learns it from http.Server.ConnState.
package connlimit

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Listener is a net.Listener that holds at most a set number of
// connections open. Set the server's ConnState to its ConnState method, or
// it sees no connection as idle and only waits. It is safe for concurrent
// use.
type Listener struct {
	net.Listener
	slots   chan struct{} // one token per open connection
	done    chan struct{} // closed by Close
	closing sync.Once
	wake    chan struct{} // a connection went idle while Accept waited (buffered, 1)

	mu   sync.Mutex
	idle map[*conn]time.Time // connections between requests, and since when

	reclaimed atomic.Int64
	waits     atomic.Int64
}

// New returns a Listener over ln that holds at most max connections open
// (max ≥ 1).
func New(ln net.Listener, max int) *Listener {
	return &Listener{Listener: ln, slots: make(chan struct{}, max), done: make(chan struct{}),
		wake: make(chan struct{}, 1), idle: make(map[*conn]time.Time)}
}

// Accept accepts a connection, then makes room for it: it closes the
// longest-idle connection if the limit is reached, or, with none idle,
// waits for one to close or go idle. Room is made only for a connection
// that arrived, so an idle one is never closed ahead of need. While one
// waits, the next ones wait in the kernel's accept queue. After Close it
// returns net.ErrClosed.
func (l *Listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	waited := false
	for {
		select {
		case l.slots <- struct{}{}:
			return &conn{Conn: nc, l: l}, nil
		default:
		}
		if l.reclaim() {
			continue
		}
		if !waited {
			waited = true
			l.waits.Add(1)
		}
		select {
		case l.slots <- struct{}{}:
			return &conn{Conn: nc, l: l}, nil
		case <-l.wake:
		case <-l.done:
			_ = nc.Close()
			return nil, net.ErrClosed
		}
	}
}

// reclaim closes the connection idle the longest, if any.
func (l *Listener) reclaim() bool {
	l.mu.Lock()
	var (
		oldest *conn
		since  time.Time
	)
	for c, t := range l.idle {
		if oldest == nil || t.Before(since) {
			oldest, since = c, t
		}
	}
	if oldest != nil {
		delete(l.idle, oldest)
	}
	l.mu.Unlock()
	if oldest == nil {
		return false
	}
	l.reclaimed.Add(1)
	_ = oldest.Close()
	return true
}

// Close closes the underlying listener and ends an Accept that waits for
// room (closing the connection it holds). The open connections stay open
// (http.Server.Shutdown closes them).
func (l *Listener) Close() error {
	l.closing.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// ConnState is an http.Server's ConnState hook: it tells the listener
// which connections are idle between requests (an HTTP/2 connection: with
// no stream open), the only ones it closes to make room.
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	if s == http.StateIdle && !c.closed.Load() {
		l.idle[c] = time.Now()
	} else {
		delete(l.idle, c)
	}
	l.mu.Unlock()
	if s == http.StateIdle {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// Open is the number of connections open.
func (l *Listener) Open() int { return len(l.slots) }

// Reclaimed is the number of idle connections closed to make room.
func (l *Listener) Reclaimed() int64 { return l.reclaimed.Load() }

// Waits is the number of accepts that found the limit reached and no idle
// connection to close, and waited for one to close.
func (l *Listener) Waits() int64 { return l.waits.Load() }

// conn gives its slot back when it is first closed.
type conn struct {
	net.Conn
	l      *Listener
	closed atomic.Bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.mu.Lock()
		delete(c.l.idle, c)
		c.l.mu.Unlock()
		<-c.l.slots
	}
	return err
}

// CloseWrite shuts the writing side when the connection can (TCP): net/http
// does it after an error answer (a 431, a 400) so that the client reads the
// answer before the connection closes, instead of a reset.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
