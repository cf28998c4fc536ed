package main

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// Serve's log is written in batches: an access-log line a request, each a
// write syscall of its own, was a measurable share of a streamed request's
// CPU in the gateway's bench. As Envoy does with its access logs, lines are
// held and written together every logBatchEvery, or at once when
// logBatchMax bytes are held, when a record at warning level or above is
// logged, when serve prints a status line and when it stops.
const (
	logBatchEvery = 100 * time.Millisecond
	logBatchMax   = 32 << 10
)

// logBatch is an io.Writer that holds what is written for a batched write
// to w (see above). Safe for concurrent use.
type logBatch struct {
	w      io.Writer
	mu     sync.Mutex // held while buf is written to w: writes stay in order
	buf    []byte
	closed bool // Close ran: writes go out at once (under mu)
	stop   chan struct{}
	done   chan struct{}
}

// newLogBatch starts the batch's flusher; Close stops it.
func newLogBatch(w io.Writer, every time.Duration) *logBatch {
	b := &logBatch{w: w, buf: make([]byte, 0, logBatchMax), stop: make(chan struct{}), done: make(chan struct{})}
	go b.run(every)
	return b
}

func (b *logBatch) run(every time.Duration) {
	defer close(b.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.Flush()
		}
	}
}

// Write holds p for the next batch; it writes the held lines first when p
// would not fit beside them, and p itself at once when it alone is larger
// than a batch. Errors writing w are not returned (a log cannot report
// them anywhere).
func (b *logBatch) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		_, _ = b.w.Write(p)
		return len(p), nil
	}
	if len(b.buf)+len(p) > logBatchMax {
		b.flushLocked()
		if len(p) > logBatchMax {
			_, _ = b.w.Write(p)
			return len(p), nil
		}
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// Flush writes what is held.
func (b *logBatch) Flush() {
	b.mu.Lock()
	b.flushLocked()
	b.mu.Unlock()
}

func (b *logBatch) flushLocked() {
	if len(b.buf) > 0 {
		_, _ = b.w.Write(b.buf)
		b.buf = b.buf[:0]
	}
}

// Close writes what is held and stops the flusher; later writes go out at
// once. Idempotent.
func (b *logBatch) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.flushLocked()
	b.closed = true
	close(b.stop)
	b.mu.Unlock()
	<-b.done
}

// now is a writer whose every write is flushed at once: serve's status
// lines ("listening on", "draining") are read as they come.
type now struct{ b *logBatch }

func (n now) Write(p []byte) (int, error) {
	n.b.mu.Lock()
	defer n.b.mu.Unlock()
	n.b.buf = append(n.b.buf, p...)
	n.b.flushLocked()
	return len(p), nil
}

// flushOnWarn flushes the batch after a record at warning level or above:
// what goes wrong is read at once, not up to a batch later.
type flushOnWarn struct {
	slog.Handler
	b *logBatch
}

func (h flushOnWarn) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		h.b.Flush()
	}
	return err
}

func (h flushOnWarn) WithAttrs(as []slog.Attr) slog.Handler {
	return flushOnWarn{h.Handler.WithAttrs(as), h.b}
}

func (h flushOnWarn) WithGroup(name string) slog.Handler {
	return flushOnWarn{h.Handler.WithGroup(name), h.b}
}
