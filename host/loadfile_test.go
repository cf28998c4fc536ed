package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLoadFile_ReadsAtMostModuleBytes: Runtime.LoadFile and
// Registry.LoadFile read a module file up to the ModuleBytes limit: a
// larger regular file is refused from its size, a pipe or device that
// goes on past the limit (never ending, as /dev/zero) as soon as it has,
// with ErrLimit and a *LimitError on ModuleBytes, not read until it ends.
func TestLoadFile_ReadsAtMostModuleBytes(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("FIFOs and /dev/zero as on Linux")
	}
	const limit = 64 << 10
	dir := t.TempDir()
	big := filepath.Join(dir, "big.wasm")
	require.NoError(t, os.WriteFile(big, make([]byte, limit+1), 0o600))
	rt := newRuntime(t, WithModuleLimits(ModuleLimits{ModuleBytes: limit}))
	reg := NewRegistry(rt)
	loads := map[string]func(path string) error{
		"Runtime": func(path string) error { _, err := rt.LoadFile(context.Background(), "p", path); return err },
		"Registry": func(path string) error {
			_, err := reg.LoadFile(context.Background(), "p", path)
			return err
		},
	}
	for name, load := range loads {
		t.Run(name, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				path func(t *testing.T) (string, func() bool)
				got  int
			}{
				{"regular file", func(*testing.T) (string, func() bool) { return big, nil }, limit + 1},
				{"/dev/zero", func(*testing.T) (string, func() bool) { return "/dev/zero", nil }, 0},
				{"pipe held open", fifo, 0},
			} {
				t.Run(tc.name, func(t *testing.T) {
					path, ended := tc.path(t)
					err := load(path)
					require.ErrorIs(t, err, ErrLimit)
					var le *LimitError
					require.True(t, errors.As(err, &le), "%v", err)
					require.Equal(t, "ModuleBytes", le.Limit)
					require.Equal(t, limit, le.Max)
					require.Equal(t, tc.got, le.Got)
					require.Contains(t, err.Error(), "ModuleBytes")
					if ended != nil {
						require.False(t, ended(), "the load waited for the pipe's end")
					}
				})
			}
		})
	}
}

// fifo returns a named pipe a writer fills past 64 KiB and holds open
// until the test ends (or a minute passes), and whether the writer had
// closed it by the time it is asked.
func fifo(t *testing.T) (string, func() bool) {
	path := filepath.Join(t.TempDir(), "pipe.wasm")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	var closed atomic.Bool
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		_, _ = f.Write(make([]byte, 80<<10)) // blocks until read past the limit
		select {
		case <-done:
		case <-time.After(time.Minute):
		}
		closed.Store(true)
		_ = f.Close()
	}()
	t.Cleanup(func() {
		close(done)
		// The reader may not have opened it (a failed test): open it so
		// the writer's open returns.
		if f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close() // and the writer's write ends (EPIPE)
		}
		<-stopped
	})
	return path, closed.Load
}
