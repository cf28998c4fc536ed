package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// helpWidth is the column every help line fits in.
const helpWidth = 100

// usageLine is "retryhost run [flags] PROMPT..." or, for a group,
// "retryhost plugin COMMAND [flags] ...".
func usageLine(path string, c *command) string {
	if c.setup == nil {
		return path + " COMMAND [flags] [ARGS...]"
	}
	s := path + " [flags]"
	if c.args != "" {
		s += " " + c.args
	}
	return s
}

// printUsage writes a command's help: the usage line, the help text, the
// subcommands or the flags, then the global flags. Every command's help has
// this shape.
func printUsage(w io.Writer, path string, c *command) {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s\n", usageLine(path, c))
	if c.help != "" || c.summary != "" {
		b.WriteString("\n")
		text := c.help
		if text == "" {
			text = capitalize(c.summary) + "."
		}
		for i, para := range strings.Split(text, "\n\n") {
			if i > 0 {
				b.WriteString("\n")
			}
			wrap(&b, "", "", para)
		}
	}
	if c.setup == nil {
		b.WriteString("\ncommands:\n")
		listCommands(&b, c.subs)
		fmt.Fprintf(&b, "\nRun '%s COMMAND --help' for a command's flags.\n", path)
	} else {
		fs := newFlagSet(path, defaultGlobals())
		c.setup(fs)
		if flags := localFlags(fs); len(flags) > 0 {
			b.WriteString("\nflags:\n")
			printFlags(&b, flags, false)
		}
	}
	b.WriteString("\nglobal flags (any command, before or after its arguments):\n")
	printFlags(&b, globalFlags(), true)
	_, _ = io.WriteString(w, b.String())
}

// printTopUsage writes the whole CLI's help.
func printTopUsage(w io.Writer) {
	var b strings.Builder
	b.WriteString("usage: retryhost [flags] COMMAND [ARGS...]\n\n")
	wrap(&b, "", "", "retryhost: retry and model fail-over for LLM calls, with sandboxed Wasm plugins.")
	b.WriteString("\ncommands:\n")
	var leaves []*command // a group's subcommands by their full name
	for _, c := range sortedCommands() {
		if c.setup != nil {
			leaves = append(leaves, c)
		}
		for _, s := range c.subs {
			leaves = append(leaves, &command{name: c.name + " " + s.name, summary: s.summary})
		}
	}
	listCommands(&b, leaves)
	b.WriteString("\nglobal flags (any command, before or after its arguments):\n")
	printFlags(&b, globalFlags(), true)
	b.WriteString("\nRun 'retryhost COMMAND --help' (or 'retryhost help COMMAND') for a command's usage.\n" +
		"Exit codes: 0 ok, 1 failed, 2 usage, 3 bad input, 130 SIGINT, 143 SIGTERM (see docs/cli.md).\n")
	_, _ = io.WriteString(w, b.String())
}

func listCommands(b *strings.Builder, cs []*command) {
	width := 0
	for _, c := range cs {
		width = max(width, len(c.name))
	}
	for _, c := range cs {
		head := fmt.Sprintf("  %-*s  ", width, c.name)
		wrap(b, head, strings.Repeat(" ", len(head)), c.summary)
	}
}

// globalFlags lists the flags every command accepts.
func globalFlags() []*flag.Flag {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	defaultGlobals().register(fs)
	var out []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { out = append(out, f) })
	return out
}

// localFlags lists fs's flags but the global ones.
func localFlags(fs *flag.FlagSet) []*flag.Flag {
	global := map[string]bool{}
	for _, f := range globalFlags() {
		global[f.Name] = true
	}
	var out []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !global[f.Name] {
			out = append(out, f)
		}
	})
	return out
}

// printFlags writes "  --name VALUE  usage" rows, aligned, the usage
// wrapped; -h/--help closes the list.
func printFlags(b *strings.Builder, flags []*flag.Flag, withHelp bool) {
	type row struct{ head, usage string }
	rows := make([]row, 0, len(flags)+1)
	width := 0
	for _, f := range flags {
		name, usage := flag.UnquoteUsage(f)
		dash := "--"
		if len(f.Name) == 1 { // -o, as the README and habit write it (both parse)
			dash = "-"
		}
		head := dash + f.Name
		if name != "" && !isBool(f) {
			head += " " + name
		}
		rows = append(rows, row{head, strings.ReplaceAll(usage, "\n", " ")})
		width = max(width, len(head))
	}
	if withHelp {
		rows = append(rows, row{"-h, --help", "show the help and exit 0"})
		width = max(width, len("-h, --help"))
	}
	for _, r := range rows {
		head := fmt.Sprintf("  %-*s  ", width, r.head)
		wrap(b, head, strings.Repeat(" ", len(head)), r.usage)
	}
}

func isBool(f *flag.Flag) bool {
	bf, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && bf.IsBoolFlag()
}

// wrap writes text after first (then after indent on every next line),
// breaking at spaces to fit helpWidth.
func wrap(b *strings.Builder, first, indent, text string) {
	line := first
	empty := true
	for _, word := range strings.Fields(text) {
		if !empty && len([]rune(line))+1+len([]rune(word)) > helpWidth {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line, empty = indent, true
		}
		if !empty {
			line += " "
		}
		line += word
		empty = false
	}
	b.WriteString(strings.TrimRight(line, " ") + "\n")
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
