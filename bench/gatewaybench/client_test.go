package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sse is an SSE answer whose contents are parts, then (if done) [DONE].
func sse(done bool, parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		fmt.Fprintf(&b, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", p)
	}
	b.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
	if done {
		b.WriteString("data: [DONE]\n\n")
	}
	return b.String()
}

// chunked frames body in chunks of n bytes, with the last chunk (and a
// trailer) unless cut.
func chunked(body string, n int, last bool) string {
	var b strings.Builder
	for len(body) > 0 {
		k := min(n, len(body))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", k, body[:k])
		body = body[k:]
	}
	if last {
		b.WriteString("0\r\nX-Trailer: 1\r\n\r\n")
	}
	return b.String()
}

const (
	okSSEHead   = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	okJSONHead  = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
	answerJSON  = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"total_tokens":3}}`
	wantContent = "t0 t1 t2 "
)

func jsonAnswer(content string) string {
	b := fmt.Sprintf(answerJSON, content)
	return fmt.Sprintf(okJSONHead, len(b)) + b
}

func TestReadAnswer(t *testing.T) {
	whole := sse(true, "t0 ", "t1 ", "t2 ")
	tests := []struct {
		name     string
		stream   bool
		raw      string
		ok, keep bool
		err      bool // reading failed (the body was cut or malformed)
	}{
		{name: "chunked stream", stream: true, raw: okSSEHead + chunked(whole, 7, true), ok: true, keep: true},
		{name: "one chunk per event", stream: true, raw: okSSEHead + chunked(whole, 100, true), ok: true, keep: true},
		{name: "CRLF lines and chunk extensions", stream: true, raw: okSSEHead + "5;ext=1\r\ndata:\r\n" +
			chunked(strings.ReplaceAll(whole, "\n", "\r\n"), 11, true), ok: true, keep: true},
		{name: "Content-Length stream", stream: true, raw: fmt.Sprintf("HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s", len(whole), whole), ok: true, keep: true},
		{name: "stream to the end of the connection", stream: true, raw: "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + whole, ok: true},
		{name: "HTTP/1.0 stream, no length", stream: true, raw: "HTTP/1.0 200 OK\r\n\r\n" + whole, ok: true},
		{name: "no [DONE]", stream: true, raw: okSSEHead + chunked(sse(false, "t0 ", "t1 ", "t2 "), 7, true), keep: true},
		{name: "no [DONE], to the end of the connection", stream: true, raw: "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + sse(false, "t0 ", "t1 ", "t2 ")},
		{name: "a content missing", stream: true, raw: okSSEHead + chunked(sse(true, "t0 ", "t2 "), 7, true), keep: true},
		{name: "contents out of order", stream: true, raw: okSSEHead + chunked(sse(true, "t0 ", "t2 ", "t1 "), 7, true), keep: true},
		{name: "a content twice", stream: true, raw: okSSEHead + chunked(sse(true, "t0 ", "t1 ", "t1 ", "t2 "), 7, true), keep: true},
		{name: "content after [DONE]", stream: true, raw: okSSEHead + chunked(whole+sse(false, "t3 "), 7, true), keep: true},
		{name: "[DONE] twice", stream: true, raw: okSSEHead + chunked(whole+"data: [DONE]\n\n", 7, true), keep: true},
		{name: "cut after a chunk (no last chunk)", stream: true, raw: okSSEHead + chunked(whole, 7, false), err: true},
		{name: "cut inside a chunk", stream: true, raw: (okSSEHead + chunked(whole, 40, true))[:len(okSSEHead)+60], err: true},
		{name: "cut inside a chunk size line", stream: true, raw: okSSEHead + chunked(whole, 7, false) + "1", err: true},
		{name: "cut in the trailers", stream: true, raw: okSSEHead + chunked(whole, 7, false) + "0\r\nX-T: 1\r\n", err: true},
		{name: "chunk longer than its size", stream: true, raw: okSSEHead + "2\r\nabc\r\n0\r\n\r\n", err: true},
		{name: "bad chunk size", stream: true, raw: okSSEHead + "zz\r\nab\r\n0\r\n\r\n", err: true},
		{name: "Content-Length longer than the body", stream: true, raw: fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(whole)+1, whole), err: true},
		{name: "not 200", stream: true, raw: "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 3\r\n\r\nbad", keep: true},
		{name: "not 200, closing", stream: true, raw: "HTTP/1.1 500 Oops\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbad"},
		{name: "100 Continue first", stream: true, raw: "HTTP/1.1 100 Continue\r\n\r\n" + okSSEHead + chunked(whole, 7, true), ok: true, keep: true},
		{name: "an SSE line past the line reader", stream: true, raw: okSSEHead + chunked("data: "+strings.Repeat("x", 20<<10)+"\n\n"+whole, 4096, true), err: true},
		{name: "a header line past the connection's reader", stream: true, raw: "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("x", 40<<10) + "\r\n\r\n", err: true},
		{name: "not HTTP", stream: true, raw: "SSH-2.0-x\r\n\r\n", err: true},
		{name: "JSON answer", raw: jsonAnswer(wantContent), ok: true, keep: true},
		{name: "JSON answer, chunked", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(fmt.Sprintf(answerJSON, wantContent), 13, true), ok: true, keep: true},
		{name: "JSON answer, wrong content", raw: jsonAnswer("t0 t1 "), keep: true},
		{name: "JSON answer, two choices", raw: func() string {
			b := fmt.Sprintf(`{"choices":[{"message":{"content":%q}},{"message":{"content":%q}}]}`, wantContent, wantContent)
			return fmt.Sprintf(okJSONHead, len(b)) + b
		}(), keep: true},
		{name: "JSON answer, not JSON", raw: func() string {
			b := fmt.Sprintf(answerJSON, wantContent)[1:]
			return fmt.Sprintf(okJSONHead, len(b)) + b
		}(), keep: true},
		{name: "JSON answer, cut", raw: jsonAnswer(wantContent)[:len(jsonAnswer(wantContent))-5], err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := newRawConn(nil, strings.NewReader(tt.raw))
			var r result
			keep, err := rc.readAnswer(&r, tt.stream, wantContent, time.Now())
			if tt.err {
				require.Error(t, err)
				require.False(t, keep)
			} else {
				require.NoError(t, err)
				require.Equal(t, tt.keep, keep)
			}
			require.Equal(t, tt.ok, r.ok)
			if tt.ok {
				require.NotZero(t, r.firstContent)
			}
		})
	}
}

// A kept-alive connection carries answers back to back: each is framed
// exactly, whatever its framing, so the next one starts where it ended.
func TestReadAnswerBackToBack(t *testing.T) {
	whole := sse(true, "t0 ", "t1 ", "t2 ")
	raw := okSSEHead + chunked(whole, 5, true) +
		jsonAnswer(wantContent) +
		fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(whole), whole) +
		"HTTP/1.1 429 Too Many\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked("slow down", 4, true) +
		okSSEHead + chunked(whole, 64, true)
	rc := newRawConn(nil, strings.NewReader(raw))
	for i, want := range []struct{ stream, ok bool }{{true, true}, {false, true}, {true, true}, {true, false}, {true, true}} {
		var r result
		keep, err := rc.readAnswer(&r, want.stream, wantContent, time.Now())
		require.NoError(t, err, "answer %d", i)
		require.True(t, keep, "answer %d", i)
		require.Equal(t, want.ok, r.ok, "answer %d", i)
	}
	_, err := rc.br.Peek(1)
	require.ErrorIs(t, err, io.EOF)
}

// The client against the bench's own upstream, directly and through a bare
// reverse proxy: every answer intact, over one connection per worker.
func TestRawClientUpstream(t *testing.T) {
	defer func(p time.Duration) { *pace = p }(*pace)
	*pace = 0
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(upstreamHandler))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	u, err := url.Parse(up.URL)
	require.NoError(t, err)
	proxy := httptest.NewServer(newRevProxy(u))
	defer proxy.Close()

	for _, base := range []string{up.URL, proxy.URL} {
		c, err := newRawClient(base+"/v1/chat/completions", "m", http.Header{"X-Extra": {"1"}})
		require.NoError(t, err)
		for i := 0; i < 10; i++ {
			for _, stream := range []bool{true, false} {
				r := c.do(context.Background(), stream)
				require.True(t, r.ok, "%s stream=%t request %d", base, stream, i)
				require.NotZero(t, r.firstByte)
				require.GreaterOrEqual(t, r.firstContent, r.firstByte)
			}
		}
		c.mu.Lock()
		require.Len(t, c.idle, 1, "one connection carried them all")
		c.mu.Unlock()
		c.closeIdle()
	}
	require.Equal(t, int64(2), conns.Load(), "the upstream saw the client's connection and the proxy's")

	// A path the upstream does not serve: a 404, not intact, and the
	// connection stays usable.
	c, err := newRawClient(up.URL+"/nowhere", "m", nil)
	require.NoError(t, err)
	require.False(t, c.do(context.Background(), true).ok)
	c.mu.Lock()
	require.Len(t, c.idle, 1)
	c.mu.Unlock()
	c.closeIdle()
}

// A stream the server cuts (its connection closed before the last chunk)
// is not intact, and its connection is not reused.
func TestRawClientCutStream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, sse(false, "t0 ", "t1 "))
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	c, err := newRawClient(srv.URL+"/v1/chat/completions", "m", nil)
	require.NoError(t, err)
	c.want = "t0 t1 "
	r := c.do(context.Background(), true)
	require.False(t, r.ok)
	require.NotZero(t, r.firstContent, "the contents before the cut arrived")
	c.mu.Lock()
	require.Empty(t, c.idle)
	c.mu.Unlock()
}

// A server that closes a kept-alive connection after an answer: the next
// request, which finds it closed, is sent again on a new connection.
func TestRawClientRetriesClosedIdle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(conn, jsonAnswer(wantContent)) // says keep-alive, then closes
			}()
		}
	}()
	c, err := newRawClient("http://"+ln.Addr().String()+"/v1/chat/completions", "m", nil)
	require.NoError(t, err)
	c.want = wantContent
	require.True(t, c.do(context.Background(), false).ok)
	require.True(t, c.do(context.Background(), false).ok)
	require.Equal(t, int64(2), accepted.Load())

	// Two closed connections in the pool: the retry dials, it does not
	// take the other one.
	ctx := context.Background()
	a, err := c.get(ctx, true)
	require.NoError(t, err)
	b, err := c.get(ctx, true)
	require.NoError(t, err)
	for _, rc := range []*rawConn{a, b} {
		r, keep, err := rc.roundTrip(c.req[0], false, c.want, time.Now())
		require.NoError(t, err)
		require.True(t, r.ok)
		require.True(t, keep)
		c.put(rc)
	}
	require.Equal(t, int64(4), accepted.Load())
	require.True(t, c.do(ctx, false).ok)
	require.Equal(t, int64(5), accepted.Load())
	c.closeIdle()
}

// A connection idle past the server's Keep-Alive timeout is not reused.
func TestRawClientKeepAliveTimeout(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Keep-Alive", "timeout=5")
		_, _ = io.WriteString(w, fmt.Sprintf(answerJSON, wantContent))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := newRawClient(srv.URL+"/v1/chat/completions", "m", nil)
	require.NoError(t, err)
	c.want = wantContent
	require.True(t, c.do(context.Background(), false).ok)
	require.True(t, c.do(context.Background(), false).ok)
	require.Equal(t, int64(1), conns.Load(), "reused within the timeout")
	c.mu.Lock()
	require.Len(t, c.idle, 1)
	require.Equal(t, 5*time.Second, c.idle[0].idleFor)
	c.idle[0].idleUntil = time.Now().Add(-time.Millisecond) // as if idle that long
	c.mu.Unlock()
	require.True(t, c.do(context.Background(), false).ok)
	require.Equal(t, int64(2), conns.Load(), "a new connection past it")
	c.closeIdle()
}

func TestKeepAliveTimeout(t *testing.T) {
	for _, tt := range []struct {
		v    string
		want time.Duration
	}{
		{"timeout=5", 5 * time.Second},
		{"timeout=5, max=1000", 5 * time.Second},
		{"max=100,  TimeOut = 30 ", 30 * time.Second},
		{"max=100", 0},
		{"timeout=", 0},
		{"timeout=-1", 0},
		{"timeout=x", 0},
		{"", 0},
	} {
		require.Equal(t, tt.want, keepAliveTimeout([]byte(tt.v)), tt.v)
	}
}

// netHTTPDo is the request the load generator made with net/http's client
// before rawClient (the reference for BenchmarkClient).
func netHTTPDo(c *http.Client, url string, stream bool, want string) bool {
	body := fmt.Sprintf(`{"model":"m","stream":%t,"messages":[{"role":"user","content":"hello"}]}`, stream)
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if !stream {
		b, err := io.ReadAll(resp.Body)
		return err == nil && jsonIntact(b, want)
	}
	sc := bufio.NewScanner(resp.Body)
	s := streamCheck{want: want}
	for sc.Scan() {
		s.line(sc.Bytes())
	}
	return sc.Err() == nil && s.ok()
}

// BenchmarkClient: one request and its check, through this client and
// through net/http's, to the bench's upstream in this process (so each
// figure includes the same server's share).
func BenchmarkClient(b *testing.B) {
	defer func(p time.Duration) { *pace = p }(*pace)
	*pace = 0
	up := httptest.NewServer(http.HandlerFunc(upstreamHandler))
	defer up.Close()
	url := up.URL + "/v1/chat/completions"
	for _, stream := range []bool{true, false} {
		mode := map[bool]string{true: "stream", false: "json"}[stream]
		b.Run("raw/"+mode, func(b *testing.B) {
			c, err := newRawClient(url, "m", nil)
			require.NoError(b, err)
			defer c.closeIdle()
			b.ReportAllocs()
			for b.Loop() {
				if !c.do(context.Background(), stream).ok {
					b.Fatal("not intact")
				}
			}
		})
		b.Run("nethttp/"+mode, func(b *testing.B) {
			tr := &http.Transport{DisableCompression: true}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			want := expected()
			b.ReportAllocs()
			for b.Loop() {
				if !netHTTPDo(c, url, stream, want) {
					b.Fatal("not intact")
				}
			}
		})
	}
}
