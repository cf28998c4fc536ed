package adapter

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// want is what SSEBody must turn in into, by the SSE spec's definition.
func want(in string) string {
	in = strings.TrimPrefix(in, "\uFEFF")
	in = strings.ReplaceAll(in, "\r\n", "\n")
	return strings.ReplaceAll(in, "\r", "\n")
}

// chunker returns the body in reads of the given sizes, cycling.
type chunker struct {
	b     []byte
	sizes []byte
	i     int
}

func (c *chunker) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.sizes) > 0 {
		n = int(c.sizes[c.i%len(c.sizes)])%7 + 1
		c.i++
	}
	n = min(n, len(p), len(c.b))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

func TestSSEBody(t *testing.T) {
	for _, in := range []string{
		"",
		"a",
		"ab",
		"\uFEFF",
		"\uFEFFdata: x\n\n",
		"\xEF\xBB",       // a BOM cut short is data
		"\xEF\xBBdata\n", // not a BOM
		"data: x\r\n\r\n",
		"data: x\r\rdata: y\r\r",
		"data: x\n\r\r\n\n\r",
		"\uFEFF\r\n\r\n",
		"\uFEFF\uFEFFdata\n", // only the first mark goes
		"\r",
		"\r\n",
		"\n\r",
		"event: a\rdata: {\"t\":\"line1\\r\\nline2\"}\r\n\r\n",
	} {
		for name, r := range map[string]func(string) io.Reader{
			"whole":      func(s string) io.Reader { return strings.NewReader(s) },
			"one byte":   func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
			"half":       func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
			"data+EOF":   func(s string) io.Reader { return iotest.DataErrReader(strings.NewReader(s)) },
			"chunks 2,3": func(s string) io.Reader { return &chunker{b: []byte(s), sizes: []byte{1, 2}} },
		} {
			t.Run(name+"/"+strings.ReplaceAll(in, "\r", "CR"), func(t *testing.T) {
				got, err := io.ReadAll(SSEBody(io.NopCloser(r(in))))
				require.NoError(t, err)
				require.Equal(t, want(in), string(got))
			})
		}
	}
}

func TestSSEBodyErrors(t *testing.T) {
	boom := errors.New("boom")
	t.Run("error in the opening read", func(t *testing.T) {
		b := SSEBody(io.NopCloser(iotest.ErrReader(boom)))
		_, err := io.ReadAll(b)
		require.ErrorIs(t, err, boom)
		_, err = b.Read(make([]byte, 8))
		require.ErrorIs(t, err, boom, "sticky")
	})
	t.Run("error after data", func(t *testing.T) {
		b := SSEBody(io.NopCloser(io.MultiReader(strings.NewReader("\uFEFFdata: a\r\n"), iotest.ErrReader(boom))))
		got, err := io.ReadAll(b)
		require.ErrorIs(t, err, boom)
		require.Equal(t, "data: a\n", string(got))
	})
	t.Run("error with the opening bytes", func(t *testing.T) {
		b := SSEBody(io.NopCloser(io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(boom))))
		got, err := io.ReadAll(b)
		require.ErrorIs(t, err, boom)
		require.Equal(t, "ab", string(got))
	})
	t.Run("empty read", func(t *testing.T) {
		n, err := SSEBody(io.NopCloser(strings.NewReader("x"))).Read(nil)
		require.Zero(t, n)
		require.NoError(t, err)
	})
	t.Run("close", func(t *testing.T) {
		rc := &closeCounter{Reader: strings.NewReader("x")}
		require.NoError(t, SSEBody(rc).Close())
		require.Equal(t, 1, rc.n)
	})
}

type closeCounter struct {
	io.Reader
	n int
}

func (c *closeCounter) Close() error { c.n++; return nil }

// Reading allocates nothing, whatever the line endings.
func TestSSEBodyAllocs(t *testing.T) {
	body := []byte(strings.Repeat("data: {\"x\":1}\r\n\r\n", 64) + strings.Repeat("data: y\r\r", 64))
	r := bytes.NewReader(body)
	b := SSEBody(io.NopCloser(r)).(*sseBody)
	buf := make([]byte, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(body)
		b.started, b.cr, b.err = false, false, nil
		for {
			if _, err := b.Read(buf); err != nil {
				break
			}
		}
	})
	require.Zero(t, allocs)
}

func FuzzSSEBody(f *testing.F) {
	f.Add([]byte("\uFEFFdata: x\r\n\r\n"), []byte{1, 2, 3})
	f.Add([]byte("a\rb\r\nc\n\r"), []byte{0})
	f.Add([]byte("\xEF\xBB"), []byte{5})
	f.Fuzz(func(t *testing.T, in, sizes []byte) {
		got, err := io.ReadAll(SSEBody(io.NopCloser(&chunker{b: bytes.Clone(in), sizes: sizes})))
		if err != nil {
			t.Fatal(err)
		}
		if w := want(string(in)); string(got) != w {
			t.Fatalf("SSEBody(%q) = %q, want %q", in, got, w)
		}
	})
}

func BenchmarkSSEBody(b *testing.B) {
	for name, body := range map[string][]byte{
		"LF":   []byte(strings.Repeat("data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\n\n", 256)),
		"CRLF": []byte(strings.Repeat("data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\r\n\r\n", 256)),
	} {
		b.Run(name, func(b *testing.B) {
			r := bytes.NewReader(body)
			buf := make([]byte, 4096)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(body)
				s := SSEBody(io.NopCloser(r))
				for {
					if _, err := s.Read(buf); err != nil {
						break
					}
				}
			}
		})
	}
}
