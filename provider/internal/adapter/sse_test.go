package adapter

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	antsse "github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/leaf/sseline"
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
		b.started, b.err, b.lr = false, nil, sseline.Reader{}
		for {
			if _, err := b.Read(buf); err != nil {
				break
			}
		}
	})
	require.Zero(t, allocs)
}

// sdkEvents is what the OpenAI SDK's decoder makes of a body: its events
// (type and data) and the error that ended them.
func sdkEvents(body io.Reader) ([]string, error) {
	d := ssestream.NewDecoder(&http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(body)})
	var evs []string
	for d.Next() {
		evs = append(evs, fmt.Sprintf("%s|%s", d.Event().Type, d.Event().Data))
	}
	return evs, d.Err()
}

// antEvents is what Anthropic's SDK decoder makes of a body, printed as
// sdkEvents does: it keeps an event with a type and no data too.
func antEvents(body io.Reader) ([]string, error) {
	d := antsse.NewDecoder(&http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(body)})
	var evs []string
	for d.Next() {
		evs = append(evs, fmt.Sprintf("%s|%s", d.Event().Type, d.Event().Data))
	}
	return evs, d.Err()
}

// readEvents is what ReadEvent makes of a body, printed as sdkEvents does:
// all its events (as Anthropic's decoder splits them), and those with data
// (as OpenAI's does).
func readEvents(b EventBody) (all, withData []string, err error) {
	for {
		typ, data, err := b.ReadEvent()
		if err == io.EOF {
			return all, withData, nil
		}
		if err != nil {
			return all, withData, err
		}
		all = append(all, fmt.Sprintf("%s|%s", typ, data))
		if len(data) > 0 {
			withData = append(withData, fmt.Sprintf("%s|%s", typ, data))
		}
	}
}

// ReadEvent splits events as the SDK's decoder does over the normalized
// body, however the body's reads fall.
func TestSSEBodyReadEvent(t *testing.T) {
	long := "{\"x\":\"" + strings.Repeat("b", 5000) + "\"}"
	for _, in := range []string{
		"",
		"data: x",
		"data: x\n",
		"data: x\n\n",
		"\uFEFFdata: {}\r\n\r\n",
		"\uFEFF\uFEFFdata: {}\n\n",
		": c\n\nevent: a\n\ndata: 1\n\n",
		"event: a\rdata: 1\rdata:2\rdata\rid: 3\r\r",
		"data:  two spaces\n\nevent:x\nevent: y\ndata: {}\n\n\n\n",
		"datax: 1\n\ndata : 2\n\n:data: 3\n\n",
		"data: " + long + "\n\n" + "event: " + strings.Repeat("t", 3000) + "\ndata: " + long + "\ndata: " + long + "\n\ndata: [DONE]\n\n",
		strings.Repeat("x", 2500) + ":data\n" + "data: 1\n\n",
	} {
		w, werr := sdkEvents(strings.NewReader(want(in)))
		a, aerr := antEvents(strings.NewReader(want(in)))
		for name, r := range map[string]func(string) io.Reader{
			"whole":      func(s string) io.Reader { return strings.NewReader(s) },
			"one byte":   func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
			"half":       func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
			"data+EOF":   func(s string) io.Reader { return iotest.DataErrReader(strings.NewReader(s)) },
			"chunks 2,3": func(s string) io.Reader { return &chunker{b: []byte(s), sizes: []byte{1, 2}} },
		} {
			t.Run(name+"/"+strings.ReplaceAll(in[:min(len(in), 40)], "\r", "CR"), func(t *testing.T) {
				all, got, err := readEvents(SSEBody(io.NopCloser(r(in))))
				require.Equal(t, werr, err)
				require.Equal(t, aerr, err)
				require.Equal(t, w, got)
				require.Equal(t, a, all)
			})
		}
	}
}

// A line past the SDK's limit ends the stream with the SDK's error; the
// read buffer does not grow for it, nor keep what gathered it.
func TestSSEBodyReadEventLimits(t *testing.T) {
	boom := errors.New("boom")
	t.Run("a line past the limit", func(t *testing.T) {
		in := "data: {}\n\ndata: " + strings.Repeat("x", maxEventLine) + "\n\n"
		w, werr := sdkEvents(strings.NewReader(in))
		require.ErrorIs(t, werr, bufio.ErrTooLong)
		_, got, err := readEvents(SSEBody(io.NopCloser(strings.NewReader(in))))
		require.ErrorIs(t, err, bufio.ErrTooLong)
		require.Equal(t, w, got)
	})
	t.Run("a line at the limit", func(t *testing.T) {
		in := "data: " + strings.Repeat("x", maxEventLine-7) + "\n\n"
		w, werr := sdkEvents(strings.NewReader(in))
		require.NoError(t, werr)
		_, got, err := readEvents(SSEBody(io.NopCloser(strings.NewReader(in))))
		require.NoError(t, err)
		require.Equal(t, w, got)
	})
	t.Run("buffers stay small", func(t *testing.T) {
		b := SSEBody(io.NopCloser(strings.NewReader("data: " + strings.Repeat("x", 100<<10) + "\n\ndata: {}\n\n"))).(*sseBody)
		_, data, err := b.ReadEvent()
		require.NoError(t, err)
		require.Len(t, data, 100<<10+1)
		_, data, err = b.ReadEvent()
		require.NoError(t, err)
		require.Equal(t, "{}\n", string(data))
		require.Equal(t, eventBufSize, b.lr.BufSize())
		require.LessOrEqual(t, cap(b.data), maxKeptData)
	})
	t.Run("an error after an event", func(t *testing.T) {
		b := SSEBody(io.NopCloser(io.MultiReader(strings.NewReader("data: 1\n\ndata: 2\n"), iotest.ErrReader(boom))))
		_, got, err := readEvents(b)
		require.ErrorIs(t, err, boom)
		require.Equal(t, []string{"|1\n"}, got)
		_, _, err = b.ReadEvent()
		require.ErrorIs(t, err, boom, "sticky")
	})
}

// ReadEvent allocates nothing per event once its buffers are made.
func TestSSEBodyReadEventAllocs(t *testing.T) {
	body := strings.Repeat("data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\r\n\r\n: ping\n\nevent: t\ndata: {\"a\":\ndata: 1}\n\n", 8000)
	for name, src := range map[string]io.Reader{
		"whole":    strings.NewReader(body),
		"one byte": iotest.OneByteReader(strings.NewReader(body)),
	} {
		t.Run(name, func(t *testing.T) {
			if raceEnabled && name == "one byte" {
				t.Skip("every read empties the buffer, which goes to a sync.Pool, and the race detector drops pooled items at random")
			}
			b := SSEBody(io.NopCloser(src))
			for range 2 {
				_, _, err := b.ReadEvent()
				require.NoError(t, err)
			}
			read := func() {
				if _, _, err := b.ReadEvent(); err != nil {
					t.Fatal(err)
				}
			}
			// Other tests' goroutines winding down allocate too: the
			// least of a few measurements is this reader's.
			allocs := testing.AllocsPerRun(1000, read)
			for i := 0; i < 5 && allocs > 0; i++ {
				allocs = min(allocs, testing.AllocsPerRun(1000, read))
			}
			require.Zero(t, allocs)
		})
	}
}

// Events passes an EventBody through, and NormalizeSSE leaves one alone.
func TestEvents(t *testing.T) {
	b := SSEBody(io.NopCloser(strings.NewReader("")))
	require.Same(t, b, Events(b))
	resp, err := NormalizeSSE(nil, func(*http.Request) (*http.Response, error) { return &http.Response{StatusCode: 200, Body: b}, nil })
	require.NoError(t, err)
	require.Same(t, b, resp.Body)
	plain := io.NopCloser(strings.NewReader("\uFEFFdata: 1\r\r"))
	_, got, err := readEvents(Events(plain))
	require.NoError(t, err)
	require.Equal(t, []string{"|1\n"}, got)
}

// FuzzSSEBody: Read normalizes the body by the spec's definition, and
// ReadEvent splits it as the SDK's decoder splits the normalized body.
func FuzzSSEBody(f *testing.F) {
	f.Add([]byte("\uFEFFdata: x\r\n\r\n"), []byte{1, 2, 3})
	f.Add([]byte("a\rb\r\nc\n\r"), []byte{0})
	f.Add([]byte("\xEF\xBB"), []byte{5})
	f.Add([]byte("event: a\ndata\ndata: {\"x\":\""+strings.Repeat("y", 2000)+"\"}\r\n\r\n: c\n\n"), []byte{200, 7})
	f.Fuzz(func(t *testing.T, in, sizes []byte) {
		got, err := io.ReadAll(SSEBody(io.NopCloser(&chunker{b: bytes.Clone(in), sizes: sizes})))
		if err != nil {
			t.Fatal(err)
		}
		if w := want(string(in)); string(got) != w {
			t.Fatalf("SSEBody(%q) = %q, want %q", in, got, w)
		}
		w, werr := sdkEvents(bytes.NewReader(got))
		a, aerr := antEvents(bytes.NewReader(got))
		all, evs, err := readEvents(SSEBody(io.NopCloser(&chunker{b: bytes.Clone(in), sizes: sizes})))
		require.Equal(t, werr, err)
		require.Equal(t, aerr, err)
		require.Equal(t, w, evs, "body %q", in)
		require.Equal(t, a, all, "body %q", in)
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
