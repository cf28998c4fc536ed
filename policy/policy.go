// Package policy builds retry and fail-over from a declarative file: a JSON
// policy (with // comments) names the models, the ordered rules (native
// conditions, or Wasm condition plugins by path or built-in name), the
// stream transforms, the deadlines, backoff and caps, the sandbox and the
// sticky policy, and Load turns it into the same objects a Go user would
// build by hand: a *driver.Runner for calls, a *driver.RetryableModel for
// streams and, when the policy names Wasm plugins, a *host.Runtime with
// them loaded.
//
// A policy lets operators change rules without a rebuild, and lets one file
// drive the CLI (retryhost run --policy), the scenario replays and a
// service alike. Every mistake is reported at load with the field's path,
// line and column, and unknown fields are errors, so a typo fails the load
// instead of silently changing behaviour:
//
//	policy.json: line 3:51: rules[0].action: unknown action "retyr" (want switch, retry or give-up)
//
// The complete, commented reference file is policy/testdata/example.json.
// API keys are never in the file: a model names the environment variable
// that holds its key (api_key_env).
//
// Built-in plugin names ("builtin": "refusal") resolve only through
// Options.Builtin; set it to plugins.Module (package
// github.com/retryhost/retryhost/plugins) to allow them. This package does
// not import the built-in plugins itself, so a program that never names one
// does not embed their Wasm.
//
// # Stability
//
// Experimental: the file's schema is still growing (model identity,
// YAML); a field's meaning does not change silently, and every change is
// listed in CHANGELOG.md.
package policy

import (
	"context"

	ipolicy "github.com/retryhost/retryhost/internal/policy"
)

// The types are defined in the implementation package shared with the
// scenario replays (which embed a policy in a larger document and need the
// builder's positions); these aliases are the supported names.
type (
	// Options are what the caller supplies beyond the file: a name for
	// errors, the directory relative plugin paths resolve against, models
	// bound in code, built-in plugins, how to read API keys, a logger, and
	// options appended to the driver's and the host's. The zero Options
	// reads keys with os.Getenv, resolves paths against the file's
	// directory, allows no built-in plugins and logs nothing.
	Options = ipolicy.Options
	// Policy is a loaded policy: Runner (calls), Model (streams, with the
	// file's transforms), Models by name, and Runtime (nil without Wasm
	// plugins). Close it to release its plugins. A Policy's Runner and
	// Model are safe for concurrent use.
	Policy = ipolicy.Policy
	// Error is a mistake in a policy file, with its path, line and column.
	// Branch on it with errors.As.
	Error = ipolicy.Error
)

// Load reads and builds the policy file at path. Relative plugin paths are
// resolved against the file's directory unless opts.Dir says otherwise;
// errors are prefixed with path unless opts.Name says otherwise.
func Load(ctx context.Context, path string, opts Options) (*Policy, error) {
	return ipolicy.Load(ctx, path, opts)
}

// Parse builds a policy from the file's bytes (opts.Name labels errors).
func Parse(ctx context.Context, data []byte, opts Options) (*Policy, error) {
	return ipolicy.Parse(ctx, data, opts)
}
