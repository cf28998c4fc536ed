// Package filecap reads a file the program was pointed at (a policy, a
// scenario, a plugin module) under a size cap, so that a path to a device,
// a pipe that never ends or a runaway file is refused instead of being read
// until memory runs out.
package filecap

import (
	"fmt"
	"io"
	"os"
)

// TooLargeError is a file over the cap. Size is a regular file's size, or
// -1 for what has none (a pipe, a device), read only to Max+1 bytes.
type TooLargeError struct {
	Path string
	Size int64
	Max  int64
}

func (e *TooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("%s: more than %d bytes", e.Path, e.Max)
	}
	return fmt.Sprintf("%s: %d bytes, more than %d", e.Path, e.Size, e.Max)
}

// Read returns the contents of path, at most max bytes. A regular file
// larger than max is refused from its size, unread; anything else once
// max+1 bytes have come. Either way the error is a *TooLargeError; any
// other is the open's or the read's (a directory's: "is a directory").
func Read(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > max {
		return nil, &TooLargeError{Path: path, Size: st.Size(), Max: max}
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, &TooLargeError{Path: path, Size: -1, Max: max}
	}
	return b, nil
}
