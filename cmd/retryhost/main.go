// Command retryhost is the command line of the retryhost library: a demo of
// its main job on loopback providers, one request under a policy file,
// scenario replays, and a tool to inspect Wasm plugins.
//
//	retryhost demo
//	retryhost run --policy policy.json "a prompt"
//	retryhost replay testdata/scenarios
//	retryhost plugin inspect FILE.wasm
//
// Each subcommand registers itself from its file's init; main dispatches on
// the first argument and exits with the subcommand's code.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
)

// Exit codes shared by the subcommands.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and its answer is "no" or it failed
	exitUsage = 2 // bad arguments
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if ctx.Err() != nil && code != exitOK {
		code = 130 // interrupted, as shells report SIGINT
	}
	stop()
	os.Exit(code)
}

// dispatch runs the subcommand named by args[0]; tests call it directly.
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				fmt.Fprintf(stdout, "usage: retryhost %s\n\n%s\n", c.usage, c.summary)
				return exitOK
			}
		}
		usage(stdout)
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "retryhost: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

// usage lists the registered commands, sorted by name.
func usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	width := 0
	for name, c := range commands {
		names = append(names, name)
		width = max(width, len(c.usage))
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString("retryhost: retry and model fail-over for LLM calls, with sandboxed Wasm plugins\n\nusage:\n")
	for _, name := range names {
		c := commands[name]
		fmt.Fprintf(&b, "  retryhost %-*s  %s\n", width, c.usage, c.summary)
	}
	b.WriteString("\nretryhost help COMMAND shows one command's usage.\n")
	io.WriteString(w, b.String())
}
