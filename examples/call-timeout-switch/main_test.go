package main

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// captureStdout runs f and returns what it printed.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	old := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = old }()
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		done <- b
	}()
	f()
	require.NoError(t, w.Close())
	out := <-done
	require.NoError(t, r.Close())
	return string(bytes.TrimSpace(out))
}

func TestMain_TimeoutSwitchesButCallerCancelStops(t *testing.T) {
	got := captureStdout(t, main)
	require.Equal(t, `1. the slow model times out, the fast one answers:
attempt 1 → big/model-slow (timeout 50ms)
  the driver's attempt deadline of 50ms fired
  attempt 1 on big/model-slow failed: timeout, by the driver's attempt deadline
attempt 2 → small/model-fast (timeout 5s)
answer: 42

2. the caller gives up first: no fail-over
attempt 1 → big/model-slow (timeout 50ms)
  attempt 1 on big/model-slow failed: timeout, by the caller's deadline or cancellation
error: context deadline exceeded (caller's deadline: true)`, got)
}
