package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// syncBuf is a bytes.Buffer safe for the flusher's goroutine, counting
// the writes it gets.
type syncBuf struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *syncBuf) get() (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String(), s.writes
}

// Serve's log lines are held and written together; a warning, a status
// line, a full batch and the stop each write at once, in order.
func TestLogBatch(t *testing.T) {
	t.Run("lines wait for the batch, then go in one write", func(t *testing.T) {
		var out syncBuf
		b := newLogBatch(&out, time.Hour)
		defer b.Close()
		log := slog.New(flushOnWarn{slog.NewJSONHandler(b, nil), b})
		log.Info("request", "n", 1)
		log.Info("request", "n", 2)
		got, writes := out.get()
		require.Empty(t, got, "held until the batch")
		require.Zero(t, writes)
		b.Flush()
		got, writes = out.get()
		require.Equal(t, 2, strings.Count(got, `"msg":"request"`))
		require.Equal(t, 1, writes, "one write for the batch")
	})
	t.Run("a warning goes out at once, after what it follows", func(t *testing.T) {
		var out syncBuf
		b := newLogBatch(&out, time.Hour)
		defer b.Close()
		log := slog.New(flushOnWarn{slog.NewJSONHandler(b, nil), b}).With("k", "v")
		log.Info("first")
		log.Warn("second")
		got, _ := out.get()
		require.Less(t, strings.Index(got, "first"), strings.Index(got, "second"))
		require.Contains(t, got, `"k":"v"`)
	})
	t.Run("a status line goes out at once, in order", func(t *testing.T) {
		var out syncBuf
		b := newLogBatch(&out, time.Hour)
		defer b.Close()
		_, _ = b.Write([]byte("held\n"))
		_, _ = now{b}.Write([]byte("status\n"))
		got, _ := out.get()
		require.Equal(t, "held\nstatus\n", got)
	})
	t.Run("a full batch is written before it would overflow", func(t *testing.T) {
		var out syncBuf
		b := newLogBatch(&out, time.Hour)
		defer b.Close()
		line := strings.Repeat("x", 1000) + "\n"
		for range logBatchMax / len(line) {
			_, _ = b.Write([]byte(line))
		}
		got, _ := out.get()
		require.Empty(t, got)
		_, _ = b.Write([]byte(line))
		got, _ = out.get()
		require.Equal(t, logBatchMax/len(line)*len(line), len(got), "the held batch, without the line that did not fit")
		big := strings.Repeat("y", logBatchMax+1)
		_, _ = b.Write([]byte(big))
		got, _ = out.get()
		require.True(t, strings.HasSuffix(got, line+big), "a line over a batch goes out at once, after what was held")
	})
	t.Run("the flusher writes by itself", func(t *testing.T) {
		var out syncBuf
		b := newLogBatch(&out, time.Millisecond)
		defer b.Close()
		_, _ = b.Write([]byte("line\n"))
		require.Eventually(t, func() bool { got, _ := out.get(); return got == "line\n" }, 10*time.Second, time.Millisecond)
	})
	t.Run("close writes what is held; later lines go at once", func(t *testing.T) {
		var out syncBuf
		b := newLogBatch(&out, time.Hour)
		_, _ = b.Write([]byte("held\n"))
		b.Close()
		b.Close()
		_, _ = b.Write([]byte("late\n"))
		got, _ := out.get()
		require.Equal(t, "held\nlate\n", got)
	})
}
