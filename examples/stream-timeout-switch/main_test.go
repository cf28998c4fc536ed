package main

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

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

func TestMain_FirstContentTimeoutSwitchesGapTruncates(t *testing.T) {
	got := captureStdout(t, main)
	require.Equal(t, `1. no content within 50ms: switch before the caller sees anything
  attempt 1 on big/model-stuck failed: timeout (first-content deadline)
  committed on small/model-fast (attempt 2)
  preamble from small/model-fast
  The answer is 42.

2. silence after content: the stream is truncated, nothing re-runs
  committed on big/model-halting (attempt 1)
  preamble from big/model-halting
  The answer is 
  stream ended: gap deadline (recoverable before commit only)`, got)
}
