//go:build unix

package policy_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/policy"
)

// TestPluginPathReadUnderModuleLimit: a plugin path is read only up to the
// runtime's ModuleBytes limit (+1, to tell it is over), so a path to a
// device or an endless pipe is rejected by the limit instead of being read
// until memory runs out. The pipe's writer sees the reader stop early.
func TestPluginPathReadUnderModuleLimit(t *testing.T) {
	ctx := context.Background()
	fifo := filepath.Join(t.TempDir(), "endless.wasm")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	const limit = 1 << 20
	written := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			written <- err
			return
		}
		defer f.Close()
		_, err = f.Write(make([]byte, 4*limit)) // more than the limit: the reader must stop first
		written <- err
	}()
	opts := bound()
	opts.HostOptions = []host.Option{host.WithModuleLimits(host.ModuleLimits{ModuleBytes: limit})}
	_, err := policy.Parse(ctx, []byte(`{`+models+`, "transforms": [{"plugin": {"path": "`+fifo+`"}}]}`), opts)
	require.ErrorContains(t, err, "ModuleBytes")
	require.ErrorIs(t, <-written, syscall.EPIPE, "the reader stopped at the limit")
}
