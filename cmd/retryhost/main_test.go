package main

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The compilation cache the plugins' tests share across test binaries
	// and runs (see plugins/internal/plugintest): compiling the demo's Go
	// plugins takes tens of seconds under the race detector, once. It also
	// keeps the tests out of the user's cache directory.
	dir := filepath.Join(os.TempDir(), "retryhost-wasmtest-"+runtime.Version())
	if err := os.Setenv(envCacheDir, dir); err != nil {
		panic(err)
	}
	// The demo starts servers, streams and a Wasm host; nothing of them may
	// outlive a run.
	// The CLI binary some tests build once (buildOnce) is shared by them
	// all, so it goes when the last test has run, not with the first.
	// The Gemini SDK links OpenCensus, whose package init starts a worker
	// that lives as long as the process.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"), goleak.Cleanup(func(code int) {
		if builtDir != "" {
			_ = os.RemoveAll(builtDir)
		}
		os.Exit(code)
	}))
}
