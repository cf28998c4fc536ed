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
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
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
	upJSON   = flag.String("upstream-json", "true", "the \"upstream_json\" of retryhost's model: true (a non-streaming request is non-streamed upstream too), false (streamed upstream and collected) or default (the key left out: the gateway's default)")
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

	if *seqN <= 0 {
		fmt.Printf("upstream: %d chunks, %v before each; open loop %d req/s for %v; closed loop %d concurrent for %v; in %d rounds\n\n",
			*chunks, *pace, *rate, *openDur, *conc, *closeDur, *rounds)
	}
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
	if *seqN > 0 {
		ts := make([]*target, len(rows))
		for i, rw := range rows {
			ts[i] = rw.t
		}
		return runSeq(ctx, ts, upPid)
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
