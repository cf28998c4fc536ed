package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/policy"
)

const (
	passing = "../../testdata/scenarios/basic-success.json"
	failing = "../internal/scenario/testdata/wrong-expectation.json"
)

func replay(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = dispatch(context.Background(), append([]string{"replay"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestReplayRegistered(t *testing.T) {
	c, ok := commands["replay"]
	require.True(t, ok)
	require.Equal(t, "FILE|DIR...", c.args)
}

func TestReplayPlain(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		code  int
		want  string
		inErr string
	}{
		{"pass", []string{passing}, 0,
			"PASS " + passing + "\n" +
				"  request 1: attempts=[primary: ok] committed=primary text=\"Hello, world\" error=-\n" +
				"1 scenario(s): 1 passed, 0 failed\n", ""},
		{"mismatch shows the actual outcome and a diff", []string{failing}, 1,
			"FAIL " + failing + "\n" +
				"  request 1: attempts=[primary: rate-limit, primary: ok] committed=primary text=\"second try\" error=-\n" +
				"  diff (- want, + got):\n" +
				"    request 1:\n" +
				"      attempts:\n" +
				"          primary: rate-limit\n" +
				"        - backup: ok\n" +
				"        + primary: ok\n" +
				"      committed:\n" +
				"        - \"backup\"\n" +
				"        + \"primary\"\n" +
				"      text:\n" +
				"        - \"from backup\"\n" +
				"        + \"second try\"\n" +
				"1 scenario(s): 0 passed, 1 failed\n", ""},
		{"one failure fails the run", []string{passing, failing}, 1, "2 scenario(s): 1 passed, 1 failed\n", ""},
		{"missing file", []string{"nope.json"}, exitInput, "ERROR nope.json\n  open nope.json: no such file or directory\n1 scenario(s): 0 passed, 1 failed\n", ""},
		{"no files", nil, 2, "", "usage: retryhost replay"},
		{"unknown flag", []string{"--yaml", passing}, 2, "", "flag provided but not defined: -yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := replay(tt.args...)
			require.Equal(t, tt.code, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			if tt.code == exitUsage {
				require.Contains(t, errOut, tt.inErr)
				require.Empty(t, out)
				return
			}
			if len(tt.args) > 1 {
				require.Contains(t, out, tt.want)
			} else {
				require.Equal(t, tt.want, out)
			}
			require.NotContains(t, out, "\x1b[", "no colour when stdout is not a terminal")
		})
	}
}

func TestReplayJSON(t *testing.T) {
	code, out, _ := replay(passing, "--json", failing)
	require.Equal(t, 1, code)
	var reps []replayReport
	require.NoError(t, json.Unmarshal([]byte(out), &reps))
	require.Len(t, reps, 2)
	require.True(t, reps[0].Pass)
	require.Empty(t, reps[0].Diff)
	require.Equal(t, []string{"primary: ok"}, reps[0].Requests[0].Attempts)
	require.False(t, reps[1].Pass)
	require.Equal(t, "second try", reps[1].Requests[0].Text)
	require.Contains(t, reps[1].Diff, "+ primary: ok")

	code, out, _ = replay("--json", passing)
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &reps))
	require.Len(t, reps, 1)
}

func TestReplayEveryScenario(t *testing.T) {
	files, err := filepath.Glob("../../testdata/scenarios/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	code, out, errOut := replay("../../testdata/scenarios")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, fmt.Sprintf("%d scenario(s): %d passed, 0 failed\n", len(files), len(files)))
}

// TestReplayOversizedScenario: a scenario file is read under the policy
// file limit (it embeds one), so replay on a runaway file or a device
// reports an unreadable input (exit 3) instead of running out of memory.
func TestReplayOversizedScenario(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.json")
	require.NoError(t, os.WriteFile(big, nil, 0o600))
	require.NoError(t, os.Truncate(big, policy.MaxFileSize+1)) // sparse: no disk used
	code, out, _ := replay(big)
	require.Equal(t, exitInput, code)
	require.Contains(t, out, "read "+big+": larger than the 16 MiB limit of a scenario file")
}

// TestReplayPrintsWhatAFailingPluginSaid: under a request whose Wasm
// condition trapped, replay prints the trap (the host's account, its stack
// indented) and the line the guest logged before it; --json carries the
// same; --debug adds the trap's source lines from the module's DWARF.
func TestReplayPrintsWhatAFailingPluginSaid(t *testing.T) {
	const file = "../../testdata/scenarios/hostile-condition-trap-fail-closed.json"
	cache := []string{"--cache-dir", t.TempDir()}
	code, out, errOut := replay(append(cache, file)...)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "  request 1: attempts=[primary: server] committed=- text=\"\" error=plugin(trap)\n"+
		"    plugin error: host: plugin \"dwarftrap.wasm\": decide: plugin trapped: wasm error: unreachable\n"+
		"      wasm stack trace:\n")
	require.Contains(t, out, "        .decide(i32) i32\n"+
		"      guest: dwarftrap: this decision traps on purpose\n"+
		"1 scenario(s): 1 passed, 0 failed\n")
	require.NotContains(t, out, "dwarftrap.c:", "no source lines without --debug")

	code, out, _ = replay(append(cache, "--json", file)...)
	require.Equal(t, exitOK, code)
	var reps []replayReport
	require.NoError(t, json.Unmarshal([]byte(out), &reps))
	require.Len(t, reps[0].Requests[0].PluginErrors, 1)
	pe := reps[0].Requests[0].PluginErrors[0]
	require.Equal(t, "dwarftrap.wasm", pe.Plugin)
	require.Equal(t, "decide", pe.Op)
	require.Contains(t, pe.Error, "plugin trapped: wasm error: unreachable")
	require.Equal(t, []string{"dwarftrap: this decision traps on purpose"}, pe.Guest)

	// The same cache: --debug must not reuse the code compiled without it.
	code, out, errOut = replay(append(cache, "--debug", file)...)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Regexp(t, `\n        \.decide\(i32\) i32\n          0x[0-9a-f]+: host/testdata/dwarftrap\.c:\d+:\d+\n`, out)
}
