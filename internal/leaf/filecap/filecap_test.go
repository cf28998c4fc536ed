package filecap

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// Read returns a file up to the cap whole, and refuses one past it: a
// regular file from its size, a device once the cap is passed.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, n int) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, make([]byte, n), 0o600))
		return p
	}
	at, over := write("at", 16), write("over", 17)
	tests := []struct {
		name    string
		path    string
		n       int
		tooBig  *TooLargeError
		otherEr bool
	}{
		{name: "at the cap", path: at, n: 16},
		{name: "over the cap", path: over, tooBig: &TooLargeError{Path: over, Size: 17, Max: 16}},
		{name: "missing", path: filepath.Join(dir, "none"), otherEr: true},
		{name: "a directory", path: dir, otherEr: true},
	}
	if runtime.GOOS == "linux" {
		tests = append(tests, struct {
			name    string
			path    string
			n       int
			tooBig  *TooLargeError
			otherEr bool
		}{name: "a device that never ends", path: "/dev/zero", tooBig: &TooLargeError{Path: "/dev/zero", Size: -1, Max: 16}})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Read(tc.path, 16)
			var te *TooLargeError
			switch {
			case tc.tooBig != nil:
				require.True(t, errors.As(err, &te), "%v", err)
				require.Equal(t, tc.tooBig, te)
				require.Nil(t, b)
			case tc.otherEr:
				require.Error(t, err)
				require.False(t, errors.As(err, &te))
			default:
				require.NoError(t, err)
				require.Len(t, b, tc.n)
			}
		})
	}
}
