package connlimit

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs an http.Server over a Listener of max connections; handler
// answers "ok" unless hold has a channel for the request's path, which it
// waits on first.
func serve(t *testing.T, max int, hold map[string]chan struct{}) (*Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := New(ln, max)
	srv := &http.Server{ConnState: l.ConnState, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ch := hold[r.URL.Path]; ch != nil {
			<-ch
		}
		_, _ = io.WriteString(w, "ok")
	})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.ErrorIs(t, <-served, http.ErrServerClosed)
	})
	return l, ln.Addr().String()
}

// client is one kept-alive HTTP/1.1 connection.
type client struct {
	nc net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	return &client{nc: nc, br: bufio.NewReader(nc)}
}

func (c *client) send(t *testing.T, path string) {
	t.Helper()
	_, err := io.WriteString(c.nc, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
}

// answer reads one answer within wait.
func (c *client) answer(wait time.Duration) (string, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func (c *client) get(t *testing.T, path string) {
	t.Helper()
	c.send(t, path)
	got, err := c.answer(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "ok", got)
}

// closedByServer reports whether the server closed c (it reads EOF).
func (c *client) closedByServer(wait time.Duration) bool {
	_ = c.nc.SetReadDeadline(time.Now().Add(wait))
	_, err := c.br.ReadByte()
	return errors.Is(err, io.EOF)
}

func TestIdleConnectionsMakeRoomOldestFirst(t *testing.T) {
	l, addr := serve(t, 2, nil)
	a, b := dial(t, addr), dial(t, addr)
	a.get(t, "/")
	time.Sleep(10 * time.Millisecond) // a has been idle longer than b
	b.get(t, "/")

	c := dial(t, addr)
	c.get(t, "/") // served: there was no room, so the longest-idle connection was closed
	require.True(t, a.closedByServer(10*time.Second), "a, idle the longest, was closed")
	b.get(t, "/") // b is still open and served
	require.Equal(t, int64(1), l.Reclaimed())
	require.Zero(t, l.Waits())
	require.Equal(t, 2, l.Open())
}

func TestBusyConnectionsAreNeverCut(t *testing.T) {
	release := make(chan struct{})
	l, addr := serve(t, 1, map[string]chan struct{}{"/slow": release})
	a := dial(t, addr)
	a.send(t, "/slow")
	require.Eventually(t, func() bool { return l.Open() == 1 }, 10*time.Second, time.Millisecond)

	b := dial(t, addr) // the kernel completes the handshake; the server does not accept it yet
	b.send(t, "/")
	_, err := b.answer(200 * time.Millisecond)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "no room while a's request runs: b waits")
	require.Eventually(t, func() bool { return l.Waits() == 1 }, 10*time.Second, time.Millisecond)
	require.Zero(t, l.Reclaimed(), "a busy connection is not closed")

	close(release)
	got, err := a.answer(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "ok", got, "a's request finished whole")
	// a is now idle: it makes room for b, which is served.
	got, err = b.answer(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "ok", got)
	require.True(t, a.closedByServer(10*time.Second))
	require.Equal(t, int64(1), l.Reclaimed())
}

func TestCloseEndsAWaitingAccept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := New(ln, 1)
	first, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer first.Close()
	c, err := l.Accept()
	require.NoError(t, err)
	defer c.Close()

	second := dial(t, ln.Addr().String())
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		accepted <- err
	}()
	select {
	case err := <-accepted:
		t.Fatalf("accepted past the limit: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	require.Eventually(t, func() bool { return l.Waits() == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, l.Close())
	require.ErrorIs(t, <-accepted, net.ErrClosed)
	require.True(t, second.closedByServer(10*time.Second), "the connection that waited is closed")
	_, err = l.Accept()
	require.ErrorIs(t, err, net.ErrClosed)
}

func TestSlotGivenBackOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := New(ln, 2)
	defer l.Close()
	var conns []net.Conn
	for range 2 {
		nc, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer nc.Close()
		c, err := l.Accept()
		require.NoError(t, err)
		conns = append(conns, c)
	}
	require.Equal(t, 2, l.Open())
	require.NoError(t, conns[0].Close())
	_ = conns[0].Close()
	require.Equal(t, 1, l.Open(), "a second Close gives back nothing")
	// A closed connection told idle afterwards is not kept as one.
	l.ConnState(conns[0], http.StateIdle)
	require.False(t, l.reclaim())
	l.ConnState(conns[1], http.StateIdle)
	l.ConnState(conns[1], http.StateActive)
	require.False(t, l.reclaim(), "an active connection is never closed to make room")
	require.NoError(t, conns[1].Close())
	require.Zero(t, l.Open())
}
