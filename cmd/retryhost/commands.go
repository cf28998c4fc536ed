package main

import (
	"context"
	"io"
)

// command is one subcommand of the CLI.
type command struct {
	name, usage, summary string
	run                  func(ctx context.Context, args []string, stdout, stderr io.Writer) int // exit code
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }
