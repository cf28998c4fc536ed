package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// framingServer serves on loopback, through StrictFraming when strict, a
// handler that reads each body and records the request's path.
func framingServer(t *testing.T, strict bool) (addr string, paths func() []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	if strict {
		ln = StrictFraming(ln)
	}
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
		_, _ = io.WriteString(w, r.URL.Path)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return ln.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// exchange writes raw on a new connection and reads every answer until the
// connection ends; closed reports whether it ended (rather than waited).
func exchange(t *testing.T, addr, raw string) (answers []*http.Response, bodies []string, closed bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	// A guard against a hang, not a timing assertion: a connection kept
	// open ends the reading with a timeout.
	require.NoError(t, conn.SetDeadline(time.Now().Add(3*time.Second)))
	_, err = io.WriteString(conn, raw)
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return answers, bodies, !(errors.As(err, &ne) && ne.Timeout())
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers, bodies = append(answers, resp), append(bodies, string(b))
	}
}

const smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"

// Go 1.26's server alone serves a request with both Content-Length and
// Transfer-Encoding by the latter, keeps the connection, and serves what
// follows the chunked body as a request of its own: the smuggling that
// StrictFraming exists for. If this fails, net/http has changed, and
// StrictFraming may have become redundant.
func TestNetHTTPAloneServesAmbiguousFraming(t *testing.T) {
	addr, paths := framingServer(t, false)
	answers, _, _ := exchange(t, addr, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+smuggled)
	require.Len(t, answers, 2)
	require.Equal(t, http.StatusOK, answers[0].StatusCode)
	require.False(t, answers[0].Close)
	require.Equal(t, []string{"/a", "/smuggled"}, paths())
}

// A request whose body length is ambiguous gets 400, after the answers to
// the requests before it on its connection, and the connection closes:
// nothing after it is served.
func TestStrictFramingRefusesAmbiguousRequests(t *testing.T) {
	good := "POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok"
	tests := []struct {
		name string
		head string
	}{
		{name: "content-length then transfer-encoding", head: "POST /bad HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{name: "transfer-encoding then content-length", head: "POST /bad HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n"},
		{name: "names in any case", head: "POST /bad HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\nCONTENT-LENGTH: 5\r\n\r\n0\r\n\r\n"},
		{name: "bare line feeds", head: "POST /bad HTTP/1.1\nHost: x\nContent-Length: 5\nTransfer-Encoding: chunked\n\n0\r\n\r\n"},
		{name: "an unknown coding beside content-length", head: "POST /bad HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: identity\r\n\r\nhello"},
		{name: "transfer-encoding in HTTP/1.0", head: "POST /bad HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{name: "transfer-encoding in HTTP/1.0 beside content-length", head: "POST /bad HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc"},
		{name: "a folded content-length", head: "POST /bad HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n 5\r\n\r\nhello"},
		{name: "a request line too long to read its version", head: "POST /bad?" + strings.Repeat("q", 8<<10) + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr, paths := framingServer(t, true)
			answers, bodies, closed := exchange(t, addr, good+tc.head+smuggled)
			require.Len(t, answers, 2, "%q", bodies)
			require.Equal(t, http.StatusOK, answers[0].StatusCode)
			require.Equal(t, "/first", bodies[0])
			require.Equal(t, http.StatusBadRequest, answers[1].StatusCode, bodies[1])
			require.True(t, answers[1].Close, "the answer says the connection closes")
			require.True(t, closed, "the connection closed")
			require.Equal(t, []string{"/first"}, paths())
		})
	}
}

// Between requests StrictFraming follows each body as net/http reads it,
// so that what looks like a head inside a body is never taken for one and
// the head after the body is checked: the last request is refused, none
// before it.
func TestStrictFramingFollowsBodies(t *testing.T) {
	fake := "POST /inside HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
	stream := "" +
		// A Content-Length body that holds a refused head.
		"POST /cl HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(fake)) + "\r\n\r\n" + fake +
		// A chunked body, with extensions, a head in its data and a trailer.
		"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"3;name=value\r\nabc\r\n" + strconv.FormatInt(int64(len(fake)), 16) + " \r\n" + fake + "\r\n0\r\nX-Trailer: " + "1\r\n\r\n" +
		// Blank lines after a POST, which net/http skips.
		"\r\n" +
		// Bare line feeds, and no body.
		"GET /bare HTTP/1.1\nHost: x\n\n" +
		// Content-Length 0, twice alike.
		"POST /zero HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n" +
		// A long request line with a body.
		"POST /long?" + strings.Repeat("q", 8<<10) + " HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc" +
		// Then one to refuse.
		"POST /bad HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled
	addr, paths := framingServer(t, true)
	answers, bodies, closed := exchange(t, addr, stream)
	require.Len(t, answers, 6, "%q", bodies)
	require.Equal(t, http.StatusBadRequest, answers[5].StatusCode)
	require.True(t, closed)
	require.Equal(t, []string{"/cl", "/chunked", "/bare", "/zero", "/long"}, paths())

	// The same stream split at every size refuses at the same byte.
	var whole framer
	at := whole.feed([]byte(stream))
	require.Positive(t, at)
	for size := 1; size <= 64; size++ {
		var f framer
		got := -1
		for off := 0; off < len(stream) && got < 0; off += size {
			if i := f.feed([]byte(stream[off:min(off+size, len(stream))])); i >= 0 {
				got = off + i
			}
		}
		require.Equal(t, at, got, "split every %d bytes", size)
	}
}

// The 400 reaches a client that sent the refused request's body after its
// head, and reads only then: the connection is not reset under the answer
// (closing with unread data makes the kernel reset it).
func TestStrictFramingAnswersAClientStillSending(t *testing.T) {
	addr, paths := framingServer(t, true)
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second))) // a guard against a hang
	_, err = io.WriteString(conn, "POST /bad HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n")
	require.NoError(t, err)
	// The answer is written once the head is read; the body is sent after
	// it, and the answer read only when all of it is sent.
	br := bufio.NewReader(conn)
	_, err = br.Peek(1)
	require.NoError(t, err)
	chunk := "10000\r\n" + strings.Repeat("x", 1<<16) + "\r\n"
	for range 4 {
		_, err = io.WriteString(conn, chunk)
		require.NoError(t, err)
	}
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.True(t, resp.Close)
	require.Empty(t, paths())
}
