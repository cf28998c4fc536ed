package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
)

func init() {
	register(command{
		name:    "policy",
		usage:   "policy check [--json] FILE...",
		summary: "check policy files without keys or network, for CI (exit 1 if one is invalid)",
		run:     runPolicyCmd,
	})
}

// checkResult is one file's verdict; Error is absent when it is valid.
type checkResult struct {
	File  string      `json:"file"`
	Valid bool        `json:"valid"`
	Error *checkError `json:"error,omitempty"`
}

// checkError is the mistake, with its place when the policy names it.
type checkError struct {
	Path    string `json:"path,omitempty"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Message string `json:"message"`
}

// runPolicyCmd checks every file as policy.ValidateFile does: everything but
// the providers (no key read, no adapter built, no connection), the Wasm
// plugins loaded with the built-ins available by name.
func runPolicyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, "usage: retryhost "+commands["policy"].usage)
		return exitUsage
	}
	fs := flag.NewFlagSet("policy check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the verdicts as JSON")
	var files []string
	for rest := args[1:]; ; { // flags may come before or after the files
		if err := fs.Parse(rest); err != nil {
			return exitUsage
		}
		if rest = fs.Args(); len(rest) == 0 {
			break
		}
		files, rest = append(files, rest[0]), rest[1:]
	}
	if len(files) == 0 {
		fmt.Fprintln(stderr, "usage: retryhost "+commands["policy"].usage)
		return exitUsage
	}
	code := exitOK
	results := make([]checkResult, 0, len(files))
	for _, f := range files {
		r := checkResult{File: f, Valid: true}
		if err := policy.ValidateFile(ctx, f, policy.Options{Builtin: plugins.Module, OCI: policyOCI(), HostOptions: demoHostOptions()}); err != nil {
			r.Valid, code = false, exitFail
			r.Error = &checkError{Message: err.Error()}
			var pe *policy.Error
			if errors.As(err, &pe) {
				r.Error = &checkError{Path: pe.Path, Line: pe.Line, Column: pe.Col, Message: pe.Msg}
			}
			if !*asJSON {
				fmt.Fprintf(stdout, "%v\n", err)
			}
		} else if !*asJSON {
			fmt.Fprintf(stdout, "%s: ok\n", f)
		}
		results = append(results, r)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Valid bool          `json:"valid"`
			Files []checkResult `json:"files"`
		}{code == exitOK, results}); err != nil {
			fmt.Fprintf(stderr, "retryhost: %v\n", err)
			return exitFail
		}
	}
	return code
}
