package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/retryhost/retryhost/internal/scenario"
	"github.com/retryhost/retryhost/plugins"
)

func init() {
	register(command{
		name:    "replay",
		usage:   "replay [--json] FILE|DIR...",
		summary: "run scenario files (scripted providers, a policy, the caller's actions) and check their outcomes",
		run:     runReplay,
	})
}

// replayReport is one scenario's report, as --json prints it.
type replayReport struct {
	File string `json:"file"`
	// Pass is true when the outcome matched the expectation.
	Pass bool `json:"pass"`
	// Error is set when the scenario could not run (unreadable, invalid).
	Error     string             `json:"error,omitempty"`
	LoadError string             `json:"load_error,omitempty"`
	Requests  []scenario.Outcome `json:"requests,omitempty"`
	// Diff is the readable difference, "- want" and "+ got" lines.
	Diff string `json:"diff,omitempty"`
}

// runReplay plays each scenario file and prints its actual outcome. Exit
// codes: 0 when every scenario matched, 1 when one did not or could not run,
// 2 for bad arguments.
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the reports as one JSON array")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: retryhost replay [--json] FILE|DIR...\n\n"+
			"Runs each scenario file (a directory: its *.json files; the format is in\n"+
			"testdata/scenarios/README.md), prints what happened, and exits 1 with a\n"+
			"diff when an outcome differs from its expectation.\n\n")
		fs.PrintDefaults()
	}
	var files []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, expandDir(fs.Arg(0))...)
		rest = fs.Args()[1:]
	}
	if len(files) == 0 {
		fs.Usage()
		return 2
	}
	reports := make([]replayReport, 0, len(files))
	for _, f := range files {
		reports = append(reports, replayOne(ctx, f))
	}
	failed := 0
	for _, r := range reports {
		if !r.Pass {
			failed++
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(reports); err != nil {
			fmt.Fprintf(stderr, "retryhost replay: %v\n", err)
			return 1
		}
	} else {
		printReplay(stdout, reports, termFor(stdout).color)
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// expandDir turns a directory into its *.json files, sorted; anything else
// is kept as is (a missing file is reported when it is read).
func expandDir(arg string) []string {
	if fi, err := os.Stat(arg); err != nil || !fi.IsDir() {
		return []string{arg}
	}
	m, _ := filepath.Glob(filepath.Join(arg, "*.json"))
	if len(m) == 0 {
		return []string{arg} // reported as unreadable
	}
	return m
}

func replayOne(ctx context.Context, file string) replayReport {
	rep := replayReport{File: file}
	s, res, err := scenario.RunFile(ctx, file, scenario.Options{Builtin: plugins.Module})
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	rep.LoadError, rep.Requests = res.LoadError, res.Requests
	rep.Diff = s.Diff(res)
	rep.Pass = rep.Diff == ""
	return rep
}

// printReplay writes the plain report: one PASS/FAIL/ERROR line per file,
// an indented line per request with its actual outcome, and the diff of a
// mismatch. Lines are stable and tab-free so scripts can split them.
func printReplay(w io.Writer, reports []replayReport, color bool) {
	paint := func(code, s string) string {
		if !color {
			return s
		}
		return "\x1b[" + code + "m" + s + "\x1b[0m"
	}
	var b strings.Builder
	passed := 0
	for _, r := range reports {
		switch {
		case r.Error != "":
			fmt.Fprintf(&b, "%s %s\n  %s\n", paint("31", "ERROR"), r.File, r.Error)
			continue
		case r.Pass:
			passed++
			fmt.Fprintf(&b, "%s %s\n", paint("32", "PASS"), r.File)
		default:
			fmt.Fprintf(&b, "%s %s\n", paint("31", "FAIL"), r.File)
		}
		if r.LoadError != "" {
			fmt.Fprintf(&b, "  load error: %s\n", r.LoadError)
		}
		for i, o := range r.Requests {
			fmt.Fprintf(&b, "  request %d: attempts=[%s] committed=%s text=%s error=%s\n",
				i+1, strings.Join(o.Attempts, ", "), orDash(o.Committed), strconv.Quote(o.Text), orDash(o.Error))
			for _, v := range o.Violations {
				fmt.Fprintf(&b, "    violation: %s\n", v)
			}
		}
		if r.Diff != "" {
			b.WriteString("  diff (- want, + got):\n")
			for line := range strings.Lines(r.Diff) {
				switch t := strings.TrimLeft(line, " "); {
				case strings.HasPrefix(t, "- "):
					line = paint("31", strings.TrimSuffix(line, "\n")) + "\n"
				case strings.HasPrefix(t, "+ "):
					line = paint("32", strings.TrimSuffix(line, "\n")) + "\n"
				}
				b.WriteString("    " + line)
			}
		}
	}
	fmt.Fprintf(&b, "%d scenario(s): %d passed, %d failed\n", len(reports), passed, len(reports)-passed)
	_, _ = io.WriteString(w, b.String())
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
