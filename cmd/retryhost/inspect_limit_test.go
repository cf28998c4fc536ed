package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/internal/testkit/wasmgen"
)

// TestPluginInspect_FileOverTheModuleLimit: plugin inspect reads a file
// only up to the host's module size limit (ModuleBytes, 16 MiB): a larger
// regular file (sparse here) is rejected (exit 1, reason limit) from its
// size, unread, and /dev/zero, which never ends, once past the limit;
// neither is read into memory whole.
func TestPluginInspect_FileOverTheModuleLimit(t *testing.T) {
	limit := host.DefaultModuleLimits().ModuleBytes
	big := filepath.Join(t.TempDir(), "big.wasm")
	f, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(int64(limit)+1))
	require.NoError(t, f.Close())
	type rep struct {
		Size     int
		SHA256   string
		Accepted bool
		Reason   string
		Error    string
	}
	cases := []struct {
		name, file, text string
		want             rep
	}{
		{"regular file", big, fmt.Sprintf("size:     %d bytes, over the host's limit", limit+1),
			rep{Size: limit + 1, Reason: "limit", Error: fmt.Sprintf("ModuleBytes: %d exceeds the limit of %d", limit+1, limit)}},
	}
	if runtime.GOOS == "linux" {
		cases = append(cases, struct {
			name, file, text string
			want             rep
		}{"/dev/zero", "/dev/zero", fmt.Sprintf("size:     more than %d bytes, over the host's limit", limit),
			rep{Size: limit + 1, Reason: "limit", Error: fmt.Sprintf("over the host's limit on ModuleBytes (%d)", limit)}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(t, "plugin", "inspect", "--json", tc.file)
			require.Equal(t, exitFail, code, stderr)
			var got rep
			require.NoError(t, json.Unmarshal([]byte(stdout), &got), stdout)
			require.Contains(t, got.Error, tc.want.Error)
			got.Error = tc.want.Error
			require.Equal(t, tc.want, got)

			code, stdout, _ = run(t, "plugin", "inspect", tc.file)
			require.Equal(t, exitFail, code)
			require.Contains(t, stdout, tc.text)
			require.Contains(t, stdout, "sha256:   not computed")
			require.Contains(t, stdout, "accepted: no (limit)")
		})
	}
}

// TestPluginInspect_RefusesASlowCompileUncompiled: a module of 400
// functions, each within the per-function limits, that wazero would
// compile for over 30 s of CPU is refused by the host's CompileWork limit
// before any compile (exit 1, reason limit), rather than running to the
// two-minute CompileTimeout.
func TestPluginInspect_RefusesASlowCompileUncompiled(t *testing.T) {
	file := filepath.Join(t.TempDir(), "slow.wasm")
	require.NoError(t, os.WriteFile(file, wasmgen.SiblingBranchFuncs(400, 2000), 0o600))
	code, stdout, stderr := run(t, "plugin", "inspect", "--json", file)
	require.Equal(t, exitFail, code, stderr)
	var got struct {
		Accepted      bool
		Reason, Error string
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &got), stdout)
	require.False(t, got.Accepted)
	require.Equal(t, "limit", got.Reason)
	require.Contains(t, got.Error, "CompileWork")
}
