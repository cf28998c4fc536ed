// Package exampletest holds what the examples' tests share.
package exampletest

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// Stdout runs f (usually an example's main) and returns what it printed to
// os.Stdout, trimmed. It swaps os.Stdout for the call, so tests using it
// must not run in parallel.
func Stdout(t *testing.T, f func()) string {
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
