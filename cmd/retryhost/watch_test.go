package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit"
)

// TestWatchFilesMissingFile: a watched file that goes missing (an editor's
// atomic save, a ConfigMap's symlink swap, a plugin removed) is logged
// once as an error, however many checks see it missing, and reports no
// change while it is missing (a reload then would fail, or lose the
// change made meanwhile); when it comes back, a change to it (even of the
// same size and modification time: a new file) or to another watched file
// made meanwhile is reported once.
func TestWatchFilesMissingFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		// while runs with the plugin file missing; back brings it back.
		while, back func(t *testing.T, pol, plug string)
		change      bool
	}{
		{"back with new content of the same size and mtime", nil, func(t *testing.T, _, plug string) {
			writeLike(t, plug, "PLUGIN-2", plug+".old")
		}, true},
		{"back unchanged, the policy edited meanwhile", func(t *testing.T, pol, _ string) {
			writeLike(t, pol, `{"models": [], "x": 2}`, "")
		}, func(t *testing.T, _, plug string) {
			require.NoError(t, os.Rename(plug+".old", plug))
		}, true},
		{"back unchanged", nil, func(t *testing.T, _, plug string) {
			require.NoError(t, os.Rename(plug+".old", plug))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pol, plug := filepath.Join(dir, "policy.json"), filepath.Join(dir, "p.wasm")
			require.NoError(t, os.WriteFile(pol, []byte(`{"models": [], "x": 1}`), 0o600))
			require.NoError(t, os.WriteFile(plug, []byte("PLUGIN-1"), 0o600))
			logs := &testkit.LogBuffer{}
			w := newFileWatch(func() []string { return []string{pol, plug} }, slog.New(slog.NewJSONHandler(logs, nil)), "policy")
			require.False(t, w.check(), "nothing changed")

			// Moved away (kept under another name, so a file written in
			// its place is a new inode, as after an editor's save).
			require.NoError(t, os.Rename(plug, plug+".old"))
			for range 3 {
				require.False(t, w.check(), "a missing file is no change to reload")
			}
			if tc.while != nil {
				tc.while(t, pol, plug)
				require.False(t, w.check(), "no reload while a watched file is missing")
			}
			require.Equal(t, 1, strings.Count(logs.String(), `"level":"ERROR"`), logs.String())
			require.Contains(t, logs.String(), `"msg":"watched file missing; the policy in use stays until it is back"`)
			require.Contains(t, logs.String(), `"file":"`+plug+`"`)

			tc.back(t, pol, plug)
			require.Equal(t, tc.change, w.check())
			require.False(t, w.check(), "a change is reported once")
			require.Contains(t, logs.String(), `"msg":"watched file back"`)
			require.Equal(t, 1, strings.Count(logs.String(), `"level":"ERROR"`), logs.String())
		})
	}
}

// writeLike writes content to file with the size and modification time
// the file had (so only its identity tells the change), keeping the old
// file under keep when keep is not "" (so the new one is a new inode).
func writeLike(t *testing.T, file, content, keep string) {
	t.Helper()
	src := file
	if keep != "" {
		src = keep
	}
	fi, err := os.Stat(src)
	require.NoError(t, err)
	require.Len(t, content, int(fi.Size()), "the test wants the same size")
	tmp := file + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
	require.NoError(t, os.Chtimes(tmp, fi.ModTime(), fi.ModTime()))
	require.NoError(t, os.Rename(tmp, file))
}
