package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/host"
)

func TestRun_TheRefusalNeverReachesTheCaller(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out, host.WithCacheDir(testCacheDir())))
	require.Equal(t, `attempt 1 on openai/gpt-4o: refusal
  refusal held "I'm sorry, but I can't ": it matched "i'm sorry, but i can't"
attempt 2 on anthropic/claude-sonnet-4: committed, after 1 failed
the caller got: "To reset a forgotten password, use the sign-in page's \"Forgot password\" link."
`, out.String())
}

// testCacheDir is the compilation cache the plugins' tests share across
// test binaries and runs (see plugins/internal/plugintest): compiling a Go
// guest takes tens of seconds under the race detector, once.
func testCacheDir() string {
	return filepath.Join(os.TempDir(), "retryhost-wasmtest-"+runtime.Version())
}
