package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// sseUpstream is an OpenAI-compatible server that answers status (a 503
// with an OpenAI error) or, at 200, streams "from NAME" under the model it
// was asked for, and records the models asked for.
type sseUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	status int
	asked  []string
}

func newSSEUpstream(t *testing.T, name string, status int) *sseUpstream {
	u := &sseUpstream{status: status}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Model string `json:"model"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		u.mu.Lock()
		u.asked = append(u.asked, body.Model)
		u.mu.Unlock()
		if u.status != http.StatusOK {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(u.status)
			fmt.Fprint(w, `{"error":{"message":"unavailable","type":"server_error"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"from %s\"},\"finish_reason\":null}]}\n\n", body.Model, name)
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", body.Model)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *sseUpstream) models() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.asked...)
}

// serve --upstream URL --fallback URL needs no policy: any model name is
// forwarded to the upstream, and on its failure to the fallback, under
// the gateway's default rules.
func TestServeUpstreamAndFallback(t *testing.T) {
	up, fb := newSSEUpstream(t, "upstream", http.StatusServiceUnavailable), newSSEUpstream(t, "fallback", http.StatusOK)
	base, stderr, _ := startServe(t, "--upstream", up.URL+"/v1", "--fallback", fb.URL+"/v1")
	require.Contains(t, stderr.String(), "passing every model through to "+up.URL+"/v1, then "+fb.URL+"/v1")
	resp, body := post(t, base+"/v1/chat/completions", `{"model":"any-model","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `"content":"from fallback"`)
	require.Contains(t, body, `"model":"any-model"`)
	require.Equal(t, "fallback", resp.Header.Get("X-Retryhost-Model"))
	require.Equal(t, "2", resp.Header.Get("X-Retryhost-Attempts"))
	require.Equal(t, []string{"any-model"}, up.models())
	require.Equal(t, []string{"any-model"}, fb.models())
}

// The flags' mistakes are usage errors, before anything listens.
func TestServeUpstreamUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--upstream", "http://127.0.0.1:1/v1", "--policy", "p.json"}, "give them or --policy, not both"},
		{[]string{"--fallback", "http://127.0.0.1:1/v1"}, "--fallback needs an --upstream"},
		{[]string{"--upstream", "nope"}, `--upstream "nope": want a URL, a provider`},
		{[]string{"--upstream", "openai=ftp://x"}, `is not an absolute http(s) URL`},
		{[]string{"--upstream", "vllm"}, "vllm needs its server's URL"},
	} {
		var stderr strings.Builder
		require.Equal(t, exitUsage, dispatch(context.Background(), append([]string{"serve", "--addr", "127.0.0.1:0"}, c.args...), io.Discard, &stderr), c.args)
		require.Contains(t, stderr.String(), c.want, c.args)
	}
}
