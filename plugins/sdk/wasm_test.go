package sdk_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
	"github.com/retryhost/retryhost/plugins/internal/wasmtest"
)

// The SDK in Wasm, through internal/testguest (a transform whose streams
// hold every text delta without reading it), built here: what a part
// costs in it is the SDK's own cost.

var tempDir string

func TestMain(m *testing.M) {
	var err error
	if tempDir, err = os.MkdirTemp("", "sdk-test"); err != nil {
		panic(err)
	}
	code := m.Run()
	_ = os.RemoveAll(tempDir)
	if err := goleak.Find(); code == 0 && err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

var (
	guestOnce sync.Once
	guestPath string
	guestErr  error
)

// testGuest builds internal/testguest to Wasm once per test binary.
func testGuest(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("builds a Go guest")
	}
	guestOnce.Do(func() {
		guestPath = filepath.Join(tempDir, "testguest.wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", guestPath, "./internal/testguest")
		cmd.Env = append(cmd.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			guestErr = fmt.Errorf("building the test guest: %w\n%s", err, out)
		}
	})
	require.NoError(tb, guestErr)
	return guestPath
}

func loadGuest(tb testing.TB, config string) *wasmtest.Instance {
	tb.Helper()
	in, err := plugintest.LoadWasm(tb, "testguest", testGuest(tb), []byte(config), false)
	require.NoError(tb, err)
	return in
}

// TestGuestHeapBounded: the guest's GC runs only when the guest yields;
// the SDK yields every YieldEvery calls, often enough that a plugin
// allocating on every part keeps its memory bounded (here 20,000 parts ×
// 4 KiB of garbage = 80 MiB allocated, more than the 64 MiB limit).
func TestGuestHeapBounded(t *testing.T) {
	ctx := context.Background()
	in := loadGuest(t, "garbage=4096")
	parts := plugintest.TextStream(strings.Repeat("abc", 30), 3)
	parts = parts[3 : len(parts)-2] // the text deltas: all held
	run := func(streams int) {
		for range streams {
			s, err := in.Open(ctx, abi.StreamInfo{ID: 1, Model: "a/b"})
			require.NoError(t, err)
			for i := range parts {
				v, err := s.Part(ctx, &parts[i])
				require.NoError(t, err)
				require.NotEqual(t, abi.PartError, v.Action)
			}
			s.Close()
		}
	}
	run(100)
	warm := in.MemoryBytes()
	run(20000 / len(parts))
	t.Logf("memory %d -> %d bytes", warm, in.MemoryBytes())
	require.LessOrEqual(t, in.MemoryBytes(), warm+16<<20, "memory grew from %d to %d bytes", warm, in.MemoryBytes())
}

// TestGuestHintsAndOpenPart: the SDK declares auto_close and the
// transform's static verdicts, answers static kinds itself, and
// implements retryhost_open_part.
func TestGuestHintsAndOpenPart(t *testing.T) {
	ctx := context.Background()
	in := loadGuest(t, "")
	_, h := in.Hints()
	require.True(t, h.AutoClose)
	require.Equal(t, map[abi.PartKind]abi.PartAction{abi.KindStreamStart: abi.PartHold, abi.KindResponseMeta: abi.PartHold, abi.KindTextStart: abi.PartHold}, h.Static)

	parts := plugintest.TextStream("hello", 2)
	s, v, err := in.OpenPart(ctx, abi.StreamInfo{ID: 1, Model: "a/b"}, &parts[0])
	require.NoError(t, err)
	require.Equal(t, abi.PartHold, v.Action)
	i := 1
	for ; parts[i].Kind != abi.KindTextEnd; i++ {
		v, err := s.Part(ctx, &parts[i])
		require.NoError(t, err)
		require.Equal(t, abi.PartHold, v.Action, "part %d", i)
	}
	v, err = s.Part(ctx, &parts[i])
	require.NoError(t, err)
	require.Equal(t, abi.PartDetach, v.Action)
	_, err = s.Part(ctx, &parts[i+1])
	require.ErrorIs(t, err, wasmtest.ErrPluginFailed, "auto_close: the guest forgot the stream at its DETACH")
	s.Close() // harmless after the auto-close
}

// BenchmarkGuestPart: one text delta through the SDK, unguarded, the
// transform doing nothing (ns/op per part; open and close amortised over
// 32 parts).
func BenchmarkGuestPart(b *testing.B) {
	ctx := context.Background()
	in := loadGuest(b, "")
	p := abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: "abc"}
	b.ReportAllocs()
	for parts := 0; parts < b.N; {
		s, err := in.Open(ctx, abi.StreamInfo{ID: 1, Model: "a/b"})
		if err != nil {
			b.Fatal(err)
		}
		for range 32 {
			if _, err := s.Part(ctx, &p); err != nil {
				b.Fatal(err)
			}
			parts++
		}
		s.Close()
	}
}

// TestGuestNoRoom: a Go guest whose Open returns transform.ErrNoRoom
// refuses the stream with OpenNoRoom, which the host treats as lack of
// capacity, not as a failure of the plugin.
func TestGuestNoRoom(t *testing.T) {
	wasm, err := os.ReadFile(testGuest(t))
	require.NoError(t, err)
	plugintest.CheckNoRoom(t, plugintest.LoadNoRoom(t, "testguest", wasm, []byte("rooms=2")), 2)
}
