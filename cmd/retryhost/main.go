// Command retryhost is the command line of the retryhost library: a demo of
// its main job on loopback providers, one request under a policy file,
// scenario replays, and a tool to inspect Wasm plugins.
//
//	retryhost demo
//	retryhost run --policy policy.json "a prompt"
//	retryhost replay testdata/scenarios
//	retryhost plugin inspect FILE.wasm
//	retryhost version
//	retryhost completion bash
//
// Each subcommand registers itself from its file's init (see command);
// main dispatches on the first argument and exits with the subcommand's
// code, one per kind of failure (exitOK … exitInput, then 128+signal).
//
// # Stability
//
// The commands, flags, exit codes and --json output are stable (changes
// are listed in CHANGELOG.md); the plain text output is for people and
// may change.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes, one per kind of outcome; docs/cli.md's table documents them.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and its answer is "no": the request failed, a scenario mismatched, a plugin is rejected
	exitUsage = 2 // bad flags or arguments
	exitInput = 3 // an input cannot be used: a missing or unreadable file, a policy mistake, empty or oversized stdin
	// A command stopped by a signal exits 128+its number, as shells report
	// it: 130 for SIGINT, 143 for SIGTERM.
	exitSignal = 128
)

// maxStdin bounds what a command reads from stdin (run's PROMPT "-"): a
// prompt larger than this is refused instead of being buffered whole.
const maxStdin = 8 << 20

// runStdin is the commands' stdin; tests replace it.
var runStdin io.Reader = os.Stdin

// signalled is the cause of the context a signal cancels.
type signalled struct{ sig syscall.Signal }

func (s signalled) Error() string { return "interrupted by " + sigName(s.sig) }

func sigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

func main() { os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr)) }

// runMain runs the CLI under signal handling. SIGINT and SIGTERM cancel
// the command's context (with a signalled cause, so it can say why and
// summarise); a command that then fails exits 128+signal. A second signal
// is not caught: it ends the process at once.
func runMain(args []string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	watcher := make(chan struct{})
	go func() {
		defer close(watcher)
		select {
		case s := <-sigs:
			signal.Stop(sigs)
			if ss, ok := s.(syscall.Signal); ok {
				cancel(signalled{ss})
			}
		case <-done:
		}
	}()
	code := dispatch(ctx, args, stdout, stderr)
	signal.Stop(sigs)
	close(done)
	<-watcher
	var sig signalled
	if code != exitOK && errors.As(context.Cause(ctx), &sig) {
		code = exitSignal + int(sig.sig)
	}
	return code
}

// dispatch runs the command args name; tests call it directly.
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := defaultGlobals()
	e := &env{stdin: runStdin, stdout: stdout, stderr: stderr, path: "retryhost", g: g}
	fs := newFlagSet("retryhost", g)
	rest, err := parseInterspersed(fs, args, true)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printTopUsage(stdout)
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "retryhost: %v\nRun 'retryhost --help' for usage.\n", err)
		return exitUsage
	case len(rest) == 0:
		printTopUsage(stderr)
		return exitUsage
	}
	if rest[0] == "help" {
		if len(rest) == 1 {
			printTopUsage(stdout)
			return exitOK
		}
		c, ok := commands[rest[1]]
		if !ok {
			fmt.Fprintf(stderr, "retryhost: no help for unknown command %q\n", rest[1])
			return exitUsage
		}
		e.path += " " + c.name
		return helpFor(e, c, rest[2:])
	}
	c, ok := commands[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "retryhost: unknown command %q\nRun 'retryhost --help' for usage.\n", rest[0])
		return exitUsage
	}
	e.path += " " + c.name
	return c.run(ctx, e, rest[1:])
}
