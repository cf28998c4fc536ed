package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

// rounds is one side's results: per benchmark, per unit, one value a round
// (NaN-free: a round that lacks the benchmark adds nothing).
type rounds struct {
	order []string                        // benchmark names, first seen first
	vals  map[string]map[string][]float64 // name → unit → values in round order
}

func newRounds() *rounds { return &rounds{vals: map[string]map[string][]float64{}} }

func (r *rounds) add(res []result) {
	for _, x := range res {
		m, ok := r.vals[x.name]
		if !ok {
			m = map[string][]float64{}
			r.vals[x.name] = m
			r.order = append(r.order, x.name)
		}
		for u, v := range x.metrics {
			m[u] = append(m[u], v)
		}
	}
}

// spread is the min, median and max of vs.
type spread struct{ min, med, max float64 }

func spreadOf(vs []float64) spread {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return spread{s[0], med, s[n-1]}
}

// timeUnit is the unit a benchmark's cost is read in: ns/part where the
// benchmark reports it (the per-part rows), else ns/op.
func timeUnit(m map[string][]float64) string {
	if _, ok := m["ns/part"]; ok {
		return "ns/part"
	}
	return "ns/op"
}

// rowUnits are the units a benchmark gets a row for: its time unit, then
// the other metrics it reports itself (b.ReportMetric: stack-KiB/stream,
// calls/stream ...), sorted. B/op and allocs/op go in a column of their
// own; ns/op is left out when ns/part stands for it.
func rowUnits(m map[string][]float64) []string {
	t := timeUnit(m)
	var extra []string
	for u := range m {
		switch u {
		case t, "ns/op", "B/op", "allocs/op", "MB/s":
			continue
		}
		extra = append(extra, u)
	}
	slices.Sort(extra)
	return append([]string{t}, extra...)
}

func readSide(dir, side string) (*rounds, int, error) {
	files, err := filepath.Glob(filepath.Join(dir, side+".*.txt"))
	if err != nil {
		return nil, 0, err
	}
	slices.Sort(files)
	r := newRounds()
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, 0, err
		}
		res, err := parse(fh)
		fh.Close()
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", f, err)
		}
		r.add(res)
	}
	return r, len(files), nil
}

func compareCmd(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	max := fs.Float64("max", 0, "exit 1 when a benchmark's median ratio exceeds this (0: never)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("compare takes one directory")
	}
	base, nb, err := readSide(fs.Arg(0), "base")
	if err != nil {
		return err
	}
	head, nh, err := readSide(fs.Arg(0), "head")
	if err != nil {
		return err
	}
	if nb == 0 || nh == 0 {
		return fmt.Errorf("%s: no base.N.txt or head.N.txt", fs.Arg(0))
	}
	over, err := compare(w, base, head, *max)
	if err != nil {
		return err
	}
	if over > 0 {
		return fmt.Errorf("%d benchmark(s) slower than %.2f× base", over, *max)
	}
	return nil
}

// compare writes, per benchmark both sides ran, head ÷ base of its time
// unit round by round (round i of head against round i of base: they ran
// next to each other), and returns how many medians exceed max (when max
// > 0).
func compare(w io.Writer, base, head *rounds, max float64) (int, error) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "benchmark\tunit\tbase median\thead median\thead/base min\tmedian\tmax\trounds\tallocs/op base→head\t")
	over := 0
	for _, name := range base.order {
		hm, ok := head.vals[name]
		if !ok {
			continue
		}
		bm := base.vals[name]
		allocs := "—"
		if ba, ha := bm["allocs/op"], hm["allocs/op"]; len(ba) > 0 && len(ha) > 0 {
			allocs = fmt.Sprintf("%s→%s", num(spreadOf(ba).med), num(spreadOf(ha).med))
		}
		for _, unit := range rowUnits(bm) {
			bv, hv := bm[unit], hm[unit]
			n := min(len(bv), len(hv))
			if n == 0 {
				continue
			}
			ratios := make([]float64, n)
			for i := range n {
				ratios[i] = hv[i] / bv[i]
			}
			rs := spreadOf(ratios)
			flag := ""
			if max > 0 && rs.med > max && strings.HasPrefix(unit, "ns/") {
				flag = "  ← slower"
				over++
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%d\t%s\t%s\n",
				strings.TrimPrefix(name, "Benchmark"), unit, num(spreadOf(bv[:n]).med), num(spreadOf(hv[:n]).med),
				rs.min, rs.med, rs.max, n, allocs, flag)
			allocs = ""
		}
	}
	return over, tw.Flush()
}

// num prints a figure with three significant digits (whole numbers from
// 1,000 up).
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000 || v <= -1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
