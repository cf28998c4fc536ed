package sseline

import (
	"bufio"
	"cmp"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// normalized is what a stream reads as: CRLF and lone CR become LF, a
// leading byte-order mark is dropped.
func normalized(in string) string {
	in = strings.TrimPrefix(in, "\xef\xbb\xbf")
	return strings.ReplaceAll(strings.ReplaceAll(in, "\r\n", "\n"), "\r", "\n")
}

// lines reads r to its end and returns the lines (pieces of a long line
// joined) and the error that ended it.
func lines(t *testing.T, l *Reader) ([]string, error) {
	t.Helper()
	var out []string
	var cur strings.Builder
	for range 1 << 20 {
		line, more, err := l.Line()
		cur.Write(line)
		if more {
			require.NoError(t, err)
			require.Equal(t, l.Size, len(line), "a piece of a long line fills the buffer")
			continue
		}
		if cur.Len() > 0 {
			out = append(out, cur.String())
			cur.Reset()
		}
		if err != nil {
			return out, err
		}
	}
	t.Fatal("no end")
	return nil, nil
}

type hook struct{ n int }

func (h *hook) BeforeRead() { h.n++ }

func TestReader(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     []string
	}{
		{"lf", "data: a\n\ndata: b\n\n", []string{"data: a\n", "\n", "data: b\n", "\n"}},
		{"crlf split across reads", "data: a\r\n\r\n", []string{"data: a\n", "\n"}},
		{"lone cr", "data: a\r\rdata: b\r", []string{"data: a\n", "\n", "data: b\n"}},
		{"bom dropped once", "\xef\xbb\xbfdata: a\n\xef\xbb\xbf\n", []string{"data: a\n", "\xef\xbb\xbf\n"}},
		{"no final lf", "data: a", []string{"data: a"}},
		{"long line in pieces", "data: " + strings.Repeat("x", 40) + "\n\n", []string{"data: " + strings.Repeat("x", 40) + "\n", "\n"}},
		{"empty", "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(c.in), iotest.OneByteReader(strings.NewReader(c.in)), iotest.HalfReader(strings.NewReader(c.in))} {
				h := &hook{}
				l := &Reader{Src: r, Size: 16, Hook: h}
				got, err := lines(t, l)
				require.ErrorIs(t, err, io.EOF)
				require.Equal(t, c.want, got)
				require.Positive(t, h.n, "the hook runs before the reads")
				require.LessOrEqual(t, l.BufSize(), 16, "the buffer never grows")
			}
		})
	}
}

// Buffered tells whether Line needs no read; Fail ends the stream, sticky.
func TestReaderBufferedAndFail(t *testing.T) {
	l := &Reader{Src: strings.NewReader("a\nb\nc"), Size: 64}
	line, _, err := l.Line()
	require.NoError(t, err)
	require.Equal(t, "a\n", string(line))
	require.True(t, l.Buffered())
	l.Fail(bufio.ErrTooLong)
	for range 2 {
		line, more, err := l.Line()
		require.Empty(t, line)
		require.False(t, more)
		require.ErrorIs(t, err, bufio.ErrTooLong)
	}
}

// A source that returns nothing, and no error, for ever ends the stream
// with io.ErrNoProgress rather than spinning.
func TestReaderNoProgress(t *testing.T) {
	l := &Reader{Src: readerFunc(func([]byte) (int, error) { return 0, nil }), Size: 8}
	_, _, err := l.Line()
	require.True(t, errors.Is(err, io.ErrNoProgress))
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// FuzzReader: whatever the input and however it is cut into reads, the
// lines joined are the input with its line endings folded and its
// byte-order mark dropped, and Fold alone does the same.
func FuzzReader(f *testing.F) {
	for _, s := range []string{"data: a\r\n\r\n", "\xef\xbb\xbf\r", "a\rb\r\nc\n", strings.Repeat("y", 100) + "\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		l := &Reader{Src: iotest.OneByteReader(strings.NewReader(in)), Size: 7}
		got, err := lines(t, l)
		require.ErrorIs(t, err, io.EOF)
		require.Equal(t, normalized(in), strings.Join(got, ""))

		var folded []byte
		var r Reader
		for _, c := range []byte(in) {
			b := []byte{c}
			folded = append(folded, b[:r.Fold(b)]...)
		}
		require.Equal(t, strings.ReplaceAll(strings.ReplaceAll(in, "\r\n", "\n"), "\r", "\n"), string(folded))
	})
}

func TestField(t *testing.T) {
	for _, c := range []struct {
		line        string
		more        bool
		name, value string
	}{
		{"data: {}\n", false, "data", "{}\n"},
		{"data:{}\n", false, "data", "{}\n"},
		{"data:  x\n", false, "data", " x\n"},
		{"data\n", false, "data", "\n"},
		{"event: ping\n", false, "event", "ping\n"},
		{": comment\n", false, "", "comment\n"},
		{"data: a:b\n", false, "data", "a:b\n"},
		{"data: abc", true, "data", "abc"}, // the first piece of a long line
		{"dataabc", true, "dataabc", ""},
	} {
		name, value := Field([]byte(c.line), c.more)
		require.Equal(t, c.name, string(name), "%q", c.line)
		require.Equal(t, c.value, string(value), "%q", c.line)
	}
}

// spy is a source that sends one line per read and records, at each read,
// whether the reader held a buffer then.
type spy struct {
	l     *Reader
	lines []string
	held  []int // the reader's BufSize at each read that began a line
}

func (s *spy) Read(p []byte) (int, error) {
	if len(s.lines) == 0 {
		return 0, io.EOF
	}
	if len(p) == 1 {
		s.held = append(s.held, s.l.BufSize())
	}
	n := copy(p, s.lines[0])
	if s.lines[0] = s.lines[0][n:]; s.lines[0] == "" {
		s.lines = s.lines[1:]
	}
	return n, nil
}

// A reader with nothing buffered waits for the network without its
// buffer (a held stream keeps none), and reads the same lines.
func TestReaderWaitsWithoutBuffer(t *testing.T) {
	in := []string{"data: a\n", "\n", "data: " + strings.Repeat("x", 40) + "\n", "\r", "\n"}
	s := &spy{lines: append([]string(nil), in...)}
	l := &Reader{Size: 16}
	l.Src, s.l = s, l
	got, err := lines(t, l)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, []string{"data: a\n", "\n", "data: " + strings.Repeat("x", 40) + "\n", "\n"}, got)
	// Each line's first byte is read on its own (so is a long line's
	// next piece's, and the LF of a CRLF split across reads).
	require.Len(t, s.held, len(in)+2)
	for _, n := range s.held {
		require.Zero(t, n, "no buffer held while waiting")
	}
}

// With MaxLead, a stream whose first line that is not blank opens a JSON
// object is read whole into Lead (up to MaxLead) and hands out no line of
// it; any other stream reads as without it, Lead nil.
func TestLead(t *testing.T) {
	const events = "data: {\"a\":1}\n\ndata: [DONE]\n\n"
	for _, tc := range []struct {
		name, in, lead string
		lines          []string // what Line hands out, pieces joined
		err            error
		max            int
	}{
		{name: "bare object", in: `{"error":{"message":"m"}}`, lead: `{"error":{"message":"m"}}`},
		{name: "pretty, CRLF", in: "{\r\n  \"error\": {\"message\": \"m\"}\r\n}\r\n", lead: "{\n  \"error\": {\"message\": \"m\"}\n}\n"},
		{name: "after a BOM and blank lines", in: "\xef\xbb\xbf\n \n  {\"error\":1}\n", lines: []string{"\n", " \n"}, lead: "{\"error\":1}\n"},
		{name: "first line, then events", in: "{\"error\":1}\n\n" + events, lead: "{\"error\":1}\n\n" + events},
		{name: "past MaxLead", in: `{"error":"` + strings.Repeat("x", 100) + `"}` + "\n" + events, max: 20, lead: `{"error":"` + strings.Repeat("x", 10)},
		{name: "cut", in: `{"error":`, lead: `{"error":`, err: io.ErrUnexpectedEOF},
		{name: "events", in: events, lines: []string{"data: {\"a\":1}\n", "\n", "data: [DONE]\n", "\n"}},
		{name: "a comment first", in: ": hi\n" + events, lines: []string{": hi\n", "data: {\"a\":1}\n", "\n", "data: [DONE]\n", "\n"}},
		{name: "an object past the first piece of a long line", in: strings.Repeat(" ", 20) + "{\"error\":1}\n" + events,
			lines: []string{strings.Repeat(" ", 20) + "{\"error\":1}\n", "data: {\"a\":1}\n", "\n", "data: [DONE]\n", "\n"}},
		{name: "an object on a later line", in: "data: x\n{\"error\":1}\n", lines: []string{"data: x\n", "{\"error\":1}\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var src io.Reader = strings.NewReader(tc.in)
			if tc.err != nil {
				src = io.MultiReader(src, iotest.ErrReader(tc.err))
			}
			l := &Reader{Src: iotest.HalfReader(src), Size: 16, MaxLead: cmp.Or(tc.max, 1<<10)}
			got, err := lines(t, l)
			require.ErrorIs(t, err, cmp.Or(tc.err, io.EOF))
			require.Equal(t, tc.lines, got)
			if tc.lead == "" {
				require.Nil(t, l.Lead())
				return
			}
			require.Equal(t, tc.lead, string(l.Lead()))
		})
	}
}

// Release gives the buffer back only when nothing is buffered in it, and
// the reader goes on reading afterwards (taking a buffer again).
func TestReaderRelease(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       string
		read     int // lines read before Release
		released bool
		rest     []string
	}{
		{name: "all read", in: "data: [DONE]\n\n", read: 2, released: true},
		{name: "a line still buffered", in: "data: [DONE]\n\ndata: x\n", read: 2, released: false, rest: []string{"data: x\n"}},
		{name: "nothing read yet", in: "", read: 0, released: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Reader{Src: strings.NewReader(tc.in), Size: 64}
			for range tc.read {
				_, _, err := l.Line()
				require.NoError(t, err)
			}
			l.Release()
			require.Equal(t, tc.released, l.BufSize() == 0, "buffer released")
			var rest []string
			for {
				line, _, err := l.Line()
				if err != nil {
					require.ErrorIs(t, err, io.EOF)
					break
				}
				rest = append(rest, string(line))
			}
			require.Equal(t, tc.rest, rest)
		})
	}
}
