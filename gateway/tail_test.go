package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/policy"
)

// tailUpstream answers every request with a one-word stream and its
// [DONE], flushed, then writes after (more bytes, unflushed until its
// handler returns) and returns when release is closed or its request
// ends: its chunked body ends only then. It counts the connections made
// to it.
func tailUpstream(t *testing.T, after string, release <-chan struct{}) (*httptest.Server, *atomic.Int32) {
	conns := &atomic.Int32{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`+"\n\n"+
			`data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n"+
			"data: [DONE]\n\n")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, after)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, conns
}

func tailGateway(t *testing.T, upURL string) *httptest.Server {
	pol := `{"models": [{"name": "primary", "provider": "openai", "model": "m", "base_url": "` + upURL + `/v1", "api_key_env": "K"}]}`
	gw, err := New(context.Background(), Bytes("p", []byte(pol), policy.Options{Getenv: func(string) string { return "k" }}))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, gw.Close(context.Background())) })
	return newTestServer(t, gw)
}

// readTo reads a streamed answer up to the first line that holds want
// and returns the text of the deltas read.
func readTo(t *testing.T, sc *bufio.Scanner, want string) string {
	var text strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, `"content":"`); i >= 0 {
			text.WriteString(strings.SplitN(line[i+len(`"content":"`):], `"`, 2)[0])
		}
		if strings.Contains(line, want) {
			return text.String()
		}
	}
	t.Fatalf("no %s: %v", want, sc.Err())
	return ""
}

// An upstream body whose end comes a moment after its [DONE] (a chunked
// body's last write is one of its own) is read to its end before it is
// closed, so that its connection serves the next request; the client has
// the whole answer, [DONE] included, before the gateway waits for that end.
func TestUpstreamConnectionKeptWhenItsBodyEndsAfterDone(t *testing.T) {
	defer func(w time.Duration) { tailWait = w }(tailWait)
	tailWait = 10 * time.Second // a guard: the upstream ends its body once the client has the [DONE]
	// Buffered: a gateway that held [DONE] back until the body's end would
	// have its upstream connection closed at tailWait, and fail, not hang.
	release := make(chan struct{}, 1)
	up, conns := tailUpstream(t, "", release)
	srv := tailGateway(t, up.URL)
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	for range 3 {
		resp, err := hc.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(streamBody("primary")))
		require.NoError(t, err)
		sc := bufio.NewScanner(resp.Body)
		require.Equal(t, "hi", readTo(t, sc, "data: [DONE]"))
		release <- struct{}{} // the upstream's handler returns: its body ends
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
	}
	require.Equal(t, int32(1), conns.Load(), "the upstream connection was not reused")
}

// The read after [DONE] is bounded: an upstream that does not end its body
// in tailWait, or sends more than maxTailBytes after [DONE], has its
// connection closed, and the client its whole answer.
func TestUpstreamTailAfterDoneIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after string
		wait  time.Duration
	}{
		{"no end within tailWait", "", time.Millisecond},
		{"more than maxTailBytes", ": " + strings.Repeat("x", 2*maxTailBytes) + "\n\n", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(w time.Duration) { tailWait = w }(tailWait)
			tailWait = tc.wait
			release := make(chan struct{})
			defer close(release)
			up, conns := tailUpstream(t, tc.after, release)
			srv := tailGateway(t, up.URL)
			hc := &http.Client{}
			defer hc.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a guard
			defer cancel()
			for range 2 {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(streamBody("primary")))
				require.NoError(t, err)
				resp, err := hc.Do(req)
				require.NoError(t, err)
				require.Equal(t, "hi", readTo(t, bufio.NewScanner(resp.Body), "data: [DONE]"))
				_, err = io.Copy(io.Discard, resp.Body)
				require.NoError(t, err, "the answer ends")
				require.NoError(t, resp.Body.Close())
			}
			require.Equal(t, int32(2), conns.Load())
		})
	}
}
