package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit"
	"github.com/retryhost/retryhost/policy"
)

// TestUnreadBodyBoundedByReadTimeout: a request the gateway answers without
// reading its body (a missing key, an unknown path, /healthz, the model
// list, a wrong method) and whose body never arrives in full must not hold
// its connection and goroutine without bound. net/http reads what a
// handler left of a body (up to 256 KiB) before it sends the answer, with
// no deadline of its own in a server without ReadTimeout (serve's, and
// httptest's): without the gateway's read deadline a client with no key
// could hold any number of connections by sending a Content-Length and
// never the body. The answer comes, and the connection is closed.
func TestUnreadBodyBoundedByReadTimeout(t *testing.T) {
	r := newRig(t, "", WithAPIKeys("client-key"), WithReadTimeout(100*time.Millisecond))
	for _, tc := range []struct {
		name, method, path, key string
		chunked                 bool
		status                  int
	}{
		{name: "chat without a key", method: "POST", path: "/v1/chat/completions", status: http.StatusUnauthorized},
		{name: "chat without a key, chunked", method: "POST", path: "/v1/chat/completions", chunked: true, status: http.StatusUnauthorized},
		{name: "messages without a key", method: "POST", path: "/v1/messages", status: http.StatusUnauthorized},
		{name: "healthz", method: "GET", path: "/healthz", status: http.StatusOK},
		{name: "readyz", method: "GET", path: "/readyz", status: http.StatusOK},
		{name: "models", method: "GET", path: "/v1/models", key: "client-key", status: http.StatusOK},
		{name: "metrics without a key", method: "GET", path: "/metrics", status: http.StatusUnauthorized},
		{name: "unknown path", method: "POST", path: "/v1/nope", key: "client-key", status: http.StatusNotFound},
		{name: "chat with the wrong method", method: "PUT", path: "/v1/chat/completions", key: "client-key", status: http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", r.srv.Listener.Addr().String())
			require.NoError(t, err)
			defer conn.Close()
			req := tc.method + " " + tc.path + " HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
			if tc.key != "" {
				req += "Authorization: Bearer " + tc.key + "\r\n"
			}
			if tc.chunked {
				req += "Transfer-Encoding: chunked\r\n\r\n8\r\n{\"model\"\r\n" // and never the rest
			} else {
				req += "Content-Length: 100\r\n\r\n{\"model\":" // 9 of the 100 bytes
			}
			_, err = io.WriteString(conn, req)
			require.NoError(t, err)
			// Generous: the gateway's read timeout is 100 ms; without it the
			// answer never comes.
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err, "no answer: the unread body holds the connection")
			_, err = io.Copy(io.Discard, resp.Body)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode)
			_, err = br.ReadByte()
			require.ErrorIs(t, err, io.EOF, "the connection stays open on a body that never came")
		})
	}
	r.healthy()
}

// TestTimeToFirstContentCountsTheFallbacks: time_to_first_content_seconds
// is from the request's start (retries and fail-overs included), also when
// the request moved on to its own fallbacks: a primary silent past its
// first-content deadline is part of the wait the client saw. (A lower
// bound only: the primary held the request at least its deadline.)
func TestTimeToFirstContentCountsTheFallbacks(t *testing.T) {
	r := newRig(t, `"rules": [], "deadlines": {"first_content": "300ms"}`)
	r.up["primary"].play(act{preamble: true, slowFirst: 5 * time.Second, chunks: []string{"late"}})
	r.up["backup"].play(act{chunks: []string{"backup answers"}})
	resp, body := r.rawStream(`{"model":"primary","stream":true,"fallbacks":["backup"],"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "backup", resp.Header.Get("X-Retryhost-Model"))
	var sum float64
	require.Eventually(t, func() bool {
		for _, line := range strings.Split(r.metricsText(), "\n") {
			if v, ok := strings.CutPrefix(line, `retryhost_gateway_time_to_first_content_seconds_sum{model="backup"} `); ok {
				var err error
				sum, err = strconv.ParseFloat(v, 64)
				require.NoError(t, err)
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	require.GreaterOrEqual(t, sum, 0.3, "the primary's wait is left out of the time to first content")
	r.healthy()
}

// TestAPIKeysAsReadFromFiles: a key an embedder passes as read from a file
// or a secret mount (os.ReadFile keeps the final newline) is the key
// without the whitespace around it, as a client's key is: it must not be
// a key no client can ever send. Both doors and SetAPIKeys alike.
func TestAPIKeysAsReadFromFiles(t *testing.T) {
	r := newRig(t, "", WithAPIKeys("k-one\n", "\tk-two "))
	chat := func(key string) error {
		c := r.newClient(key)
		_, err := c.Chat.Completions.New(context.Background(), params("primary"))
		return err
	}
	for _, key := range []string{"k-one", "k-two"} {
		require.NoError(t, chat(key), key)
		a := r.newAnthropicClient(key)
		_, err := a.Models.List(context.Background(), anthropic.ModelListParams{})
		require.NoError(t, err, key)
	}
	require.NoError(t, r.gw.SetAPIKeys("k-three\r\n"))
	require.NoError(t, chat("k-three"))
	err := chat("k-one")
	var apiErr *oai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
}

// TestKeepAlivesAfterCommitDoNotHoldTheStream: an upstream that, after its
// first content, sends only keep-alives (SSE comments, chunks with an empty
// delta or empty text, as some OpenAI-compatible servers do while they
// think) has gone silent as far as the answer goes: the gap deadline ends
// the stream with the in-band error instead of holding the client and the
// gateway's slot for as long as the upstream keeps them coming.
func TestKeepAlivesAfterCommitDoNotHoldTheStream(t *testing.T) {
	for _, tc := range []struct{ name, keepAlive string }{
		{"SSE comment", ": keep-alive\n\n"},
		{"empty delta", `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{}}]}` + "\n\n"},
		{"empty text", `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{"content":""}}]}` + "\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stop := make(chan struct{})
			up := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{"role":"assistant","content":"Paris"}}]}`+"\n\n")
				w.(http.Flusher).Flush()
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-r.Context().Done():
						return
					case <-stop:
						return
					case <-tick.C:
					}
					if _, err := io.WriteString(w, tc.keepAlive); err != nil {
						return
					}
					w.(http.Flusher).Flush()
				}
			}))
			defer close(stop)
			pol := `{"models": [{"name": "m", "provider": "openai", "model": "up", "base_url": "` + up.URL + `/v1", "api_key_env": "K"}],
				"deadlines": {"first_content": "1s", "gap": "300ms"}}`
			gw, err := New(context.Background(), Bytes("p.json", []byte(pol), policy.Options{Getenv: func(string) string { return "k" }}))
			require.NoError(t, err)
			srv := newTestServer(t, gw)
			defer func() { srv.Close(); require.NoError(t, gw.Close(context.Background())) }()
			c := oai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("x"), option.WithMaxRetries(0))
			// The test's own bound, far past the gap: without the gateway's
			// it is what ends the stream.
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			s := c.Chat.Completions.NewStreaming(ctx, params("m"))
			defer s.Close()
			var text string
			for s.Next() {
				for _, ch := range s.Current().Choices {
					text += ch.Delta.Content
				}
			}
			require.Equal(t, "Paris", text)
			require.Error(t, s.Err())
			require.NoError(t, ctx.Err(), "the keep-alives held the stream: %v", s.Err())
			require.Contains(t, s.Err().Error(), "stalled")
		})
	}
}

// TestUpstreamJSONAnswerNotCutByTheHeaderTimeout: a model with
// "upstream_json" is asked for a non-streamed answer, whose headers an
// OpenAI-compatible server sends only with the whole answer: there the
// policy's first_content bounds the whole answer (README), not the
// transport's header timeout (WithUpstreamHeaderTimeout), which would fail
// every answer longer to write than it (60 s by default) however long the
// policy allows. Streamed requests keep the header timeout.
func TestUpstreamJSONAnswerNotCutByTheHeaderTimeout(t *testing.T) {
	r := newRigJSON(t, `"rules": [], "deadlines": {"first_content": "10s"}`, WithUpstreamHeaderTimeout(200*time.Millisecond))
	r.up["primary"].play(act{holdFor: 600 * time.Millisecond, chunks: []string{"a long answer"}})
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "a long answer", cc.Choices[0].Message.Content)
	// The stream's headers still have their own deadline.
	r.up["primary"].play(act{holdFor: 5 * time.Second, chunks: []string{"late"}})
	got := r.stream("primary")
	require.Error(t, got.err)
	r.healthy()
}

// TestShutdownEndsABodyStillArriving: a request whose body still trickles
// in when the drain deadline passes is ended then, as a stream is, with a
// 503: not after the body read timeout (WithReadTimeout), which would keep
// Shutdown, and serve's exit, waiting past --drain for as long as it.
func TestShutdownEndsABodyStillArriving(t *testing.T) {
	r := newRig(t, "", WithReadTimeout(time.Minute))
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte(`{"model":"primary",`)) }() // and never the rest
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+"/v1/chat/completions", pr)
	require.NoError(t, err)
	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := r.hc.Do(req)
		if err != nil {
			answered <- nil
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answered <- resp
	}()
	require.Eventually(t, func() bool { return len(r.gw.sem) == 1 }, 10*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- r.gw.Shutdown(ctx) }()
	select {
	case err := <-shut:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(20 * time.Second): // far below the read timeout
		t.Fatal("Shutdown waits on a body past its drain deadline")
	}
	resp := <-answered
	require.NotNil(t, resp)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Empty(t, r.up["primary"].requests())
}

// TestShutdownEndsAStalledClientsStream: a client that reads nothing of
// its stream when the drain deadline passes does not keep Shutdown (and
// serve's exit) waiting for the rest of the write timeout: once the
// gateway stops, a write has a short grace, enough for the in-band error
// to reach a client that reads.
//
// The client's side of the connection stalls after the first write: a
// write blocks until its deadline, as one to a client whose buffers are
// full does, and says when it starts waiting. Inferring the stall from the
// upstream's silence instead (the relay stops reading it while it is
// blocked) mistook a relay slowed by a loaded machine for a blocked one:
// the stop then found the relay between writes, and its in-band error
// went out.
func TestShutdownEndsAStalledClientsStream(t *testing.T) {
	chunk := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{"content":"` +
		strings.Repeat("x", 1<<10) + `"}}]}` + "\n\n"
	up := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for r.Context().Err() == nil {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	pol := `{"models": [{"name": "m", "provider": "openai", "model": "up", "base_url": "` + up.URL + `/v1", "api_key_env": "K"}]}`
	logs := &testkit.LogBuffer{}
	gw, err := New(context.Background(), Bytes("p.json", []byte(pol), policy.Options{Getenv: func(string) string { return "k" }}),
		WithWriteTimeout(time.Minute), WithLogger(newJSONLogger(logs)))
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(gw)
	stalls := &stallingListener{Listener: srv.Listener, blocked: make(chan struct{})}
	srv.Listener = stalls
	srv.Start()
	defer func() { srv.Close(); require.NoError(t, gw.Close(context.Background())) }()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	body := streamBody("m")
	_, err = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body)
	require.NoError(t, err)
	select {
	case <-stalls.blocked:
	case <-time.After(30 * time.Second): // a guard against a hang
		t.Fatal("the relay never wrote past its first write")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- gw.Shutdown(ctx) }()
	select {
	case err := <-shut:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(30 * time.Second): // far below the write timeout
		t.Fatal("Shutdown waits on a stalled client past its drain deadline")
	}
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `"outcome":"client_closed"`) },
		10*time.Second, time.Millisecond, "%s", logs)
}

// stallingListener's connections stall after their first write: each
// later write waits until the connection's write deadline passes (or it
// is closed), as a write to a client that reads nothing does once the
// buffers between are full. blocked is closed when the first write waits.
type stallingListener struct {
	net.Listener
	blocked chan struct{}
	once    sync.Once
}

func (l *stallingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &stallingConn{Conn: c, l: l, changed: make(chan struct{}), closed: make(chan struct{})}, nil
}

type stallingConn struct {
	net.Conn
	l         *stallingListener
	mu        sync.Mutex
	writes    int
	deadline  time.Time
	changed   chan struct{} // closed, and replaced, when the deadline changes
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *stallingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.writes++; c.writes == 1 {
		c.mu.Unlock()
		return c.Conn.Write(p)
	}
	c.l.once.Do(func() { close(c.l.blocked) })
	for {
		d, changed := c.deadline, c.changed
		c.mu.Unlock()
		var expired <-chan time.Time
		if !d.IsZero() {
			tm := time.NewTimer(time.Until(d))
			defer tm.Stop()
			expired = tm.C
		}
		select {
		case <-expired:
			return 0, os.ErrDeadlineExceeded
		case <-c.closed:
			return 0, net.ErrClosed
		case <-changed:
		}
		c.mu.Lock()
	}
}

func (c *stallingConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *stallingConn) SetDeadline(t time.Time) error {
	if err := c.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *stallingConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
