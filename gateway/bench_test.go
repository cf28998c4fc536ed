package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/policy"
)

// BenchmarkStream measures one streamed answer of 100 content chunks from a
// loopback upstream, read by a plain HTTP client: direct from the upstream,
// and through the gateway (parse, policy request, commit gate, relay).
// go test ./gateway -run '^$' -bench Stream -benchmem
func BenchmarkStream(b *testing.B) { benchStream(b, 100, true) }

// BenchmarkRequest is the per-request cost: a one-chunk answer, streamed
// and not (the gateway always asks the upstream for a stream).
func BenchmarkRequest(b *testing.B) {
	b.Run("stream", func(b *testing.B) { benchStream(b, 1, true) })
	b.Run("json", func(b *testing.B) { benchStream(b, 1, false) })
}

func benchStream(b *testing.B, n int, stream bool) {
	chunks := make([]string, n)
	for i := range chunks {
		chunks[i] = "word "
	}
	up := newUpstream("primary", act{chunks: chunks})
	defer up.srv.Close()
	pol := `{"models": [{"name": "primary", "provider": "openai", "model": "m", "base_url": "` + up.url() + `", "api_key_env": "K"}]}`
	gw, err := New(context.Background(), Bytes("bench", []byte(pol), policy.Options{Getenv: func(string) string { return "k" }}))
	require.NoError(b, err)
	defer gw.Close(context.Background())
	srv := newTestServer(b, gw)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	body := streamBody("primary")
	if !stream {
		body = `{"model":"primary","messages":[{"role":"user","content":"hi"}]}`
	}
	run := func(b *testing.B, url string) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := hc.Post(url, "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || n == 0 {
					b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
				}
			}
		})
	}
	if stream { // the test upstream answers only with streams
		b.Run("direct", func(b *testing.B) { run(b, up.url()+"/chat/completions") })
	}
	b.Run("gateway", func(b *testing.B) { run(b, srv.URL+"/v1/chat/completions") })
}
