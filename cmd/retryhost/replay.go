package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/retryhost/retryhost/cmd/internal/scenario"
	"github.com/retryhost/retryhost/plugins"
)

func init() {
	register(&command{
		name:    "replay",
		args:    "FILE|DIR...",
		summary: "run scenario files (scripted providers, a policy, the caller's actions) and check their outcomes",
		help: "Runs each scenario file (a directory: every *.json file under it, recursively, skipping " +
			"hidden directories; the format is in testdata/scenarios/README.md), prints what happened, " +
			"and shows a diff when an outcome differs from its expectation.\n\n" +
			"Exit 0 when every scenario matched, 1 when one did not, 3 when one could not be read or " +
			"parsed (or a directory holds no scenario).",
		setup: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, "print the reports as one JSON array")
			debug := fs.Bool("debug", false, "keep plugins' DWARF debug info, so a trap names source lines (costly on large debug sections)")
			return func(ctx context.Context, e *env, args []string) int { return runReplay(ctx, e, args, *asJSON, *debug) }
		},
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

// runReplay plays each scenario file and prints its actual outcome.
func runReplay(ctx context.Context, e *env, args []string, asJSON, debug bool) int {
	if len(args) == 0 {
		return e.usageError(commands["replay"], "missing a FILE or DIR")
	}
	var files []string
	for _, a := range args {
		found, err := expandDir(a)
		if err != nil {
			return e.errorf(exitInput, "%v", err)
		}
		files = append(files, found...)
	}
	sopts := scenario.Options{Builtin: plugins.Module, Logger: e.log, HostOptions: hostOpts(ctx, e, debug)}
	reports := make([]replayReport, 0, len(files))
	for _, f := range files {
		reports = append(reports, replayOne(ctx, f, sopts))
	}
	code := exitOK
	for _, r := range reports {
		switch {
		case r.Error != "":
			code = exitInput
		case !r.Pass && code == exitOK:
			code = exitFail
		}
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(reports); err != nil {
			return e.errorf(exitFail, "%v", err)
		}
	} else {
		printReplay(e.stdout, reports, termFor(e.stdout).color)
	}
	if err := ctx.Err(); err != nil && code == exitOK {
		code = exitFail
	}
	return code
}

// expandDir turns a directory into the *.json files under it, recursively
// (hidden directories skipped), sorted; anything else is kept as is (a
// missing file is reported when it is read). A directory with no scenario
// is an error, not an empty success.
func expandDir(arg string) ([]string, error) {
	if fi, err := os.Stat(arg); err != nil || !fi.IsDir() {
		return []string{arg}, nil
	}
	var out []string
	err := filepath.WalkDir(arg, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != arg && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".json") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no scenario (*.json) in it or under it", arg)
	}
	return out, nil // WalkDir visits in lexical order
}

func replayOne(ctx context.Context, file string, opts scenario.Options) replayReport {
	rep := replayReport{File: file}
	s, res, err := scenario.RunFile(ctx, file, opts)
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
			printPluginErrors(&b, o)
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

// printPluginErrors writes what the request's plugins said when they
// failed: the host's account (its first line, then the rest indented: a
// trap's stack) and the guest's own lines, tabs made spaces.
func printPluginErrors(b *strings.Builder, o scenario.Outcome) {
	untab := func(s string) string { return strings.ReplaceAll(s, "\t", "  ") }
	for _, pe := range o.PluginErrors {
		first, rest, _ := strings.Cut(pe.Error, "\n")
		fmt.Fprintf(b, "    plugin error: %s\n", untab(first))
		for line := range strings.Lines(rest) {
			fmt.Fprintf(b, "      %s\n", untab(strings.TrimSuffix(line, "\n")))
		}
		for _, g := range pe.Guest {
			fmt.Fprintf(b, "      guest: %s\n", untab(g))
		}
	}
	if o.PluginErrorsOmitted > 0 {
		fmt.Fprintf(b, "    plugin errors: %d more\n", o.PluginErrorsOmitted)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
