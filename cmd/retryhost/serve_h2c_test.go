package main

import (
	"io"
	"net/http"
	"strings"
	"sync"
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
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") ||
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
