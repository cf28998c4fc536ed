package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A body declared larger than WithMaxBodyBytes is refused at once with 413,
// unread, and the connection closed: not after the read timeout.
func TestDeclaredBodyOverTheLimitIsRefusedAtOnce(t *testing.T) {
	r := newRig(t, "", WithMaxBodyBytes(256), WithReadTimeout(time.Hour))
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.srv.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	// A guard against a hang, not a timing assertion.
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	_, err = conn.Write([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{\"model\":"))
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	body := new(strings.Builder)
	_, _ = bufio.NewReader(resp.Body).WriteTo(body)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, body.String())
	require.Contains(t, body.String(), "request_too_large")
	require.True(t, resp.Close, "the connection closes")
	_, err = br.ReadByte()
	require.Error(t, err, "nothing follows on the connection")
	require.Empty(t, r.up["primary"].requests())
}

// One client (an IP address, or an API key when keys are required) holds
// at most WithMaxConcurrentPerClient requests; one more gets 429 with
// Retry-After while other clients are still served.
func TestPerClientConcurrencyLimit(t *testing.T) {
	r := newRig(t, "", WithMaxConcurrent(8), WithMaxConcurrentPerClient(1), WithAPIKeys("key-a", "key-b"))
	release := make(chan struct{})
	r.up["primary"].play(act{hold: release, chunks: []string{"slow"}}, act{chunks: []string{"ok"}}, act{chunks: []string{"ok"}})
	held := make(chan int, 1)
	go func() {
		resp, _ := r.rawStream(streamBody("primary"), "Authorization", "Bearer key-a")
		held <- resp.StatusCode
	}()
	require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 5*time.Second, time.Millisecond)

	// key-a again, even beside a made-up bearer: refused.
	resp, out := r.rawStream(streamBody("primary"), "X-Api-Key", "key-a", "Authorization", "Bearer made-up")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, out)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Contains(t, out, "client_busy")
	require.Len(t, r.up["primary"].requests(), 1, "the refused request reached no upstream")
	// key-b, from the same address: served.
	resp, out = r.rawStream(streamBody("primary"), "Authorization", "Bearer key-b")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	req, err := http.NewRequest(http.MethodGet, r.srv.URL+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer key-b")
	mresp, err := r.hc.Do(req)
	require.NoError(t, err)
	m, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	require.Contains(t, string(m), "retryhost_gateway_client_busy_rejections_total 1\n")

	close(release)
	require.Equal(t, http.StatusOK, <-held)
	// The share frees when the request ends.
	require.Eventually(t, func() bool {
		r.gw.mu.Lock()
		defer r.gw.mu.Unlock()
		return len(r.gw.perClient) == 0
	}, 5*time.Second, time.Millisecond)
	resp, out = r.rawStream(streamBody("primary"), "Authorization", "Bearer key-a")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
}

// Without keys a client is its IP address.
func TestPerClientConcurrencyLimitByAddress(t *testing.T) {
	r := newRig(t, "", WithMaxConcurrent(8), WithMaxConcurrentPerClient(1))
	release := make(chan struct{})
	r.up["primary"].play(act{hold: release, chunks: []string{"slow"}}, act{chunks: []string{"ok"}})
	done := make(chan streamed, 1)
	go func() { done <- r.stream("primary") }()
	require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 5*time.Second, time.Millisecond)
	resp, out := r.rawStream(streamBody("primary"))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, out)
	require.Contains(t, out, "client_busy")
	close(release)
	require.NoError(t, (<-done).err)
}
