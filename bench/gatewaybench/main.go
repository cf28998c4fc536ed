// Command gatewaybench drives one loopback, OpenAI-compatible upstream four
// ways — direct, through a bare httputil.ReverseProxy, through `retryhost
// serve` and through Portkey's open-source gateway — and prints, for streamed
// and non-streamed requests, the latency each hop adds (first byte and first
// content, p50/p99, open loop at a fixed rate), closed-loop requests/s at a
// fixed concurrency, the proxy process's CPU per request and how many answers
// arrived intact, and the proxy's read and write syscalls per request. The
// timed phases are cut into rounds (-rounds) in which the targets take
// turns, so that a change of load on a shared machine falls on all of them
// rather than on whichever ran then. Everything is loopback, bounded in
// count and time, and the child processes are stopped before it exits.
//
// Usage: see bench/gateway.sh, which builds retryhost and installs Portkey.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var (
	chunks   = flag.Int("chunks", 20, "content chunks per streamed answer")
	pace     = flag.Duration("pace", time.Millisecond, "the upstream's pause before each streamed chunk (a non-streamed answer waits chunks×pace)")
	rate     = flag.Int("rate", 200, "open-loop requests per second for the latency phase")
	openDur  = flag.Duration("open", 3*time.Second, "length of the open-loop (latency) phase per target and mode, in total over the rounds")
	conc     = flag.Int("conc", 32, "concurrent clients for the closed-loop (throughput) phase")
	closeDur = flag.Duration("closed", 3*time.Second, "length of the closed-loop phase per target and mode, in total over the rounds")
	rounds   = flag.Int("rounds", 5, "cut the open- and closed-loop phases into this many rounds; in each every target runs its slice in turn, from a rotating start, so that a change of load during the run falls on all targets")
	targets  = flag.String("targets", "direct,revproxy,retryhost,portkey", "targets to run, comma-separated")
	rhBin    = flag.String("retryhost", "", "path of a built retryhost binary (empty: skip that row)")
	rhBinB   = flag.String("retryhost-b", "", "path of a second retryhost binary, run as target retryhost-b beside retryhost with the same policy and flags: an A/B of two builds in one run (add retryhost-b to -targets)")
	pkDir    = flag.String("portkey-dir", "", "folder with node_modules/@portkey-ai/gateway (empty: skip that row)")
	held     = flag.String("held-streams", "", "after the phases, hold this many streams open at once and report the proxy's RSS; a comma-separated list holds each count in turn (empty: skip)")
	heldH2C  = flag.Bool("held-h2c", false, "hold the streams over HTTP/2 without TLS (h2c, 250 streams a connection) to the Go proxies (bare and retryhost serve --h2c), so that a proxy holding N streams needs N+N/250 descriptors, not 2N; Portkey stays on HTTP/1.1")
	upJSON   = flag.Bool("upstream-json", true, "retryhost's policy gives its model \"upstream_json\": true, so a non-streaming request is non-streamed upstream too (false: streamed upstream and collected, as before)")
	upConns  = flag.Int("upstream-conns", 16384, "retryhost serve's --upstream-conns, --max-concurrent and --max-conns (the bench holds up to -held-streams streams to one upstream host, each on a client connection of its own over HTTP/1.1)")
	workDir  = flag.String("workdir", "", "folder for the policy file and the children's logs (default: a temp folder)")

	proxyServe = flag.String("serve-revproxy", "", "internal: serve a bare reverse proxy to this upstream URL and print the address")
	upServe    = flag.Bool("serve-upstream", false, "internal: serve the upstream and print the address")
)

func main() {
	flag.Parse()
	if *proxyServe != "" {
		serveRevProxy(*proxyServe)
		return
	}
	if *upServe {
		serveUpstream()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "gatewaybench:", err)
		os.Exit(1)
	}
}

// ---- the upstream ----

// The upstream runs in a process of its own: a proxy holding N streams
// needs 2N descriptors and the load generator N, and each process's limit
// (20,000 here, which an unprivileged sandbox cannot raise) would not
// hold the load generator's N and the upstream's N together.
func serveUpstream() { serveChild(&http.Server{Handler: http.HandlerFunc(upstreamHandler)}) }

// serveChild serves srv on a free loopback port, prints its address for
// the parent, and exits when the parent closes its stdin.
func serveChild(srv *http.Server) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(ln.Addr().String())
	go func() { // the parent closes our stdin when it is done
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	_ = srv.Serve(ln)
}

// startUpstream starts the upstream process and returns its base URL and pid.
func startUpstream() (string, int, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", 0, nil, err
	}
	cmd := exec.Command(self, "-serve-upstream", "-chunks", strconv.Itoa(*chunks), "-pace", pace.String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", 0, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, nil, err
	}
	cmd.Stderr = os.Stderr
	done, err := startChild(cmd)
	if err != nil {
		return "", 0, nil, err
	}
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stopProc(cmd, done)
		return "", 0, nil, fmt.Errorf("upstream: %w", err)
	}
	return "http://" + strings.TrimSpace(addr), cmd.Process.Pid, func() { stdin.Close(); stopProc(cmd, done) }, nil
}

func upstreamHandler(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/release" {
		releaseMu.Lock()
		close(release)
		release = make(chan struct{})
		releaseMu.Unlock()
		return
	}
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req struct {
		Stream bool `json:"stream"`
	}
	if err := json.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if req.Stream && bytes.Contains(b, []byte(holdPrompt)) {
		hold(w, r)
		return
	}
	if !req.Stream {
		// A model takes as long to write a whole answer as to stream it, and
		// a gateway may ask the upstream for a stream either way: the same
		// sleeps as a stream, so timer jitter under load is the same too.
		for i := 0; i < *chunks; i++ {
			time.Sleep(*pace)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(upstreamAnswer().json)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl := w.(http.Flusher)
	a := upstreamAnswer()
	for _, ev := range a.events {
		time.Sleep(*pace)
		_, _ = w.Write(ev)
		fl.Flush() // a write a chunk, as a model streams them
	}
	_, _ = w.Write(a.end)
	fl.Flush()
}

// upstreamAnswer is the answer's bytes, built once (the upstream shares the
// cores with the proxy): the JSON answer, the -chunks content events, and
// the end (the finish_reason event and [DONE]).
var upstreamAnswer = sync.OnceValue(func() (a struct {
	json, end []byte
	events    [][]byte
}) {
	a.json = fmt.Appendf(nil, `{"id":"chatcmpl-b","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}`,
		expected(), *chunks, *chunks+5)
	for i := 0; i < *chunks; i++ {
		a.events = append(a.events, fmt.Appendf(nil, "data: {\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"},\"finish_reason\":null}]}\n\n", i))
	}
	a.end = []byte("data: {\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	return a
})

const holdPrompt = "hold this stream open"

// release ends the held streams; a new one is made per hold phase.
var (
	releaseMu sync.Mutex
	release   = make(chan struct{})
)

// hold sends one content chunk, waits for release (or the client to leave),
// then ends the stream properly.
func hold(w http.ResponseWriter, r *http.Request) {
	releaseMu.Lock()
	rel := release
	releaseMu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	fmt.Fprint(w, "data: {\"id\":\"chatcmpl-h\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"held \"},\"finish_reason\":null}]}\n\n")
	fl.Flush()
	select {
	case <-rel:
	case <-r.Context().Done():
		return
	}
	fmt.Fprint(w, "data: {\"id\":\"chatcmpl-h\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	fl.Flush()
}

// holdStreams opens n streams at once through t, waits (at most 3 min) until
// each has its first content, reads the proxy's RSS, then releases them all
// (the upstream's /release) and counts those that ended intact.
func holdStreams(ctx context.Context, t *target, upstream string, n int) (h holdResult) {
	warmUp(ctx, t)
	h.rss0, h.anon0 = procMem(t.pid)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var open, ok atomic.Int64
	var wg sync.WaitGroup
	// At most 256 streams are being opened at a time (each slot is freed
	// at its first content, or its failure), so that thousands of dials do
	// not overflow the listen backlog at once.
	opening := make(chan struct{}, 256)
	deadline := time.Now().Add(3 * time.Minute)
	spawn, stopSpawn := context.WithDeadline(ctx, deadline)
	defer stopSpawn()
	for i := 0; i < n; i++ {
		select {
		case opening <- struct{}{}:
		case <-spawn.Done():
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			slot := true
			free := func() {
				if slot {
					slot = false
					<-opening
				}
			}
			defer free()
			body := fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":%q}]}`, t.model, holdPrompt)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, strings.NewReader(body))
			if err != nil {
				return
			}
			for k, v := range t.headers {
				req.Header[k] = v
			}
			req.Header.Set("Content-Type", "application/json")
			c := holdClient
			if *heldH2C && (t.name == "revproxy" || strings.HasPrefix(t.name, "retryhost")) {
				c = holdClientH2C
			}
			resp, err := c.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			first, done, got := false, false, ""
			for sc.Scan() {
				line := sc.Bytes()
				if !bytes.HasPrefix(line, []byte("data:")) {
					continue
				}
				data := bytes.TrimSpace(line[5:])
				if bytes.Equal(data, []byte("[DONE]")) {
					done = true
					continue
				}
				if c, _ := content(data); len(c) != 0 {
					if !first {
						first = true
						open.Add(1)
						free()
					}
					got += string(c)
				}
			}
			if resp.StatusCode == http.StatusOK && done && got == "held " && (c == holdClient || resp.ProtoMajor == 2) {
				ok.Add(1)
			}
		}()
	}
	for open.Load() < int64(n) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // let the proxy settle
	h.rss1, h.anon1 = procMem(t.pid)
	h.opened = int(open.Load())
	if resp, err := http.Post(upstream+"/release", "text/plain", nil); err == nil {
		resp.Body.Close()
	} else {
		fmt.Fprintln(os.Stderr, "release:", err)
	}
	wg.Wait()
	holdClientH2C.CloseIdleConnections()
	h.intact = int(ok.Load())
	return h
}

// warmUp sends a fresh proxy 256 whole streamed requests, 16 at a time,
// before its memory is read for the held streams: what its first
// requests cost once (code pages of its binary faulted in, pools and
// caches made, lazy initialisation) is then in "RSS before", not spread
// over the streams. The connections are closed afterwards.
func warmUp(ctx context.Context, t *target) {
	if t.client == nil {
		return
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 16 {
				t.client.do(ctx, true)
			}
		})
	}
	wg.Wait()
	t.client.closeIdle()
	time.Sleep(200 * time.Millisecond)
}

type holdResult struct {
	opened, intact int
	rss0, rss1     int64 // VmRSS before and held
	anon0, anon1   int64 // RssAnon (the process's own memory, not its binary's pages)
}

// holdClient has no overall timeout (the streams are held on purpose) and no idle pool.
var holdClient = &http.Client{Transport: &http.Transport{DisableCompression: true, DisableKeepAlives: true}}

// holdClientH2C speaks HTTP/2 by prior knowledge (-held-h2c): a new
// connection each time one has 250 streams open.
var holdClientH2C = func() *http.Client {
	tr := &http.Transport{DisableCompression: true, Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}()

// procMem is a process's resident set and the anonymous part of it, in
// bytes (Linux /proc; 0 elsewhere).
func procMem(pid int) (rss, anon int64) {
	if pid == 0 {
		return 0, 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "RssAnon:":
			anon = kb << 10
		}
	}
	return rss, anon
}

func expected() string {
	var b strings.Builder
	for i := 0; i < *chunks; i++ {
		fmt.Fprintf(&b, "t%d ", i)
	}
	return b.String()
}

// ---- the bare reverse proxy (its own process, so its RSS and CPU are its own) ----

func serveRevProxy(upstream string) {
	u, err := url.Parse(upstream)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	srv := &http.Server{Handler: newRevProxy(u)}
	if *heldH2C {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	serveChild(srv)
}

func newRevProxy(upstream *url.URL) *httputil.ReverseProxy {
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.FlushInterval = -1
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}
	director := rp.Director
	rp.Director = func(r *http.Request) {
		director(r)
		if r.Body != nil && r.ContentLength > 0 {
			r.Body = &declaredBody{rc: r.Body, left: r.ContentLength}
		}
	}
	return rp
}

// declaredBody forwards a request body of a declared length and ends it
// there. Without it a bare ReverseProxy cut about 2% of the streams in the
// open loop at pace 0 (golang/go#40747, #15527): once the transport has
// sent the declared bytes it reads the inbound body once more to check
// that it ends; when the upstream answered first (it has the whole
// request) and the server, on writing the answer's headers, has closed
// that body, the read fails ("invalid Read on closed Body") and the
// transport's write loop closes the upstream connection under the answer
// being relayed ("ReverseProxy read error during body copy: … use of
// closed network connection"). Here the check is answered without
// touching the inbound body.
type declaredBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *declaredBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if err == io.EOF && b.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *declaredBody) Close() error { return b.rc.Close() }

// ---- targets ----

type target struct {
	name    string
	url     string // chat completions URL
	model   string
	headers http.Header
	pid     int    // the proxy process (0: none)
	note    string // printed beside the row
	stop    func()
	client  *rawClient // the timed requests'
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitUp(ctx context.Context, addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not listening after 30s", addr)
}

func stopProc(cmd *exec.Cmd, done <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func startChild(cmd *exec.Cmd) (<-chan struct{}, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return done, nil
}

func makeTarget(ctx context.Context, name, upstream, dir string) (*target, error) {
	switch name {
	case "direct":
		return &target{name: name, url: upstream + "/v1/chat/completions", model: "m", stop: func() {}}, nil
	case "revproxy":
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(self, "-serve-revproxy", upstream, "-held-h2c="+strconv.FormatBool(*heldH2C))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		cmd.Stderr = os.Stderr
		done, err := startChild(cmd)
		if err != nil {
			return nil, err
		}
		addr, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			stopProc(cmd, done)
			return nil, fmt.Errorf("revproxy: %w", err)
		}
		return &target{name: name, url: "http://" + strings.TrimSpace(addr) + "/v1/chat/completions", model: "m", pid: cmd.Process.Pid,
			stop: func() { stdin.Close(); stopProc(cmd, done) }}, nil
	case "retryhost", "retryhost-b":
		bin := *rhBin
		if name == "retryhost-b" {
			bin = *rhBinB
		}
		if bin == "" {
			return nil, errSkip("no -" + name + " binary")
		}
		pol := fmt.Sprintf(`{"models": [{"name": "bench", "provider": "openai", "model": "m", "base_url": %q, "api_key_env": "BENCH_UPSTREAM_KEY", "upstream_json": %t}]}`, upstream+"/v1", *upJSON)
		pf := filepath.Join(dir, name+"-policy.json")
		if err := os.WriteFile(pf, []byte(pol), 0o644); err != nil {
			return nil, err
		}
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, "serve", "--policy", pf, "--addr", addr, "--watch=false",
			"--max-concurrent", strconv.Itoa(*upConns), "--max-conns", strconv.Itoa(*upConns), "--upstream-conns", strconv.Itoa(*upConns), "--h2c="+strconv.FormatBool(*heldH2C))
		cmd.Env = append(os.Environ(), "BENCH_UPSTREAM_KEY=k", "RETRYHOST_API_KEYS=")
		cmd.Stdout, cmd.Stderr = logf, logf
		done, err := startChild(cmd)
		if err != nil {
			return nil, err
		}
		if err := waitUp(ctx, addr); err != nil {
			stopProc(cmd, done)
			return nil, fmt.Errorf("%s: %w (see %s)", name, err, logf.Name())
		}
		return &target{name: name, url: "http://" + addr + "/v1/chat/completions", model: "bench", pid: cmd.Process.Pid,
			note: fmt.Sprintf("access log (JSON, one line per request) on, to a file; --upstream-conns %d --max-concurrent %d --max-conns %d; upstream_json %t", *upConns, *upConns, *upConns, *upJSON),
			stop: func() { stopProc(cmd, done); logf.Close() }}, nil
	case "portkey":
		if *pkDir == "" {
			return nil, errSkip("no -portkey-dir (npm absent?)")
		}
		script := filepath.Join(*pkDir, "node_modules/@portkey-ai/gateway/build/start-server.js")
		if _, err := os.Stat(script); err != nil {
			return nil, errSkip(err.Error())
		}
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		_, port, _ := net.SplitHostPort(addr)
		logf, err := os.Create(filepath.Join(dir, "portkey.log"))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command("node", script, "--port="+port, "--headless")
		cmd.Dir = *pkDir
		cmd.Stdout, cmd.Stderr = logf, logf
		done, err := startChild(cmd)
		if err != nil {
			return nil, err
		}
		if err := waitUp(ctx, addr); err != nil {
			stopProc(cmd, done)
			return nil, fmt.Errorf("portkey: %w (see %s)", err, logf.Name())
		}
		h := http.Header{}
		h.Set("x-portkey-provider", "openai")
		h.Set("x-portkey-custom-host", upstream+"/v1")
		h.Set("Authorization", "Bearer k")
		return &target{name: name, url: "http://" + addr + "/v1/chat/completions", model: "m", headers: h, pid: cmd.Process.Pid,
			note: "its source waits 25 ms before forwarding a stream's first chunk",
			stop: func() { stopProc(cmd, done); logf.Close() }}, nil
	}
	return nil, fmt.Errorf("unknown target %q", name)
}

type errSkip string

func (e errSkip) Error() string { return string(e) }

// ---- one request ----

type result struct {
	ok           bool // 200 and the whole answer, once, in order, with its end marker
	firstByte    time.Duration
	firstContent time.Duration
}

// ---- phases ----

// stats add up over the rounds: the open loop's samples are merged, and
// the closed loop's rates and costs are its sums over its sums (requests
// over time, CPU and syscalls over requests), so that a short round
// weighs what it carried.
type stats struct {
	n, intact int
	fb, fc    []time.Duration

	closedN, closedOK int
	closedTime        time.Duration
	cpu               time.Duration // the proxy process's CPU in the closed loop
	genCPU            time.Duration // the load generator's (this process's)
	upCPU             time.Duration // the upstream process's
	syscr, syscw      int64         // the proxy's read and write syscalls
	noIO              bool          // /proc/PID/io could not be read in some round
}

// rps is the closed loop's intact requests a second over all its rounds.
func (st *stats) rps() float64 {
	if st.closedTime <= 0 {
		return 0
	}
	return float64(st.closedOK) / st.closedTime.Seconds()
}

// perReq is a closed-loop sum spread over the closed loop's requests.
func (st *stats) perReq(d time.Duration) time.Duration {
	if st.closedN == 0 {
		return 0
	}
	return d / time.Duration(st.closedN)
}

// roundOrder is the order in which round r runs n targets: all of them,
// starting at r mod n, so that over n rounds each target goes first once
// and no target always follows the same one.
func roundOrder(r, n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = (r + i) % n
	}
	return o
}

// share is round r's part of total cut into rounds parts; the parts add
// up to total exactly.
func share(total int64, r, rounds int) int64 {
	return total*int64(r+1)/int64(rounds) - total*int64(r)/int64(rounds)
}

// openLoop sends n requests through t at -rate a second, not waiting for
// the answers, and adds their latencies to st.
func openLoop(ctx context.Context, t *target, stream bool, n int, st *stats) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(*rate))
	defer tick.Stop()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := t.client.do(ctx, stream)
			mu.Lock()
			defer mu.Unlock()
			st.n++
			if r.ok {
				st.intact++
				st.fb = append(st.fb, r.firstByte)
				st.fc = append(st.fc, r.firstContent)
			}
		}()
	}
	wg.Wait()
}

// closedLoop keeps -conc requests in flight through t for d and adds to
// st what they carried and what the proxy, the generator and the upstream
// spent on them.
func closedLoop(ctx context.Context, t *target, upPid int, stream bool, d time.Duration, st *stats) {
	var n, ok atomic.Int64
	cpu0, gen0, up0 := procCPU(t.pid), selfCPU(), procCPU(upPid)
	r0, w0, io0 := procIO(t.pid)
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				r := t.client.do(ctx, stream)
				n.Add(1)
				if r.ok {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	st.closedTime += time.Since(start)
	st.closedN += int(n.Load())
	st.closedOK += int(ok.Load())
	st.genCPU += selfCPU() - gen0
	st.upCPU += procCPU(upPid) - up0
	if t.pid != 0 {
		st.cpu += procCPU(t.pid) - cpu0
		r1, w1, io1 := procIO(t.pid)
		if io0 && io1 {
			st.syscr += r1 - r0
			st.syscw += w1 - w0
		} else {
			st.noIO = true
		}
	}
}

// procIO is a process's read and write syscall counts (Linux
// /proc/PID/io: syscr, syscw, which count read(2)/readv(2) and
// write(2)/writev(2) on sockets too); ok is false where it cannot be read.
func procIO(pid int) (syscr, syscw int64, ok bool) {
	if pid == 0 {
		return 0, 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, 0, false
	}
	var gotR, gotW bool
	for _, l := range strings.Split(string(b), "\n") {
		k, v, found := strings.Cut(l, ":")
		if !found {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "syscr":
			syscr, gotR = n, true
		case "syscw":
			syscw, gotW = n, true
		}
	}
	return syscr, syscw, gotR && gotW
}

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the user+system CPU time of a process (Linux /proc; 0 elsewhere).
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * (time.Second / 100) // USER_HZ is 100 on Linux
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p * float64(len(s)-1))
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func run(ctx context.Context) error {
	dir := *workDir
	if dir == "" {
		d, err := os.MkdirTemp("", "gatewaybench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	var heldCounts []int
	for _, f := range strings.Split(*held, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return fmt.Errorf("-held-streams: %q is not a positive count", f)
		}
		heldCounts = append(heldCounts, n)
	}
	if *rounds < 1 {
		return fmt.Errorf("-rounds %d: at least 1", *rounds)
	}
	if *rate < 1 || *conc < 1 {
		return fmt.Errorf("-rate %d, -conc %d: at least 1 each", *rate, *conc)
	}
	openN := int64(*openDur / (time.Second / time.Duration(*rate))) // per target and mode, over all rounds
	upstream, upPid, stopUp, err := startUpstream()
	if err != nil {
		return err
	}
	defer stopUp()

	fmt.Printf("upstream: %d chunks, %v before each; open loop %d req/s for %v; closed loop %d concurrent for %v; in %d rounds\n\n",
		*chunks, *pace, *rate, *openDur, *conc, *closeDur, *rounds)
	type row struct {
		t    *target
		s, n stats // streaming, non-streaming

		holds []holdResult // one per -held-streams count
	}
	// Every target's processes run from the start, so that the rounds can
	// take turns among them; each is stopped at the end, whatever happens.
	var rows []*row
	defer func() {
		for _, rw := range rows {
			rw.t.stop()
		}
	}()
	newTarget := func(name string) (*target, error) {
		t, err := makeTarget(ctx, name, upstream, dir)
		if err != nil {
			return nil, err
		}
		t.stop = sync.OnceFunc(t.stop)
		if t.client, err = newRawClient(t.url, t.model, t.headers); err != nil {
			t.stop()
			return nil, err
		}
		return t, nil
	}
	for _, name := range strings.Split(*targets, ",") {
		name = strings.TrimSpace(name)
		t, err := newTarget(name)
		var skip errSkip
		if errors.As(err, &skip) {
			fmt.Printf("skipping %s: %s\n", name, skip)
			continue
		}
		if err != nil {
			return err
		}
		rows = append(rows, &row{t: t})
	}
	// A warm-up before each slice: the first opens connections and warms
	// the proxy; the later ones replace the connections a server closed
	// while the other targets ran (Node's keep-alive timeout is 5 s).
	warm := func(t *target) {
		for i := 0; i < 20; i++ {
			t.client.do(ctx, i%2 == 0)
		}
	}
	for r := 0; r < *rounds; r++ {
		openR, closedR := int(share(openN, r, *rounds)), time.Duration(share(int64(*closeDur), r, *rounds))
		for _, k := range roundOrder(r, len(rows)) {
			rw := rows[k]
			fmt.Fprintf(os.Stderr, "round %d/%d: %s…\n", r+1, *rounds, rw.t.name)
			warm(rw.t)
			openLoop(ctx, rw.t, true, openR, &rw.s)
			openLoop(ctx, rw.t, false, openR, &rw.n)
			closedLoop(ctx, rw.t, upPid, true, closedR, &rw.s)
			closedLoop(ctx, rw.t, upPid, false, closedR, &rw.n)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	for _, rw := range rows {
		rw.t.client.closeIdle()
	}
	// Memory per held stream, a target at a time, after the timed phases.
	for _, rw := range rows {
		if rw.t.pid == 0 {
			continue
		}
		for _, n := range heldCounts {
			// A fresh proxy for every count, so that none inherits the
			// memory of the timed phases or of the last count: a heap
			// grown by the closed loop and not yet returned would hold
			// the streams in pages already counted in "RSS before"
			// (Portkey's had grown to 230 MiB, which hid its cost).
			rw.t.stop()
			t, err := newTarget(rw.t.name)
			if err != nil {
				return err
			}
			rw.t = t
			fmt.Fprintf(os.Stderr, "holding %d streams through %s…\n", n, rw.t.name)
			h := holdStreams(ctx, rw.t, upstream, n)
			rw.holds = append(rw.holds, h)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		// Stopped now, not at the end: a proxy that keeps its idle
		// upstream connections (retryhost serve keeps up to
		// --upstream-conns) would hold the upstream's descriptors while
		// the next target opens as many, and past the limit the
		// upstream's accepts fail and the next target's streams open
		// late (some past their idle deadlines).
		rw.t.stop()
	}
	var base *row
	for _, rw := range rows {
		if rw.t.name == "direct" {
			base = rw
		}
	}
	added := func(v time.Duration, b []time.Duration, p float64) string {
		if base == nil {
			return "-"
		}
		return ms(v - pct(b, p))
	}
	for _, mode := range []string{"streaming", "non-streaming"} {
		fmt.Printf("%s (latency: open loop; \"+\" = added over direct, ms)\n", mode)
		fmt.Printf("| target | first byte p50 / p99 | +p50 / +p99 | first content p50 / p99 | +p50 / +p99 | req/s @%d | CPU/req (proxy) | intact (open, closed) |\n", *conc)
		fmt.Println("|---|---|---|---|---|---|---|---|")
		for _, r := range rows {
			s, b := &r.s, (*stats)(nil)
			if mode == "non-streaming" {
				s = &r.n
			}
			if base != nil {
				b = &base.s
				if mode == "non-streaming" {
					b = &base.n
				}
			}
			var bfb, bfc []time.Duration
			if b != nil {
				bfb, bfc = b.fb, b.fc
			}
			cpu := "-"
			if r.t.pid != 0 {
				cpu = fmt.Sprintf("%.0f µs", float64(s.perReq(s.cpu))/float64(time.Microsecond))
			}
			fmt.Printf("| %s | %s / %s | %s / %s | %s / %s | %s / %s | %.0f | %s | %d/%d, %d/%d |\n", r.t.name,
				ms(pct(s.fb, .5)), ms(pct(s.fb, .99)), added(pct(s.fb, .5), bfb, .5), added(pct(s.fb, .99), bfb, .99),
				ms(pct(s.fc, .5)), ms(pct(s.fc, .99)), added(pct(s.fc, .5), bfc, .5), added(pct(s.fc, .99), bfc, .99),
				s.rps(), cpu, s.intact, s.n, s.closedOK, s.closedN)
		}
		fmt.Println()
	}
	// Who else spent the CPU in the closed loop: the load generator and the
	// upstream share the cores with the proxy, and when they cost as much
	// as it does the req/s column measures them too.
	us := func(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }
	fmt.Println("closed loop: CPU per request of the load generator and the upstream (the proxy's is in the tables above)")
	fmt.Println("| target | streaming: generator / upstream | non-streaming: generator / upstream |")
	fmt.Println("|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %s / %s | %s / %s |\n", r.t.name, us(r.s.perReq(r.s.genCPU)), us(r.s.perReq(r.s.upCPU)), us(r.n.perReq(r.n.genCPU)), us(r.n.perReq(r.n.upCPU)))
	}
	fmt.Println()
	// How many times the proxy went to the kernel for a request: each read
	// or write is a syscall and, on a stream, often a wakeup, so that a
	// proxy that writes each event in two pieces pays for it here.
	sys := func(st *stats) string {
		if st.noIO || st.closedN == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f / %.1f", float64(st.syscr)/float64(st.closedN), float64(st.syscw)/float64(st.closedN))
	}
	fmt.Println("closed loop: the proxy's read and write syscalls per request (/proc/PID/io syscr, syscw)")
	fmt.Println("| target | streaming: reads / writes | non-streaming: reads / writes |")
	fmt.Println("|---|---|---|")
	for _, r := range rows {
		if r.t.pid != 0 {
			fmt.Printf("| %s | %s | %s |\n", r.t.name, sys(&r.s), sys(&r.n))
		}
	}
	fmt.Println()
	for i, n := range heldCounts {
		over := "HTTP/1.1, one connection a stream"
		if *heldH2C {
			over = "h2c to the Go proxies (250 streams a connection), HTTP/1.1 to Portkey"
		}
		fmt.Printf("%d streams held open at once over %s (proxy RSS after 256 warm-up requests; per stream = (RSS held - RSS before) / opened; anonymous: the same of RssAnon, without the binary's pages)\n", n, over)
		fmt.Println("| target | opened | RSS before (anonymous) | RSS held (anonymous) | per stream | anonymous per stream | intact after release |")
		fmt.Println("|---|---|---|---|---|---|---|")
		for _, r := range rows {
			if r.t.pid == 0 || i >= len(r.holds) {
				continue
			}
			h := r.holds[i]
			per, anon := "-", "-"
			if h.opened > 0 {
				per = fmt.Sprintf("%.1f KiB", float64(h.rss1-h.rss0)/1024/float64(h.opened))
				anon = fmt.Sprintf("%.1f KiB", float64(h.anon1-h.anon0)/1024/float64(h.opened))
			}
			fmt.Printf("| %s | %d | %.0f MiB (%.0f) | %.0f MiB (%.0f) | %s | %s | %d/%d |\n", r.t.name, h.opened, float64(h.rss0)/(1<<20), float64(h.anon0)/(1<<20),
				float64(h.rss1)/(1<<20), float64(h.anon1)/(1<<20), per, anon, h.intact, n)
		}
		fmt.Println()
	}
	for _, r := range rows {
		if r.t.note != "" {
			fmt.Printf("%s: %s\n", r.t.name, r.t.note)
		}
	}
	return nil
}
