package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/policy"
)

// TestPolicyCheck: CI lints policy files with no key in the environment
// and no network: a valid file passes whatever keys are unset, a mistake
// exits 1 with its place (as text, or as JSON a script can read), and a
// key pasted into api_key_env never reaches the output.
func TestPolicyCheck(t *testing.T) {
	const secret = "sk-proj-abc123SECRET456"
	dir := t.TempDir()
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(doc), 0o600))
		return p
	}
	good := write("good.yaml", `models:
  - {name: fast, provider: openai, model: gpt-4o-mini, api_key_env: NOT_SET_ANYWHERE}
  - {name: strong, provider: anthropic, model: claude-sonnet-4-5, api_key_env: ALSO_NOT_SET}
rules:
  - {when: {class: [refusal]}, action: switch, model: strong}
transforms:
  - plugin: {builtin: refusal}
`)
	typo := write("typo.json", `{
  "models": [{"name": "fast", "provider": "openai", "model": "gpt-4o-mini", "api_key_env": "K"}],
  "rules": [{"when": {"status": [429]}, "action": "retyr"}]
}`)
	leak := write("leak.yaml", "models:\n  - {name: fast, provider: openai, model: gpt-4o, api_key_env: "+secret+"}\n")

	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := dispatch(context.Background(), args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, out, errOut := run("policy", "check", good)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, good+": ok\n", out)

	code, out, _ = run("policy", "check", good, typo)
	require.Equal(t, exitFail, code)
	require.Equal(t, good+": ok\n"+typo+`: line 3:51: rules[0].action: unknown action "retyr" (want switch, retry or give-up)`+"\n", out)

	code, out, _ = run("policy", "check", typo, "--json")
	require.Equal(t, exitFail, code)
	var v struct {
		Valid bool
		Files []checkResult
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.False(t, v.Valid)
	require.Equal(t, []checkResult{{File: typo, Error: &checkError{Path: "rules[0].action", Line: 3, Column: 51,
		Message: `unknown action "retyr" (want switch, retry or give-up)`}}}, v.Files)

	code, out, errOut = run("policy", "check", leak)
	require.Equal(t, exitFail, code)
	require.Contains(t, out, "models[0].api_key_env: not an environment variable name")
	require.NotContains(t, out+errOut, secret)

	code, out, _ = run("policy", "check", filepath.Join(dir, "missing.yaml"))
	require.Equal(t, exitInput, code)
	require.Contains(t, out, "no such file")

	code, _, errOut = run("policy", "check")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "usage: retryhost policy check")
	code, _, _ = run("policy", "lint", good)
	require.Equal(t, exitUsage, code)
}

// TestPolicyCheckUnreadable: a path that cannot be read as a policy file
// (a directory, a file over the size limit) exits 3 like a missing file,
// the README's "an input cannot be used", not 1 as if it were read and
// found invalid; the JSON report still names it.
func TestPolicyCheckUnreadable(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, nil, 0o600))
	require.NoError(t, os.Truncate(big, policy.MaxFileSize+1))
	for _, tt := range []struct{ name, file, msg string }{
		{"directory", dir, "is a directory"},
		{"too large", big, "larger than the 16 MiB limit of a policy file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := dispatch(context.Background(), []string{"policy", "check", tt.file}, &stdout, &stderr)
			require.Equal(t, exitInput, code, stdout.String())
			require.Contains(t, stdout.String(), tt.msg)

			stdout.Reset()
			code = dispatch(context.Background(), []string{"policy", "check", "--json", tt.file}, &stdout, &stderr)
			require.Equal(t, exitInput, code)
			var v struct {
				Valid bool
				Files []checkResult
			}
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &v))
			require.False(t, v.Valid)
			require.Len(t, v.Files, 1)
			require.Contains(t, v.Files[0].Error.Message, tt.msg)
		})
	}
}

// policy schema prints the schema policy check validates against, byte for
// byte the committed policy/schema.json, and takes no argument.
func TestPolicySchemaPrintsTheSchema(t *testing.T) {
	code, out, errOut := run(t, "policy", "schema")
	require.Equal(t, exitOK, code, errOut)
	want, err := os.ReadFile("../../policy/schema.json")
	require.NoError(t, err)
	require.Equal(t, string(want), out)
	require.True(t, json.Valid([]byte(out)))

	code, _, errOut = run(t, "policy", "schema", "extra")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "takes no argument")
}
