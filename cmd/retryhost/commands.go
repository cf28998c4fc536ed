package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
)

// command is one subcommand of the CLI, or a group of them (subs).
//
// To add one, register it from an init in its own file; a group and its
// subcommands are one registration:
//
//	func init() {
//		register(&command{name: "policy", summary: "…", subs: []*command{{
//			name: "check", args: "FILE", summary: "…", help: "…",
//			setup: func(fs *flag.FlagSet) runFunc {
//				asJSON := fs.Bool("json", false, "print the result as JSON")
//				return func(ctx context.Context, e *env, args []string) int { … }
//			},
//		}}})
//	}
//
// The framework gives every command the same behaviour: --help (and -h,
// help COMMAND) prints the usage on stdout and exits 0; flags are accepted
// before and after the arguments ("--" ends them); a flag error prints the
// mistake and the usage line on stderr and exits 2; the global flags
// (--log-level, --log-format, --cache-dir) work everywhere; and the
// command appears in the usage list, the help and the shell completions.
type command struct {
	name string
	// args names the positional arguments in the usage line ("FILE|DIR...").
	args string
	// summary is one line for the command list; help the paragraphs the
	// command's own usage shows (wrapped to fit 100 columns).
	summary, help string
	// setup declares the command's flags on fs and returns the function that
	// runs it with their values. Nil for a group.
	setup func(fs *flag.FlagSet) runFunc
	subs  []*command
	// argWords are what the shell completes a positional argument to
	// (besides files, unless noFiles).
	argWords []string
	noFiles  bool
}

// runFunc runs a command with its positional arguments (flags parsed) and
// returns its exit code.
type runFunc func(ctx context.Context, e *env, args []string) int

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// sortedCommands returns the top-level commands by name.
func sortedCommands() []*command {
	out := make([]*command, 0, len(commands))
	for _, c := range commands {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *command) int { return strings.Compare(a.name, b.name) })
	return out
}

// env is what a running command talks to.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	path           string // "retryhost run", for messages
	g              *globals
	log            *slog.Logger
}

// errorf prints "retryhost CMD: message" on stderr and returns code.
func (e *env) errorf(code int, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "%s: %s\n", e.path, fmt.Sprintf(format, args...))
	return code
}

// usageError prints a usage mistake, the usage line and where the help is,
// and returns exitUsage.
func (e *env) usageError(c *command, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "%s: %s\nusage: %s\nRun '%s --help' for details.\n",
		e.path, fmt.Sprintf(format, args...), usageLine(e.path, c), e.path)
	return exitUsage
}

// run parses args for c (a leaf or a group) and runs it.
func (c *command) run(ctx context.Context, e *env, args []string) int {
	if c.setup == nil { // a group: the first argument names the subcommand
		fs := newFlagSet(e.path, e.g)
		rest, err := parseInterspersed(fs, args, true)
		switch {
		case errors.Is(err, flag.ErrHelp):
			printUsage(e.stdout, e.path, c)
			return exitOK
		case err != nil:
			return e.usageError(c, "%v", err)
		case len(rest) == 0:
			fmt.Fprintf(e.stderr, "%s: missing a subcommand\n\n", e.path)
			printUsage(e.stderr, e.path, c)
			return exitUsage
		}
		if rest[0] == "help" {
			return helpFor(e, c, rest[1:])
		}
		for _, s := range c.subs {
			if s.name == rest[0] {
				sub := *e
				sub.path = e.path + " " + s.name
				return s.run(ctx, &sub, rest[1:])
			}
		}
		if slices.ContainsFunc(rest, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
			printUsage(e.stdout, e.path, c)
			return exitOK
		}
		return e.usageError(c, "unknown subcommand %q", rest[0])
	}
	fs := newFlagSet(e.path, e.g)
	run := c.setup(fs)
	rest, err := parseInterspersed(fs, args, false)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(e.stdout, e.path, c)
		return exitOK
	}
	if err != nil {
		return e.usageError(c, "%v", err)
	}
	e.log = e.g.logger(e.stderr)
	return run(ctx, e, rest)
}

// helpFor prints the usage of the command path names under c.
func helpFor(e *env, c *command, names []string) int {
	path := e.path
	for _, n := range names {
		i := slices.IndexFunc(c.subs, func(s *command) bool { return s.name == n })
		if i < 0 {
			fmt.Fprintf(e.stderr, "%s: no help for unknown command %q\n", e.path, strings.Join(names, " "))
			return exitUsage
		}
		c, path = c.subs[i], path+" "+n
	}
	printUsage(e.stdout, path, c)
	return exitOK
}

// newFlagSet returns a flag set with the global flags on it; it prints
// nothing itself (the framework reports errors and usage).
func newFlagSet(name string, g *globals) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	g.register(fs)
	return fs
}

// parseInterspersed parses fs's flags wherever they are among args and
// returns the positional arguments in order. "--" ends the flags; a lone
// "-" is an argument. With stopAtFirst (a group), parsing stops at the
// first argument, which names the subcommand that parses the rest.
func parseInterspersed(fs *flag.FlagSet, args []string, stopAtFirst bool) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(pos, rest...), nil
		}
		if stopAtFirst {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
