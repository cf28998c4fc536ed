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
	targets  = flag.String("targets", "direct,revproxy,retryhost,portkey", "targets to run, comma-separated (also: retryhost-wasm, a Wasm condition in the policy; retryhost-keys, a virtual key with an rpm on every request; retryhost-b)")
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

// run checks the flags, starts the upstream and every target, runs the
// timed phases in rounds (or the sequential A/B, with -seq), holds streams,
// and prints the tables. Every process it starts is stopped when it returns.
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
	heldCounts, err := checkFlags()
	if err != nil {
		return err
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
	// Every target's processes run from the start, so that the rounds can
	// take turns among them; each is stopped at the end, whatever happens.
	var rows []*row
	defer func() {
		for _, rw := range rows {
			rw.t.stop()
		}
	}()
	rows, err = startTargets(ctx, upstream, dir) // the ones started, even on an error
	if err != nil {
		return err
	}
	if *seqN > 0 {
		ts := make([]*target, len(rows))
		for i, rw := range rows {
			ts[i] = rw.t
		}
		return runSeq(ctx, ts, upPid)
	}
	if err := runRounds(ctx, rows, upPid, openN); err != nil {
		return err
	}
	if err := holdAll(ctx, rows, upstream, dir, heldCounts); err != nil {
		return err
	}
	printLatency(rows)
	printLoadCPU(rows)
	printSyscalls(rows)
	printHeld(rows, heldCounts)
	for _, r := range rows {
		if r.t.note != "" {
			fmt.Printf("%s: %s\n", r.t.name, r.t.note)
		}
	}
	return nil
}

// A row is one target and what the bench measured through it.
type row struct {
	t    *target
	s, n stats // streaming, non-streaming

	holds []holdResult // one per -held-streams count
}

// checkFlags refuses flags the phases cannot run with, and returns the
// -held-streams counts.
func checkFlags() (heldCounts []int, err error) {
	for _, f := range strings.Split(*held, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-held-streams: %q is not a positive count", f)
		}
		heldCounts = append(heldCounts, n)
	}
	if *rounds < 1 {
		return nil, fmt.Errorf("-rounds %d: at least 1", *rounds)
	}
	if *rate < 1 || *conc < 1 {
		return nil, fmt.Errorf("-rate %d, -conc %d: at least 1 each", *rate, *conc)
	}
	return heldCounts, nil
}

// newTarget starts the target name, with its client; errSkip: a target
// this machine cannot run.
func newTarget(ctx context.Context, name, upstream, dir string) (*target, error) {
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

// startTargets starts each of -targets, skipping (and saying so) the ones
// this machine cannot run. On an error it returns the ones it started, for
// the caller to stop.
func startTargets(ctx context.Context, upstream, dir string) ([]*row, error) {
	var rows []*row
	for _, name := range strings.Split(*targets, ",") {
		name = strings.TrimSpace(name)
		t, err := newTarget(ctx, name, upstream, dir)
		var skip errSkip
		if errors.As(err, &skip) {
			fmt.Printf("skipping %s: %s\n", name, skip)
			continue
		}
		if err != nil {
			return rows, err
		}
		rows = append(rows, &row{t: t})
	}
	return rows, nil
}

// runRounds runs the open- and closed-loop phases, cut into -rounds
// rounds in which the targets take turns from a rotating start.
func runRounds(ctx context.Context, rows []*row, upPid int, openN int64) error {
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
	return nil
}

// holdAll measures the memory per held stream, a target at a time, after
// the timed phases: for each of heldCounts, through a fresh process.
func holdAll(ctx context.Context, rows []*row, upstream, dir string, heldCounts []int) error {
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
			t, err := newTarget(ctx, rw.t.name, upstream, dir)
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
	return nil
}
