package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit/wasmgen"
)

func TestPluginInspect_JudgesEveryHostFixture(t *testing.T) {
	for _, tc := range []struct {
		file   string
		kinds  []string
		reason string // "" when accepted
		abi    string
		why    string // part of the host's explanation
	}{
		{file: "refusal.wasm", kinds: []string{"transform"}, abi: "v1"},
		{file: "upper.wasm", kinds: []string{"transform"}, abi: "v1"},
		// Call-time hostiles pass the load checks; the host contains them per call.
		{file: "loop.wasm", kinds: []string{"condition", "transform"}, abi: "v1"},
		{file: "trap.wasm", kinds: []string{"condition", "transform"}, abi: "v1"},
		{file: "membomb.wasm", kinds: []string{"transform"}, abi: "v1"},
		{file: "garbage.wasm", kinds: []string{"condition", "transform"}, abi: "v1"},
		{file: "huge.wasm", kinds: []string{"condition", "transform"}, abi: "v1"},
		{file: "oobinput.wasm", kinds: []string{"condition"}, abi: "v1"},
		{file: "boom.wasm", kinds: []string{"transform"}, abi: "v1"},
		// Load-time hostiles are rejected, each with its reason.
		{file: "forbidden_file.wasm", kinds: []string{"condition"}, abi: "v1", reason: "forbidden-import", why: "wasi_snapshot_preview1.path_open"},
		{file: "forbidden_sock.wasm", kinds: []string{"condition"}, abi: "v1", reason: "forbidden-import", why: "wasi_snapshot_preview1.sock_accept"},
		{file: "wrongabi.wasm", kinds: []string{"condition"}, abi: "v2", reason: "abi-version", why: "built for ABI v2"},
		{file: "nokind.wasm", kinds: []string{}, abi: "v1", reason: "no-kind", why: "neither a condition nor a transform"},
		{file: "initpanic.wasm", kinds: []string{"condition"}, abi: "v1", reason: "init", why: "unreachable"},
		{file: "oob.wasm", kinds: []string{"condition"}, abi: "v1", reason: "no-buffer", why: "scratch buffer"},
		{file: "rejectconfig.wasm", kinds: []string{"condition"}, abi: "v1", reason: "needs-config", why: "bad config!!"},
		{file: "condition.wasm", kinds: []string{"condition"}, abi: "v1", reason: "needs-config", why: "fallback model"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			path := filepath.Join("..", "..", "host", "testdata", tc.file)
			code := dispatch(context.Background(), []string{"plugin", "inspect", "--json", path}, &stdout, &stderr)
			require.Empty(t, stderr.String())
			var r report
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &r), stdout.String())
			require.Equal(t, tc.kinds, r.Kinds)
			require.Equal(t, tc.abi, r.ABI)
			require.Len(t, r.SHA256, 64)
			require.NotEmpty(t, r.Exports)
			require.NotEmpty(t, r.Memories)
			if tc.reason == "" {
				require.Equal(t, exitOK, code)
				require.True(t, r.Accepted)
				require.Empty(t, r.Error)
				return
			}
			require.Equal(t, exitFail, code)
			require.False(t, r.Accepted)
			require.Equal(t, tc.reason, r.Reason)
			require.Contains(t, r.Error, tc.why)
		})
	}
}

func TestPluginInspect_ConfigIsHandedToInit(t *testing.T) {
	var stdout, stderr bytes.Buffer
	path := filepath.Join("..", "..", "host", "testdata", "condition.wasm")
	code := dispatch(context.Background(), []string{"plugin", "inspect", path, "--config", "anthropic/claude-sonnet-4"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stdout.String()+stderr.String())
	require.Contains(t, stdout.String(), "accepted: yes\n")
}

func TestPluginInspect_PlainOutputIsLineOriented(t *testing.T) {
	var stdout, stderr bytes.Buffer
	path := filepath.Join("..", "..", "host", "testdata", "wrongabi.wasm")
	code := dispatch(context.Background(), []string{"plugin", "inspect", path}, &stdout, &stderr)
	require.Equal(t, exitFail, code)
	out := stdout.String()
	require.NotContains(t, out, "\x1b[", "no colour when not a terminal")
	require.Contains(t, out, "abi:      v2 (this host speaks v1.3)\n")
	require.Contains(t, out, "memory:   1\n  memory: min 1 pages (64 KiB), no declared max\n")
	require.Contains(t, out, "  retryhost_v2.buffer(i32, i32) i32\n")
	require.Contains(t, out, "accepted: no (abi-version)\n")
}

func TestPluginInspect_BadInput(t *testing.T) {
	notWasm := filepath.Join(t.TempDir(), "x.wasm")
	require.NoError(t, os.WriteFile(notWasm, []byte("not wasm"), 0o600))
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string // in stdout, or stderr when stdout is empty
	}{
		{"no subcommand", []string{"plugin"}, exitUsage, "  inspect  describe a Wasm plugin"},
		{"no file", []string{"plugin", "inspect"}, exitUsage, "usage: retryhost plugin inspect"},
		{"missing file", []string{"plugin", "inspect", "/nonexistent.wasm"}, exitInput, "no such file"},
		{"not wasm", []string{"plugin", "inspect", notWasm}, exitFail, "accepted: no (invalid-module)"},
		// A bare name that is neither a file nor a built-in is most likely a
		// mistyped built-in: say so and list them, not just "no such file".
		{"mistyped built-in", []string{"plugin", "inspect", "refusl"}, exitInput,
			`retryhost plugin inspect: open refusl: no such file or directory, and no built-in plugin is called "refusl" ` +
				"(built-ins: refusal, errmatch, finish, c-status)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, tc.code, dispatch(context.Background(), tc.args, &stdout, &stderr))
			out := stdout.String()
			if out == "" {
				out = stderr.String()
			}
			require.Contains(t, out, tc.out)
		})
	}
}

func TestDispatch_UsageListsCommandsSorted(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitUsage, dispatch(context.Background(), nil, &stdout, &stderr))
	require.Regexp(t, `\n  plugin inspect +describe a Wasm plugin`, stderr.String())
	stdout.Reset()
	require.Equal(t, exitOK, dispatch(context.Background(), []string{"help"}, &stdout, &stderr))
	require.Contains(t, stdout.String(), "commands:\n  completion ")
	stderr.Reset()
	require.Equal(t, exitUsage, dispatch(context.Background(), []string{"frobnicate"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), `unknown command "frobnicate"`)
}

// TestPluginInspect_LoadTimeBombs: inspect comes back on every load-time
// bomb with its reason (a start loop used to hang it; 200,000
// exports took wazero two minutes to list; a 60-byte module made it
// allocate ~200 GB).
func TestPluginInspect_LoadTimeBombs(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	fixture := func(name string) string { return filepath.Join("..", "..", "host", "testdata", name) }
	for _, tc := range []struct {
		name, path, reason, why string
	}{
		{"tablegrow", fixture("tablegrow.wasm"), "limit", "TableEntries"},
		{"tablefill", fixture("tablefill.wasm"), "limit", "TableEntries"},
		{"tablehuge", fixture("tablehuge.wasm"), "limit", "TableEntries"},
		{"startloop", fixture("startloop.wasm"), "start-section", "start section"},
		{"initloop", fixture("initloop.wasm"), "init", "timed out"},
		{"exports", write("exports.wasm", wasmgen.Exports(200_000)), "limit", "Exports"},
		{"nesting", write("nesting.wasm", wasmgen.Nested(1, 100_000)), "limit", "Nesting"},
		{"module size", write("data.wasm", wasmgen.Data(60<<20)), "limit", "ModuleBytes"},
		{"lying lengths", write("lengths.wasm", []byte("\x00asm\x01\x00\x00\x00\x01\x05\x01\x60\x00\x00\x00\x02\x01\xff\xff\xff\xff\x07")),
			"invalid-module", "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := dispatch(context.Background(), []string{"plugin", "inspect", "--json", tc.path}, &stdout, &stderr)
			require.Empty(t, stderr.String())
			require.Equal(t, exitFail, code)
			var r report
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &r), stdout.String())
			require.False(t, r.Accepted)
			require.Equal(t, tc.reason, r.Reason)
			require.Contains(t, r.Error, tc.why)
			require.Equal(t, 1, strings.Count(r.Error, "host:"), "one host: prefix: %s", r.Error)
		})
	}
}

// TestPluginInspect_EveryHostileFixture: inspect gives a verdict on every
// committed hostile fixture, the run-time ones included (a loop, a trap, a
// REPLACE bomb … load fine and misbehave only when called), and a rejection
// always names its reason.
func TestPluginInspect_EveryHostileFixture(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "host", "testdata", "*.wasm"))
	require.NoError(t, err)
	require.Greater(t, len(files), 30)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := dispatch(context.Background(), []string{"plugin", "inspect", "--json", "--log-level", "off", f}, &stdout, &stderr)
			var r report
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &r), "stdout %q stderr %q", stdout.String(), stderr.String())
			if r.Accepted {
				require.Equal(t, exitOK, code)
				return
			}
			require.Equal(t, exitFail, code, stderr.String())
			require.NotEmpty(t, r.Reason, "a rejection names its reason: %+v", r)
			require.NotEmpty(t, r.Error)
		})
	}
}
