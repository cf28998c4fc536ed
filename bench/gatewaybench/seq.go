package main

// The sequential-client method: one client, one kept-alive connection,
// each request sent when the last answer is whole, against an upstream
// that answers without delay (-pace 0). It is how public boards of LLM
// gateways rank them (the latency a gateway adds for one client, p50 and
// p99); on a shared 2-core machine absolute figures move with the load,
// so the figures that count are ratios to the bare reverse proxy measured
// in the same run, round by round beside it.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

var seqN = flag.Int("seq", 0, "the sequential-client method instead of the open loop: this many requests per target and mode in each round, one after another on one kept-alive connection (JSON, then streamed); the closed loop at -conc follows each slice when -closed > 0")

// seqCell is one target's figures in one mode, summed over the rounds.
type seqCell struct {
	fc, done  []time.Duration // first content (a JSON answer's: the whole answer), the whole answer
	n, intact int
	cpu       time.Duration // the proxy's, over the sequential requests
	upCPU     time.Duration // the upstream's
	genCPU    time.Duration // this process's (the client)
}

func (c *seqCell) perReq(d time.Duration) time.Duration {
	if c.n == 0 {
		return 0
	}
	return d / time.Duration(c.n)
}

type seqRow struct {
	t      *target
	j, s   seqCell // JSON, streamed
	cj, cs stats   // the closed loop's, JSON and streamed
}

// loadAvg is the 1-minute load average (/proc/loadavg), -1 where unknown.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// seqSlice sends n requests through t one after another and adds them to c.
func seqSlice(ctx context.Context, t *target, upPid int, stream bool, n int, c *seqCell) {
	cpu0, up0, gen0 := procCPU(t.pid), procCPU(upPid), selfCPU()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		r := t.client.do(ctx, stream)
		c.n++
		if r.ok {
			c.intact++
			c.fc = append(c.fc, r.firstContent)
			c.done = append(c.done, r.done)
		}
	}
	c.cpu += procCPU(t.pid) - cpu0
	c.upCPU += procCPU(upPid) - up0
	c.genCPU += selfCPU() - gen0
}

func runSeq(ctx context.Context, ts []*target, upPid int) error {
	rows := make([]*seqRow, len(ts))
	for i, t := range ts {
		rows[i] = &seqRow{t: t}
	}
	load0 := loadAvg()
	loadMin, loadMax := load0, load0
	fmt.Printf("sequential client: %d requests per target and mode in each of %d rounds (%d in all), one kept-alive connection; upstream: %d chunks, %v before each",
		*seqN, *rounds, *seqN**rounds, *chunks, *pace)
	if *closeDur > 0 {
		fmt.Printf("; closed loop %d concurrent for %v", *conc, *closeDur)
	}
	fmt.Print("\n\n")
	for r := 0; r < *rounds; r++ {
		closedR := time.Duration(share(int64(*closeDur), r, *rounds))
		for _, k := range roundOrder(r, len(rows)) {
			rw := rows[k]
			fmt.Fprintf(os.Stderr, "round %d/%d: %s…\n", r+1, *rounds, rw.t.name)
			for i := 0; i < 20; i++ {
				rw.t.client.do(ctx, i%2 == 0)
			}
			seqSlice(ctx, rw.t, upPid, false, *seqN, &rw.j)
			seqSlice(ctx, rw.t, upPid, true, *seqN, &rw.s)
			if closedR > 0 {
				closedLoop(ctx, rw.t, upPid, false, closedR, &rw.cj)
				closedLoop(ctx, rw.t, upPid, true, closedR, &rw.cs)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			l := loadAvg()
			loadMin, loadMax = min(loadMin, l), max(loadMax, l)
		}
	}
	fmt.Printf("load average (1 min): %.2f before, %.2f after; %.2f–%.2f between slices\n\n", load0, loadAvg(), loadMin, loadMax)
	printSeq(rows)
	return nil
}

var seqPcts = []float64{.5, .9, .99, .999}

// printSeq prints the sequential method's tables: latency; then, with a
// direct row, the latency added over it, the CPU per request and the
// closed loop's; then, with a bare reverse proxy's row, the ratios to it.
func printSeq(rows []*seqRow) {
	var direct, bare *seqRow
	for _, rw := range rows {
		switch rw.t.name {
		case "direct":
			direct = rw
		case "revproxy":
			bare = rw
		}
	}
	printSeqLatency(rows)
	if direct == nil {
		fmt.Println("(no direct row: no added latency)")
		return
	}
	printSeqAdded(rows, direct)
	printSeqCPU(rows)
	closed := rows[0].cj.closedN > 0
	if closed {
		printSeqClosed(rows)
	}
	if bare == nil {
		return
	}
	printSeqRatios(rows, direct, bare, closed)
	for _, rw := range rows {
		if rw.t.note != "" {
			fmt.Printf("%s: %s\n", rw.t.name, rw.t.note)
		}
	}
}

// usNum is d in whole microseconds, without a unit.
func usNum(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)) }

// seqQuad is d's seqPcts percentiles, less base's (nil: none), in µs.
func seqQuad(d []time.Duration, base []time.Duration) string {
	var f []string
	for _, p := range seqPcts {
		v := pct(d, p)
		if base != nil {
			v -= pct(base, p)
		}
		f = append(f, usNum(v))
	}
	return strings.Join(f, " / ")
}

func printSeqLatency(rows []*seqRow) {
	fmt.Println("latency, µs, p50 / p90 / p99 / p99.9 (a JSON answer: to its end; a stream: to its first content, and to its end, [DONE])")
	fmt.Println("| target | JSON | stream, first content | stream, [DONE] | intact (JSON, stream) |")
	fmt.Println("|---|---|---|---|---|")
	for _, rw := range rows {
		fmt.Printf("| %s | %s | %s | %s | %d/%d, %d/%d |\n", rw.t.name, seqQuad(rw.j.done, nil), seqQuad(rw.s.fc, nil), seqQuad(rw.s.done, nil),
			rw.j.intact, rw.j.n, rw.s.intact, rw.s.n)
	}
	fmt.Println()
}

func printSeqAdded(rows []*seqRow, direct *seqRow) {
	fmt.Println("added over direct, µs, p50 / p90 / p99 / p99.9")
	fmt.Println("| target | JSON | stream, first content | stream, [DONE] |")
	fmt.Println("|---|---|---|---|")
	for _, rw := range rows {
		if rw == direct {
			continue
		}
		fmt.Printf("| %s | %s | %s | %s |\n", rw.t.name, seqQuad(rw.j.done, direct.j.done), seqQuad(rw.s.fc, direct.s.fc), seqQuad(rw.s.done, direct.s.done))
	}
	fmt.Println()
}

func printSeqCPU(rows []*seqRow) {
	fmt.Println("CPU per sequential request, µs: proxy / upstream / client")
	fmt.Println("| target | JSON | stream |")
	fmt.Println("|---|---|---|")
	for _, rw := range rows {
		cell := func(c *seqCell) string {
			p := "-"
			if rw.t.pid != 0 {
				p = usNum(c.perReq(c.cpu))
			}
			return fmt.Sprintf("%s / %s / %s", p, usNum(c.perReq(c.upCPU)), usNum(c.perReq(c.genCPU)))
		}
		fmt.Printf("| %s | %s | %s |\n", rw.t.name, cell(&rw.j), cell(&rw.s))
	}
	fmt.Println()
}

func printSeqClosed(rows []*seqRow) {
	fmt.Printf("closed loop, %d concurrent: req/s, proxy CPU per request (µs)\n", *conc)
	fmt.Println("| target | JSON req/s | stream req/s | JSON CPU/req | stream CPU/req | intact (JSON, stream) |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, rw := range rows {
		cpu := func(st *stats) string {
			if rw.t.pid == 0 {
				return "-"
			}
			return usNum(st.perReq(st.cpu))
		}
		fmt.Printf("| %s | %.0f | %.0f | %s | %s | %d/%d, %d/%d |\n", rw.t.name, rw.cj.rps(), rw.cs.rps(), cpu(&rw.cj), cpu(&rw.cs),
			rw.cj.closedOK, rw.cj.closedN, rw.cs.closedOK, rw.cs.closedN)
	}
	fmt.Println()
}

// printSeqRatios prints each added percentile over the bare hop's added
// one, the CPU per request over the bare hop's, req/s over the bare hop's.
func printSeqRatios(rows []*seqRow, direct, bare *seqRow, closed bool) {
	ratio := func(a, b float64) string {
		if b <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	added := func(d, base []time.Duration, p float64) float64 { return float64(pct(d, p) - pct(base, p)) }
	addedRatio := func(d, b, base []time.Duration) string {
		var f []string
		for _, p := range []float64{.5, .99} {
			f = append(f, ratio(added(d, base, p), added(b, base, p)))
		}
		return strings.Join(f, " / ")
	}
	fmt.Println("ratio to the bare reverse proxy in this run (added p50 / added p99; CPU per request; req/s)")
	fmt.Print("| target | JSON | first content | [DONE] | CPU/req JSON | CPU/req stream |")
	if closed {
		fmt.Printf(" req/s @%d JSON | req/s @%d stream | CPU/req @%d JSON / stream |", *conc, *conc, *conc)
	}
	fmt.Println()
	fmt.Print("|---|---|---|---|---|---|")
	if closed {
		fmt.Print("---|---|---|")
	}
	fmt.Println()
	for _, rw := range rows {
		if rw == direct || rw == bare || rw.t.pid == 0 {
			continue
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s |", rw.t.name,
			addedRatio(rw.j.done, bare.j.done, direct.j.done), addedRatio(rw.s.fc, bare.s.fc, direct.s.fc), addedRatio(rw.s.done, bare.s.done, direct.s.done),
			ratio(float64(rw.j.perReq(rw.j.cpu)), float64(bare.j.perReq(bare.j.cpu))), ratio(float64(rw.s.perReq(rw.s.cpu)), float64(bare.s.perReq(bare.s.cpu))))
		if closed {
			fmt.Printf(" %s | %s | %s / %s |", ratio(rw.cj.rps(), bare.cj.rps()), ratio(rw.cs.rps(), bare.cs.rps()),
				ratio(float64(rw.cj.perReq(rw.cj.cpu)), float64(bare.cj.perReq(bare.cj.cpu))), ratio(float64(rw.cs.perReq(rw.cs.cpu)), float64(bare.cs.perReq(bare.cs.cpu))))
		}
		fmt.Println()
	}
	fmt.Println()
}
