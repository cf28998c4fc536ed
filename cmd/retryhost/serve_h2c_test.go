package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// h2cClient speaks HTTP/2 without TLS by prior knowledge, as a mesh sidecar
// or a load balancer in front of the gateway would.
func h2cClient() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

const demoStream = `{"model":"alpha","stream":true,"messages":[{"role":"user","content":"What is the capital of France?"}]}`

// With --h2c, streams multiplexed on one HTTP/2 connection each get the
// commit gate (the demo's refusal and rate limits stay invisible) and end
// with [DONE]; HTTP/1.1 clients share the port.
func TestServe_H2C(t *testing.T) {
	base, _, stop := startServe(t, "--h2c")
	c := h2cClient()
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			resp, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(demoStream))
			if !assertNoError(t, err) {
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			assertNoError(t, err)
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 || !streamDone(string(b)) ||
				strings.Contains(string(b), "sorry") || resp.Header.Get("X-Retryhost-Model") != "gamma" {
				t.Errorf("h2c stream: %s %d, model %q:\n%s", resp.Proto, resp.StatusCode, resp.Header.Get("X-Retryhost-Model"), b)
			}
		})
	}
	wg.Wait()

	resp, body := post(t, base+"/v1/chat/completions", demoStream)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, 1, resp.ProtoMajor, "HTTP/1.1 on the same port")

	// The header limit holds per HTTP/2 stream too: the server advertises it
	// (SETTINGS_MAX_HEADER_LIST_SIZE), so a well-behaved client refuses to
	// send, and the server's decoder enforces it on one that does not.
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(demoStream))
	require.NoError(t, err)
	req.Header.Set("X-Big", strings.Repeat("a", serveMaxHeaderBytes+1024))
	resp, err = c.Do(req)
	if err == nil {
		resp.Body.Close()
		require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	} else {
		require.ErrorContains(t, err, "larger than peer's advertised limit")
	}
	require.Equal(t, exitOK, stop())
}

// With --h2c one connection carries 250 streams at once (the README's
// limits table): a client opens 250 held streams on one connection, and
// the 251st, past the server's advertised limit, on a second one. It fails
// if the limit is raised (the 251st shares the first connection) or
// lowered.
//
// The client is Go's default (it dials when a connection is full), not
// one with StrictMaxConcurrentRequests (it waits for a slot): that one
// counts the requests queued behind the one waiting for a slot against
// the limit (currentRequestCountLocked: streams + reserved), so with 251
// requests at once it stalls below 250 open streams, how far below
// depending on how many opened before the last one queued — under -race,
// 12 to 100. The streams open one at a time here for the same reason: the
// client's count of a new connection is 100 until the server's SETTINGS.
func TestServe_H2CStreamsPerConnection(t *testing.T) {
	const streams = 250
	release := make(chan struct{})
	arrived := make(chan struct{}, streams+1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(delta, finish string) {
			fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`+"\n\n", delta, finish)
			w.(http.Flusher).Flush()
		}
		chunk(`{"role":"assistant","content":"held"}`, "null")
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		chunk(`{}`, `"stop"`)
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer up.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	var freed sync.Once
	free := func() { freed.Do(func() { close(release) }) }
	defer free() // on any exit: up.Close and wg.Wait wait for the held answers
	t.Setenv("UPSTREAM_KEY", "k")
	pol := filepath.Join(t.TempDir(), "policy.json")
	// The gap deadline well past the test's length, however slow the machine.
	require.NoError(t, os.WriteFile(pol, []byte(`{"models": [{"name": "m", "provider": "openai", "model": "m", "base_url": "`+up.URL+`/v1", "api_key_env": "UPSTREAM_KEY"}], `+
		`"deadlines": {"first_content": "1m", "gap": "10m"}}`), 0o600))
	base, _, stop := startServe(t, "--policy", pol, "--watch=false", "--h2c")

	var dials atomic.Int32
	tr := &http.Transport{Protocols: new(http.Protocols), DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	open := func() {
		wg.Go(func() {
			resp, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			if !assertNoError(t, err) {
				arrived <- struct{}{} // no upstream will see it: do not wait for one
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			assertNoError(t, err)
			if resp.ProtoMajor != 2 || !streamDone(string(b)) {
				t.Errorf("stream: %s %d:\n%s", resp.Proto, resp.StatusCode, b)
			}
		})
		<-arrived
	}
	for range streams {
		open()
	}
	require.EqualValues(t, 1, dials.Load(), "%d streams held on one connection", streams)
	open()
	require.EqualValues(t, 2, dials.Load(), "stream %d went on a second connection", streams+1)
	free()
	wg.Wait()
	require.Equal(t, exitOK, stop())
}

// Without --h2c, HTTP/2 without TLS is not spoken: a prior-knowledge client
// gets no answer over HTTP/2.
func TestServe_NoH2CByDefault(t *testing.T) {
	base, _, _ := startServe(t)
	c := h2cClient()
	defer c.CloseIdleConnections()
	resp, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(demoStream))
	if err == nil {
		resp.Body.Close()
		require.NotEqual(t, 2, resp.ProtoMajor)
		require.NotEqual(t, http.StatusOK, resp.StatusCode)
	}
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
