package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"

	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
)

func init() {
	register(&command{
		name:    "policy",
		summary: "work with policy files",
		subs: []*command{{
			name:    "check",
			args:    "FILE...",
			summary: "check policy files without keys or network, for CI (exit 1 if one is invalid)",
			help: "Validates each policy file (JSON or YAML) as policy.Validate does: everything but the " +
				"providers. No API key is read, no connection is made; Wasm plugins are loaded and closed, " +
				"the built-ins available by name. Prints FILE: ok or the mistake with its line and column.\n\n" +
				"Exit 0 when every file is valid, 1 when one is not, 3 when one cannot be read.",
			setup: func(fs *flag.FlagSet) runFunc {
				asJSON := fs.Bool("json", false, "print the verdicts as JSON")
				var rf registryFlags
				rf.declarePolicy(fs)
				return func(ctx context.Context, e *env, args []string) int {
					return runPolicyCheck(ctx, e, args, *asJSON, &rf)
				}
			},
		}, {
			name:    "schema",
			summary: "print the JSON Schema of a policy file, for an editor",
			help: "Prints the JSON Schema of a policy file (policy/schema.json), generated from the Go " +
				"types a policy is decoded into, the ones policy check validates against: point an " +
				"editor's JSON or YAML language server at it.\n\nExit 0.",
			noFiles: true,
			setup: func(fs *flag.FlagSet) runFunc {
				return func(ctx context.Context, e *env, args []string) int {
					if len(args) > 0 {
						return e.usageError(commands["policy"].subs[1], "takes no argument")
					}
					if _, err := e.stdout.Write(policy.Schema()); err != nil {
						return e.errorf(exitFail, "%v", err)
					}
					return exitOK
				}
			},
		}},
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

// runPolicyCheck checks every file as policy.ValidateFile does: everything
// but the providers (no key read, no adapter built, no connection), the Wasm
// plugins loaded with the built-ins available by name.
func runPolicyCheck(ctx context.Context, e *env, files []string, asJSON bool, rf *registryFlags) int {
	if len(files) == 0 {
		return e.usageError(commands["policy"].subs[0], "missing a FILE")
	}
	stdout := e.stdout
	hostOpts := e.hostOptions(ctx)
	code := exitOK
	results := make([]checkResult, 0, len(files))
	for _, f := range files {
		r := checkResult{File: f, Valid: true}
		if err := policy.ValidateFile(ctx, f, policy.Options{Builtin: plugins.Module, OCI: rf.policyOCI(e), HostOptions: hostOpts, Logger: e.log}); err != nil {
			r.Valid = false
			var pathErr *fs.PathError
			var policyErr *policy.Error
			// The file itself could not be read (missing, a directory, too
			// large): exit 3. A plugin path is reported inside a policy.Error.
			if errors.As(err, &pathErr) && !errors.As(err, &policyErr) {
				code = exitInput
			} else if code == exitOK {
				code = exitFail
			}
			r.Error = &checkError{Message: err.Error()}
			var pe *policy.Error
			if errors.As(err, &pe) {
				r.Error = &checkError{Path: pe.Path, Line: pe.Line, Column: pe.Col, Message: pe.Msg}
			}
			if !asJSON {
				fmt.Fprintf(stdout, "%v\n", err)
			}
		} else if !asJSON {
			fmt.Fprintf(stdout, "%s: ok\n", f)
		}
		results = append(results, r)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Valid bool          `json:"valid"`
			Files []checkResult `json:"files"`
		}{code == exitOK, results}); err != nil {
			return e.errorf(exitFail, "%v", err)
		}
	}
	return code
}
