package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// TestRegistry_HotSwapUnderLoad replaces a transform back and forth while
// streams run: every stream completes, no request fails, and each stream's
// output is consistent with exactly one version (upper-cased throughout, or
// untouched throughout).
func TestRegistry_HotSwapUnderLoad(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t)
	reg := NewRegistry(rt)
	defer func() { require.NoError(t, reg.Close(ctx)) }()
	v1, v2 := fixture(t, "upper"), fixture(t, "refusal")
	named, err := reg.Load(ctx, "xf", v1)
	require.NoError(t, err)

	var (
		done, nUpper, nPlain atomic.Int64
		stop                 = make(chan struct{})
		wg                   sync.WaitGroup
		failures             = make(chan string, 100)
	)
	for w := range 20 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				deltas := []string{"hello ", "from ", "worker ", "and ", "stream"}
				in := textStream(deltas...)
				r := run(ctx, named, uint64(w*1_000_000+i), in)
				switch got := render(r.out); {
				case r.fail != nil || r.err != nil:
					failures <- "stream failed: " + errText(r.fail) + errText(r.err)
				case got == render(textStream("HELLO ", "FROM ", "WORKER ", "AND ", "STREAM")):
					nUpper.Add(1)
				case got == render(in):
					nPlain.Add(1)
				default:
					failures <- "stream mixes versions or lost parts"
				}
				done.Add(1)
			}
		})
	}
	waitDone := func(n int64) {
		target := done.Load() + n
		waitFor(t, func() bool { return done.Load() >= target || len(failures) > 0 }, "streams to complete")
	}
	waitDone(20)
	for i := range 6 {
		next := v2
		if i%2 == 1 {
			next = v1
		}
		_, err := reg.Load(ctx, "xf", next)
		require.NoError(t, err)
		// A failed load in between leaves the serving version in place.
		before := named.Version()
		_, err = reg.Load(ctx, "xf", []byte("not wasm"))
		require.ErrorIs(t, err, ErrInvalidModule)
		require.Equal(t, before, named.Version())
		waitDone(20)
	}
	close(stop)
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	require.Positive(t, nUpper.Load(), "streams ran on v1")
	require.Positive(t, nPlain.Load(), "streams ran on v2")
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestRegistry_StreamFinishesOnItsVersion: a stream opened before a swap
// keeps its version; the old version is released when that stream closes.
func TestRegistry_StreamFinishesOnItsVersion(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t)
	reg := NewRegistry(rt)
	defer func() { require.NoError(t, reg.Close(ctx)) }()
	named, err := reg.Load(ctx, "xf", fixture(t, "upper"))
	require.NoError(t, err)
	old := named.cur.Load()
	st, err := named.Open(ctx, abi.StreamInfo{ID: 1})
	require.NoError(t, err)

	_, err = reg.Load(ctx, "xf", fixture(t, "refusal"))
	require.NoError(t, err)
	require.NotEqual(t, old.SHA256(), named.Version())

	v, err := st.Part(ctx, &abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: "hi"})
	require.NoError(t, err)
	require.Equal(t, abi.PartReplace, v.Action, "the old version (upper) still serves this stream")
	require.False(t, old.released.Load())
	st.Close()
	require.True(t, old.released.Load(), "the old version is released with its last stream")

	st, err = named.Open(ctx, abi.StreamInfo{ID: 2})
	require.NoError(t, err)
	v, err = st.Part(ctx, &abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: "hi"})
	require.NoError(t, err)
	require.Equal(t, abi.PartDetach, v.Action, "new streams run on the new version (refusal)")
	st.Close()
}

// writeAtomic puts b in dir/name the way a deployer should, by a rename,
// so that a watcher never reads it half-written.
func writeAtomic(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	tmp := filepath.Join(dir, name+".tmp")
	require.NoError(t, os.WriteFile(tmp, b, 0o644))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, name)))
}

func TestRegistry_ScanAndWatch(t *testing.T) {
	ctx := context.Background()
	var logs logBuffer
	rt := newRuntime(t, WithLogger(logs.logger()))
	reg := NewRegistry(rt)
	defer func() { require.NoError(t, reg.Close(ctx)) }()
	dir := t.TempDir()
	write := func(name string, b []byte) { t.Helper(); writeAtomic(t, dir, name, b) }
	write("cond.wasm", fixture(t, "condition"))
	write("cond.config", []byte("anthropic/claude"))
	write("xf.wasm", fixture(t, "upper"))

	require.NoError(t, reg.Scan(ctx, dir))
	cond, ok := reg.Get("cond")
	require.True(t, ok)
	d, err := cond.Decide(ctx, &abi.Attempt{Status: 503})
	require.NoError(t, err)
	require.Equal(t, "anthropic/claude", d.Model, "the .config file is the plugin's config")
	xf, ok := reg.Get("xf")
	require.True(t, ok)
	require.Equal(t, sha(fixture(t, "upper")), xf.Version())

	t.Run("a broken file is reported and the old version keeps serving", func(t *testing.T) {
		write("xf.wasm", []byte("broken"))
		err := reg.Scan(ctx, dir)
		require.ErrorIs(t, err, ErrInvalidModule)
		require.Equal(t, sha(fixture(t, "upper")), xf.Version())
		require.NoError(t, reg.Scan(ctx, dir), "an unchanged broken file is not retried")
		require.Contains(t, logs.String(), "plugin reload failed")
	})

	t.Run("watch picks up a changed file", func(t *testing.T) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		watchErr := make(chan error, 1)
		go func() { watchErr <- reg.Watch(wctx, dir, time.Millisecond) }()
		write("xf.wasm", fixture(t, "refusal"))
		waitFor(t, func() bool { return xf.Version() == sha(fixture(t, "refusal")) }, "the watcher to swap xf")
		cancel()
		require.ErrorIs(t, <-watchErr, context.Canceled)
		require.True(t, strings.Contains(logs.String(), "plugin swapped"))
	})
}

// TestRegistry_ScanConfigFileCapped: Scan reads a <name>.config under
// maxConfigFile (it was read whole: a runaway file, or a path to a device,
// was read until memory ran out). Past the cap the plugin's load fails with
// ErrLimit, the error naming the file and the cap; it is logged (Watch
// drops Scan's errors) and not retried until the file changes; a version
// already serving keeps serving.
func TestRegistry_ScanConfigFileCapped(t *testing.T) {
	ctx := context.Background()
	var logs logBuffer
	rt := newRuntime(t, WithLogger(logs.logger()))
	reg := NewRegistry(rt)
	defer func() { require.NoError(t, reg.Close(ctx)) }()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cond.config")
	writeAtomic(t, dir, "cond.wasm", fixture(t, "condition"))
	require.NoError(t, os.WriteFile(cfg, nil, 0o644))
	require.NoError(t, os.Truncate(cfg, maxConfigFile+1)) // sparse: no disk used

	requireCapped := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, ErrLimit)
		var le *LimitError
		require.ErrorAs(t, err, &le)
		require.Equal(t, maxConfigFile, le.Max)
		require.Contains(t, err.Error(), cfg, "the error names the file")
		require.Contains(t, err.Error(), "1048576", "the error names the cap")
	}
	requireCapped(reg.Scan(ctx, dir))
	_, ok := reg.Get("cond")
	require.False(t, ok, "nothing loaded with a config over the cap")

	writeAtomic(t, dir, "cond.config", []byte("anthropic/claude"))
	require.NoError(t, reg.Scan(ctx, dir))
	cond, ok := reg.Get("cond")
	require.True(t, ok)
	version := cond.Version()

	require.NoError(t, os.Truncate(cfg, maxConfigFile+1))
	requireCapped(reg.Scan(ctx, dir))
	require.Contains(t, logs.String(), "plugin reload failed")
	require.Contains(t, logs.String(), cfg)
	require.NoError(t, reg.Scan(ctx, dir), "an unchanged file over the cap is not read again")
	d, err := cond.Decide(ctx, &abi.Attempt{Status: 503})
	require.NoError(t, err)
	require.Equal(t, "anthropic/claude", d.Model, "the version serving keeps its config")
	require.Equal(t, version, cond.Version())
}

// TestRegistry_ScanLogsAFailedLoadOnce: a plugin whose load fails in Scan
// (a module over ModuleBytes, a .config over its cap, a module that does
// not compile), new or replacing a version that serves, is logged once,
// naming the file and the reason, and Scan returns the error; Watch, which
// drops Scan's errors, neither retries nor logs it again while its files
// stay unchanged, and a version serving keeps serving. A module over the
// limit was returned by Scan but never logged, so Watch said nothing; a
// failed plugin never loaded before was retried and logged on every poll.
func TestRegistry_ScanLogsAFailedLoadOnce(t *testing.T) {
	ctx := context.Background()
	sparse := func(t *testing.T, path string, size int64) {
		t.Helper()
		require.NoError(t, os.WriteFile(path, nil, 0o644))
		require.NoError(t, os.Truncate(path, size)) // sparse: no disk used
	}
	for _, tc := range []struct {
		name    string
		serving bool // a version is loaded first
		file    string
		breakIt func(t *testing.T, dir string)
		is      error
		reason  string
	}{
		{"module over ModuleBytes, new", false, "cond.wasm", func(t *testing.T, dir string) {
			sparse(t, filepath.Join(dir, "cond.wasm"), 16<<20+1)
		}, ErrLimit, "ModuleBytes"},
		{"module over ModuleBytes, a version serving", true, "cond.wasm", func(t *testing.T, dir string) {
			sparse(t, filepath.Join(dir, "cond.wasm"), 16<<20+1)
		}, ErrLimit, "ModuleBytes"},
		{"config over its cap, new", false, "cond.config", func(t *testing.T, dir string) {
			writeAtomic(t, dir, "cond.wasm", fixture(t, "condition"))
			sparse(t, filepath.Join(dir, "cond.config"), maxConfigFile+1)
		}, ErrLimit, "config file bytes"},
		{"module that does not compile, new", false, "cond.wasm", func(t *testing.T, dir string) {
			writeAtomic(t, dir, "cond.wasm", []byte("not wasm"))
		}, ErrInvalidModule, "not a valid wasm module"},
		{"module that does not compile, a version serving", true, "cond.wasm", func(t *testing.T, dir string) {
			writeAtomic(t, dir, "cond.wasm", []byte("not wasm"))
		}, ErrInvalidModule, "not a valid wasm module"},
		{"module that cannot be read (a directory), a version serving", true, "cond.wasm", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "cond.wasm")))
			require.NoError(t, os.Mkdir(filepath.Join(dir, "cond.wasm"), 0o755))
		}, ErrInvalidModule, "is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			reg := NewRegistry(newRuntime(t, WithLogger(logs.logger())))
			defer func() { require.NoError(t, reg.Close(ctx)) }()
			dir := t.TempDir()
			path := filepath.Join(dir, tc.file)
			failures := func() (n int) {
				for line := range strings.SplitSeq(logs.String(), "\n") {
					if strings.Contains(line, "failed;") && strings.Contains(line, "file="+path+" ") {
						require.Contains(t, line, tc.reason, "the log says why")
						if tc.serving {
							require.Contains(t, line, `msg="plugin reload failed; the previous version keeps serving"`)
						} else {
							require.Contains(t, line, `msg="plugin load failed; the plugin is not loaded"`, "no version to keep serving")
						}
						n++
					}
				}
				return n
			}
			version := ""
			if tc.serving {
				writeAtomic(t, dir, "cond.wasm", fixture(t, "upper"))
				require.NoError(t, reg.Scan(ctx, dir))
				cond, ok := reg.Get("cond")
				require.True(t, ok)
				version = cond.Version()
			}

			tc.breakIt(t, dir)
			err := reg.Scan(ctx, dir)
			require.ErrorIs(t, err, tc.is)
			require.Equal(t, 1, failures(), "logged, naming %s:\n%s", path, logs.String())

			// Watch polls on; a plugin added meanwhile is loaded, so it
			// has passed over the unchanged failed one since.
			wctx, cancel := context.WithCancel(ctx)
			watchErr := make(chan error, 1)
			go func() { watchErr <- reg.Watch(wctx, dir, time.Millisecond) }()
			writeAtomic(t, dir, "other.wasm", fixture(t, "upper"))
			waitFor(t, func() bool { _, ok := reg.Get("other"); return ok }, "the watcher to load other")
			cancel()
			require.ErrorIs(t, <-watchErr, context.Canceled)
			require.Equal(t, 1, failures(), "not logged again while unchanged:\n%s", logs.String())

			cond, ok := reg.Get("cond")
			require.Equal(t, tc.serving, ok)
			if tc.serving {
				require.Equal(t, version, cond.Version(), "the version serving keeps serving")
			}

			// Changed, it is tried again.
			require.NoError(t, os.RemoveAll(filepath.Join(dir, "cond.config")))
			require.NoError(t, os.RemoveAll(filepath.Join(dir, "cond.wasm")))
			writeAtomic(t, dir, "cond.wasm", fixture(t, "refusal"))
			require.NoError(t, reg.Scan(ctx, dir))
			cond, ok = reg.Get("cond")
			require.True(t, ok)
			require.Equal(t, sha(fixture(t, "refusal")), cond.Version())
		})
	}
}

// TestRegistry_ScanForgetsAFailureWhoseModuleIsGone: Scan remembers a
// failed load (to log it once), and forgets it when its module leaves the
// directory, so a directory whose files come and go under new names does
// not grow the registry; another directory's failures stay remembered.
func TestRegistry_ScanForgetsAFailureWhoseModuleIsGone(t *testing.T) {
	ctx := context.Background()
	reg := NewRegistry(newRuntime(t))
	defer func() { require.NoError(t, reg.Close(ctx)) }()
	a, b := t.TempDir(), t.TempDir()
	for i := range 3 {
		writeAtomic(t, a, fmt.Sprintf("bad%d.wasm", i), []byte("not wasm"))
	}
	writeAtomic(t, b, "other.wasm", []byte("not wasm"))
	require.Error(t, reg.Scan(ctx, a))
	require.Error(t, reg.Scan(ctx, b))
	failed := func() int { reg.mu.Lock(); defer reg.mu.Unlock(); return len(reg.failed) }
	require.Equal(t, 4, failed())

	require.NoError(t, os.Remove(filepath.Join(a, "bad0.wasm")))
	require.NoError(t, os.Remove(filepath.Join(a, "bad1.wasm")))
	require.NoError(t, reg.Scan(ctx, a), "bad2 is unchanged since it failed: not tried again")
	require.Equal(t, 2, failed(), "bad2 and b's other stay")
	_, ok := reg.failed["bad2"]
	require.True(t, ok)
	_, ok = reg.failed["other"]
	require.True(t, ok, "a scan of a does not forget b's failures")
}
