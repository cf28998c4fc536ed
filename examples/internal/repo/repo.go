// Package repo finds files of this repository for the examples, so they run
// both with `go run ./examples/NAME` from the root and as tests from their
// own folder.
package repo

import (
	"errors"
	"os"
	"path/filepath"
)

// Path returns rel (slash-separated, from the repository root) as a path
// that exists, searching the working directory and its parents.
func Path(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if _, err := os.Stat(p); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return p, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repo: " + rel + " not found: run from inside the retryhost repository")
		}
		dir = parent
	}
}
