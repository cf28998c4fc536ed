package gateway

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retryhost/retryhost/policy"
)

// BenchmarkStream measures one streamed answer of 100 content chunks from a
// loopback upstream, read by a plain HTTP client: direct from the upstream,
// and through the gateway (parse, policy request, commit gate, relay).
// go test ./gateway -run '^$' -bench Stream -benchmem
func BenchmarkStream(b *testing.B) { benchStream(b, benchChunks, true) }

// benchChunks is the content chunks of a streamed answer in the stream
// benchmarks.
const benchChunks = 100

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
		// Goroutines started per request (the client's, the upstream's and
		// the hop's): each starts on a small stack that it grows again, so
		// they cost beyond the start itself.
		created := []rtmetrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		rtmetrics.Read(created)
		before := created[0].Value.Uint64()
		defer func() {
			rtmetrics.Read(created)
			b.ReportMetric(float64(created[0].Value.Uint64()-before)/float64(b.N), "goroutines/op")
		}()
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
	// The same gateway tracing every request (WithTracerProvider), its
	// spans batched to an exporter that drops them: the cost of making
	// the spans and the upstream's traceparent.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	gwT, err := New(context.Background(), Bytes("bench", []byte(pol), policy.Options{Getenv: func(string) string { return "k" }}), WithTracerProvider(tp))
	require.NoError(b, err)
	defer gwT.Close(context.Background())
	srvT := newTestServer(b, gwT)
	b.Run("gateway-traced", func(b *testing.B) { run(b, srvT.URL+"/v1/chat/completions") })
}

// BenchmarkHeldStreams holds 500 streams open at once (each has had its
// first content; the upstream holds the rest) and reports the memory they
// take per stream — heap and goroutine stacks in use and the live heap,
// after a GC — read directly from the upstream, through a bare
// httputil.ReverseProxy and through the gateway. Client and upstream share
// the process, so compare the rows: what a hop adds is its row minus
// direct's. Each iteration starts with no idle upstream connection in
// either hop (the rows and iterations then all dial theirs, so none is
// measured without its connections' buffers, and no row's idle connections
// sit in the next row's heap).
// go test ./gateway -run '^$' -bench HeldStreams -benchtime 2x
//
// RETRYHOST_HELD_PROFILE=dir also writes exact heap profiles
// (runtime.MemProfileRate=1) of each row into dir, before the streams open
// (<row>-base.pb.gz) and while they are held (<row>.pb.gz); what a stream
// holds and where it was allocated is then
//
//	go tool pprof -sample_index=inuse_space -base dir/gateway-base.pb.gz dir/gateway.pb.gz
//
// divided by 500, and a hop's own share is its row's minus direct's.
// go test ./gateway -run '^$' -bench 'HeldStreams/(direct|gateway)' -benchtime 1x
func BenchmarkHeldStreams(b *testing.B) {
	const n = 500
	profDir := os.Getenv("RETRYHOST_HELD_PROFILE")
	if profDir != "" {
		require.NoError(b, os.MkdirAll(profDir, 0o755))
		old := runtime.MemProfileRate
		runtime.MemProfileRate = 1
		b.Cleanup(func() { runtime.MemProfileRate = old })
	}
	up := newUpstream("primary")
	up.forget = true
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
	// quiesce closes both hops' idle upstream connections and waits for the
	// goroutines that served them (the upstream's, the transports' loops)
	// to end, then empties the sync.Pools (two GCs: the victim cache), so
	// the heap read next holds none of them and every row allocates its
	// buffers afresh.
	quiesce := func() {
		rpt.CloseIdleConnections()
		gw.closeClient()
		prev, still := runtime.NumGoroutine(), 0
		for still < 5 {
			time.Sleep(10 * time.Millisecond)
			if cur := runtime.NumGoroutine(); cur < prev {
				prev, still = cur, 0
			} else {
				still++
			}
		}
		runtime.GC()
		runtime.GC()
	}
	// The runtime keeps the descriptors of ended goroutines for reuse, and
	// a row that runs more goroutines at once than any before it allocates
	// new ones (~2 KiB a stream): start and end more than any row runs
	// first, so no row pays for them.
	var warm sync.WaitGroup
	start := make(chan struct{})
	for range 16 * n {
		warm.Go(func() { <-start })
	}
	close(start)
	warm.Wait()
	profile := func(b *testing.B, name string) {
		if profDir == "" {
			return
		}
		f, err := os.Create(filepath.Join(profDir, name+".pb.gz"))
		require.NoError(b, err)
		defer f.Close()
		require.NoError(b, pprof.Lookup("heap").WriteTo(f, 0)) // as of the GC just run
	}
	hold := func(b *testing.B, row, base string) {
		var heap, live, stack float64
		for b.Loop() {
			quiesce()
			release := make(chan struct{})
			up.play(act{chunks: []string{"held "}, afterText: release})
			hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			profile(b, row+"-base")
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
			profile(b, row)
			heap += float64(ms1.HeapInuse) - float64(ms0.HeapInuse)
			live += float64(ms1.HeapAlloc) - float64(ms0.HeapAlloc)
			stack += float64(ms1.StackInuse) - float64(ms0.StackInuse)
			close(release)
			wg.Wait()
			hc.CloseIdleConnections()
		}
		b.ReportMetric(heap/float64(b.N)/n/1024, "heap-KiB/stream")
		b.ReportMetric(live/float64(b.N)/n/1024, "live-KiB/stream")
		b.ReportMetric(stack/float64(b.N)/n/1024, "stack-KiB/stream")
	}
	b.Run("direct", func(b *testing.B) { hold(b, "direct", up.url()) })
	b.Run("revproxy", func(b *testing.B) { hold(b, "revproxy", rps.URL+"/v1") })
	b.Run("gateway", func(b *testing.B) { hold(b, "gateway", srv.URL+"/v1") })
}
