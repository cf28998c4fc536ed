package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
)

// rotatingFile is serve's --request-log file: it appends, and once a
// write would take it past max bytes it is renamed PATH.1 (PATH.1 to
// PATH.2 … up to PATH.keep, the oldest dropped) and a new PATH started.
// A line is never split across two files. Safe for concurrent use.
type rotatingFile struct {
	path      string
	max       int64 // 0: never rotate
	keep      int
	mu        sync.Mutex
	f         *os.File
	size      int64
	rotateErr error // the last rotation's failure, reported once
}

func openRotating(path string, max int64, keep int) (*rotatingFile, error) {
	r := &rotatingFile{path: path, max: max, keep: keep}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rotatingFile) open() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return err
	}
	r.f, r.size = f, st.Size()
	return nil
}

func (r *rotatingFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.max > 0 && r.size > 0 && r.size+int64(len(p)) > r.max {
		if err := r.rotate(); err != nil && r.rotateErr == nil {
			r.rotateErr = err // keep writing to the file we have
		}
	}
	if r.f == nil {
		return 0, errors.New("request log: closed")
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

// rotate moves the files one number up and starts a new one (under mu).
func (r *rotatingFile) rotate() error {
	if err := r.f.Close(); err != nil {
		return err
	}
	r.f = nil
	for i := r.keep - 1; i >= 1; i-- {
		_ = os.Rename(r.path+"."+strconv.Itoa(i), r.path+"."+strconv.Itoa(i+1))
	}
	var err error
	if r.keep > 0 {
		err = os.Rename(r.path, r.path+".1")
	} else {
		err = os.Remove(r.path)
	}
	if oerr := r.open(); oerr != nil {
		return errors.Join(err, oerr)
	}
	return err
}

func (r *rotatingFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// requestLogSink opens serve's --request-log: "-" is standard output, any
// other value a file rotated at maxSize bytes keeping keep old ones. The
// sink writes in batches (logbatch.go); close flushes it.
func requestLogSink(path string, stdout io.Writer, maxSize int64, keep int) (io.Writer, func(), error) {
	if maxSize < 0 || keep < 0 {
		return nil, nil, fmt.Errorf("--request-log-max-size and --request-log-keep cannot be negative")
	}
	if path == "-" {
		b := newLogBatch(stdout, logBatchEvery)
		return b, b.Close, nil
	}
	f, err := openRotating(path, maxSize, keep)
	if err != nil {
		return nil, nil, fmt.Errorf("--request-log: %w", err)
	}
	b := newLogBatch(f, logBatchEvery)
	return b, func() { b.Close(); _ = f.Close() }, nil
}
