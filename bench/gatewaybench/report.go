package main

import (
	"fmt"
	"time"
)

// printLatency prints a table per mode: latency (open loop) and what each
// hop adds over direct, req/s (closed loop), the proxy's CPU per request
// and how many answers arrived intact.
func printLatency(rows []*row) {
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
}

// printLoadCPU prints who else spent the CPU in the closed loop: the load
// generator and the upstream share the cores with the proxy, and when they
// cost as much as it does the req/s column measures them too.
func printLoadCPU(rows []*row) {
	us := func(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }
	fmt.Println("closed loop: CPU per request of the load generator and the upstream (the proxy's is in the tables above)")
	fmt.Println("| target | streaming: generator / upstream | non-streaming: generator / upstream |")
	fmt.Println("|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %s / %s | %s / %s |\n", r.t.name, us(r.s.perReq(r.s.genCPU)), us(r.s.perReq(r.s.upCPU)), us(r.n.perReq(r.n.genCPU)), us(r.n.perReq(r.n.upCPU)))
	}
	fmt.Println()
}

// printSyscalls prints how many times the proxy went to the kernel for a
// request: each read or write is a syscall and, on a stream, often a
// wakeup, so that a proxy that writes each event in two pieces pays for it
// here.
func printSyscalls(rows []*row) {
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
}

// printHeld prints a table per -held-streams count: the proxy's memory per
// stream held open.
func printHeld(rows []*row, heldCounts []int) {
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
}
