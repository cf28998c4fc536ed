// Package testkit holds small helpers shared by the module's tests; its
// subpackages are the larger test rigs (a Redis server per test, the
// conformance suite of a driver.State, generated hostile Wasm). Only tests
// import them. Package testkit itself imports only the standard library, so
// a core package's tests may use it without taking on a dependency the
// import rules forbid.
package testkit

import (
	"bytes"
	"sync"
)

// LogBuffer is an io.Writer that keeps everything written to it, for tests
// that hand it to a logger (or a child process's stderr) and read it back
// while other goroutines may still be writing. The zero value is ready to
// use. It is safe for concurrent use: each Write is kept whole, and String
// returns a snapshot.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
