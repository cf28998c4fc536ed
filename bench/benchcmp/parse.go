package main

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// result is one benchmark line of `go test -bench` output: its name (the
// -N GOMAXPROCS suffix dropped) and its metrics by unit.
type result struct {
	name    string
	metrics map[string]float64
}

// parse reads `go test -bench` output and returns its benchmark lines in
// order; every other line (PASS, ok, goos, log output) is skipped. A line
// that starts like a benchmark but is not well-formed (a benchmark's own log
// line) is skipped too.
func parse(r io.Reader) ([]result, error) {
	var out []result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if res, ok := parseLine(sc.Text()); ok {
			out = append(out, res)
		}
	}
	return out, sc.Err()
}

func parseLine(line string) (result, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 || !strings.HasPrefix(f[0], "Benchmark") {
		return result{}, false
	}
	if _, err := strconv.ParseUint(f[1], 10, 64); err != nil {
		return result{}, false
	}
	res := result{name: trimProcs(f[0]), metrics: make(map[string]float64, (len(f)-2)/2)}
	for i := 2; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return result{}, false
		}
		res.metrics[f[i+1]] = v
	}
	return res, true
}

// trimProcs drops the -N suffix go test appends for GOMAXPROCS.
func trimProcs(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return name
	}
	if _, err := strconv.Atoi(name[i+1:]); err != nil {
		return name
	}
	return name[:i]
}
