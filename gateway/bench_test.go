package gateway

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"sync"
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

// BenchmarkHeldStreams holds 500 streams open at once (each has had its
// first content; the upstream holds the rest) and reports the memory they
// take per stream — heap and goroutine stacks in use, after a GC — read
// directly from the upstream, through a bare httputil.ReverseProxy and
// through the gateway. Client and upstream share the process, so compare
// the rows: what a hop adds is its row minus direct's.
// go test ./gateway -run '^$' -bench HeldStreams -benchtime 2x
func BenchmarkHeldStreams(b *testing.B) {
	const n = 500
	up := newUpstream("primary")
	defer up.srv.Close()
	pol := `{"models": [{"name": "primary", "provider": "openai", "model": "m", "base_url": "` + up.url() + `", "api_key_env": "K"}]}`
	gw, err := New(context.Background(), Bytes("bench", []byte(pol), policy.Options{Getenv: func(string) string { return "k" }}),
		WithUpstreamConns(4*n), WithMaxConcurrent(4*n))
	require.NoError(b, err)
	defer gw.Close(context.Background())
	srv := newTestServer(b, gw)
	u, err := url.Parse(up.srv.URL)
	require.NoError(b, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rpt := &http.Transport{MaxIdleConnsPerHost: 4 * n}
	defer rpt.CloseIdleConnections()
	rp.Transport = rpt
	rps := newTestServer(b, rp)
	hold := func(b *testing.B, base string) {
		var heap, stack float64
		for b.Loop() {
			release := make(chan struct{})
			up.play(act{chunks: []string{"held "}, afterText: release})
			hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			var wg sync.WaitGroup
			opened := make(chan struct{}, n)
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := hc.Post(base+"/chat/completions", "application/json", strings.NewReader(streamBody("primary")))
					if err != nil {
						opened <- struct{}{}
						return
					}
					defer resp.Body.Close()
					sc := bufio.NewScanner(resp.Body)
					first := true
					for sc.Scan() {
						if first && strings.Contains(sc.Text(), "held") {
							first = false
							opened <- struct{}{}
						}
					}
				}()
			}
			for range n {
				<-opened
			}
			runtime.GC()
			runtime.ReadMemStats(&ms1)
			heap += float64(ms1.HeapInuse) - float64(ms0.HeapInuse)
			stack += float64(ms1.StackInuse) - float64(ms0.StackInuse)
			close(release)
			wg.Wait()
			hc.CloseIdleConnections()
		}
		b.ReportMetric(heap/float64(b.N)/n/1024, "heap-KiB/stream")
		b.ReportMetric(stack/float64(b.N)/n/1024, "stack-KiB/stream")
	}
	b.Run("direct", func(b *testing.B) { hold(b, up.url()) })
	b.Run("revproxy", func(b *testing.B) { hold(b, rps.URL+"/v1") })
	b.Run("gateway", func(b *testing.B) { hold(b, srv.URL+"/v1") })
}
