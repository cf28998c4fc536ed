package host

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/internal/testkit"
)

// fixture returns the bytes of testdata/<name>.wasm (built by make wasm).
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".wasm"))
	require.NoError(t, err)
	return b
}

// engines runs f once per wazero engine: the compiler and the interpreter
// (wazero has an open compiler miscompile report, so conformance must hold
// on both).
func engines(t *testing.T, f func(t *testing.T, opts ...Option)) {
	t.Run("compiler", func(t *testing.T) { f(t) })
	t.Run("interpreter", func(t *testing.T) { f(t, WithInterpreter()) })
}

func newRuntime(t testing.TB, opts ...Option) *Runtime {
	t.Helper()
	// A generous per-call timeout: a test that is not about timeouts must
	// not fail because the race detector made a call slow.
	rt, err := New(context.Background(), append([]Option{WithCallTimeout(5 * time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close(context.Background())) })
	return rt
}

// logBuffer is a concurrency-safe slog sink for assertions on logs: String
// returns the records as text lines, messages their messages.
type logBuffer struct {
	testkit.LogBuffer
	mu   sync.Mutex // orders msgs and the text lines alike
	msgs []string
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(&recorder{l: l}) }

// recorder is a slog.Handler that keeps each record's message, one per
// line, with its attributes' keys and values.
type recorder struct {
	l     *logBuffer
	attrs []slog.Attr
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	var line bytes.Buffer
	fmt.Fprintf(&line, "level=%s msg=%q", rec.Level, rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&line, " %s=%v", a.Key, a.Value)
		return true
	})
	line.WriteByte('\n')
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	r.l.msgs = append(r.l.msgs, rec.Message)
	_, err := r.l.Write(line.Bytes())
	return err
}

func (r *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &recorder{l: r.l, attrs: append(append([]slog.Attr(nil), r.attrs...), as...)}
}

func (r *recorder) WithGroup(string) slog.Handler { return r }

// messages returns the messages logged so far.
func (l *logBuffer) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// textStream is a small stream: start, text-start, the deltas, text-end, finish.
func textStream(deltas ...string) []abi.Part {
	ps := []abi.Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindTextStart, ID: "t0"}}
	for _, d := range deltas {
		ps = append(ps, abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: d})
	}
	return append(ps, abi.Part{Kind: abi.KindTextEnd, ID: "t0"},
		abi.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop}}})
}

// result is what a stream produced through the harness.
type result struct {
	out  []abi.Part
	err  error // a verdict's error (the attempt fails)
	fail error // the transform itself failed (its policy applies)
}

// run drives one stream through a transform the way the driver does, with
// a host-side hold queue: PASS releases the queue then the part, HOLD
// queues, DROP discards, REPLACE discards the queue and emits the
// replacement, ERROR discards and ends, DETACH releases and passes the rest.
// On a transform failure the fail policy applies: fail-open releases the
// queue and passes the rest; fail-closed ends the stream.
func run(ctx context.Context, tr abi.Transformer, id uint64, in []abi.Part) result {
	var r result
	st, err := tr.Open(ctx, abi.StreamInfo{ID: id, Model: "m", Attempt: 1})
	if err != nil {
		r.fail = err
		if tr.Policy().Fail == abi.FailOpen {
			r.out = append(r.out, in...)
		}
		return r
	}
	defer st.Close()
	var held []abi.Part
	apply := func(v abi.Verdict, p *abi.Part) (done bool) {
		switch v.Action {
		case abi.PartPass, abi.PartDetach:
			r.out = append(r.out, held...)
			held = held[:0]
			if p != nil {
				r.out = append(r.out, *p)
			}
			return v.Action == abi.PartDetach
		case abi.PartHold:
			if p != nil {
				held = append(held, *p)
			} else {
				r.out = append(r.out, held...)
			}
		case abi.PartDrop:
		case abi.PartReplace:
			held = held[:0]
			r.out = append(r.out, v.Replace...)
		case abi.PartError:
			r.err = v.Err
			return true
		}
		return false
	}
	for i := range in {
		v, err := st.Part(ctx, &in[i])
		if err != nil {
			r.fail = err
			if tr.Policy().Fail == abi.FailOpen {
				r.out = append(append(r.out, held...), in[i:]...)
			}
			return r
		}
		if apply(v, &in[i]) {
			if v.Action == abi.PartDetach {
				r.out = append(r.out, in[i+1:]...)
			}
			return r
		}
	}
	v, err := st.End(ctx)
	if err != nil {
		r.fail = err
		if tr.Policy().Fail == abi.FailOpen {
			r.out = append(r.out, held...)
		}
		return r
	}
	apply(v, nil)
	return r
}

// render serialises parts byte-exactly for comparisons.
func render(ps []abi.Part) string {
	var b bytes.Buffer
	for i := range ps {
		b.Write(abi.EncodePart(&ps[i]))
	}
	return b.String()
}

// waitFor polls cond for up to 10 s ("did not hang" margin only).
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func streamText(i int) []string {
	return []string{fmt.Sprintf("stream %d says ", i), "hello ", "world"}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
