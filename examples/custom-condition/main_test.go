package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/host"
)

func TestRun_TheWasmConditionSwitchesOnlyOnAContextOverflow(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out, host.WithCacheDir(testCacheDir())))
	got := regexp.MustCompile(`sha256 [0-9a-f]{12}…`).ReplaceAllString(out.String(), "sha256 X…")
	require.Equal(t, `load without config: host: load plugin "context-window": plugin rejected its config: config: name the long-context model to switch to, such as anthropic/claude-sonnet-4
loaded context-window: condition=true, sha256 X…

request on openai/gpt-4o-mini
  attempt 1 on openai/gpt-4o-mini failed: HTTP 400 (context-length)
  answer from anthropic/claude-sonnet-4: "Summary: the whole contract, in brief."

request on openai/gpt-4o
  attempt 1 on openai/gpt-4o failed: HTTP 401 (auth)
  the plugin had no opinion; the request fails: openai: HTTP 401: Incorrect API key provided
`, got)
}

// testCacheDir is the compilation cache the plugins' tests share across
// test binaries and runs (see plugins/internal/plugintest): compiling a Go
// guest takes tens of seconds under the race detector, once.
func testCacheDir() string {
	return filepath.Join(os.TempDir(), "retryhost-wasmtest-"+runtime.Version())
}
