package testutil

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
				n, err := fmt.Fprintf(&l, "g%d line %d\n", g, i)
				require.NoError(t, err)
				require.Positive(t, n)
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
