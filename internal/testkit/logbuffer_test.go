package testkit

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLogBufferConcurrent: writes from many goroutines are all kept, each
// whole, and String may be called while they run (the race detector checks
// the locking).
func TestLogBufferConcurrent(t *testing.T) {
	var l LogBuffer
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				if n, err := fmt.Fprintf(&l, "g%d line %d\n", g, i); err != nil || n == 0 {
					t.Errorf("write: %d, %v", n, err) // not FailNow: this is not the test's goroutine
				}
				_ = l.String()
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(l.String(), "\n"), "\n")
	require.Len(t, lines, 800)
	for g := range 8 {
		for i := range 100 {
			require.Contains(t, lines, fmt.Sprintf("g%d line %d", g, i))
		}
	}
}
