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

func TestMain_PrintsEachAttemptAndTheAnswer(t *testing.T) {
	got := captureStdout(t, main)
	require.Equal(t, `attempt 1 → openai/gpt-4o
  attempt 1 failed: rate-limit (HTTP 429)
  waited 10ms, next: openai/gpt-4o
attempt 2 → openai/gpt-4o
  attempt 2 failed: overloaded (HTTP 503)
  waited 0s, next: anthropic/claude-sonnet-4
attempt 3 → anthropic/claude-sonnet-4
answer from anthropic/claude-sonnet-4: "Paris is the capital of France."`, got)
}
