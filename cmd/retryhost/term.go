package main

import (
	"os"
)

// term says how to write for w: colour and live progress only when w is a
// terminal (a character device), colour only without NO_COLOR
// (https://no-color.org). Anything else (a pipe, a file, a test buffer)
// gets plain, line-oriented output a script can parse.
type term struct {
	tty, color bool
}

func termFor(w any) term {
	f, ok := w.(*os.File)
	if !ok {
		return term{}
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return term{}
	}
	_, noColor := os.LookupEnv("NO_COLOR")
	return term{tty: true, color: !noColor}
}

const (
	ansiReset  = "\x1b[0m"
	ansiBold   = "\x1b[1m"
	ansiDim    = "\x1b[2m"
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiCyan   = "\x1b[36m"
)

// paint wraps s in an ANSI style when colour is on.
func (t term) paint(style, s string) string {
	if !t.color || s == "" {
		return s
	}
	return style + s + ansiReset
}
