package gateway

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"

	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/stretchr/testify/require"
)

func filter(t testing.TB, in string) (string, int64) {
	var n atomic.Int64
	er := newEventReader(io.NopCloser(strings.NewReader(in)), &n, nil)
	out, err := io.ReadAll(iotest.OneByteReader(er))
	require.NoError(t, err)
	return string(out), n.Load()
}

func TestEventReader(t *testing.T) {
	big := "data: {\"x\":\"" + strings.Repeat("a", maxEventBytes) + "\"}\n\n"
	for _, c := range []struct {
		name, in, out string
		skipped       int64
	}{
		{"well-formed events pass unchanged", "data: {\"a\":1}\n\ndata: [DONE]\n\n", "data: {\"a\":1}\n\ndata: [DONE]\n\n", 0},
		{"CRLF and comments, folded to LF", ": ping\r\n\r\nevent: x\r\ndata: {}\r\n\r\n", ": ping\n\nevent: x\ndata: {}\n\n", 0},
		{"lone CR", "data: {oops\r\rdata: {}\r\r", "data: {}\n\n", 1},
		{"a byte-order mark", "\xef\xbb\xbfdata: {oops\n\ndata: {}\n\n", "data: {}\n\n", 1},
		{"malformed JSON skipped", "data: {oops\n\ndata: {\"a\":1}\n\n", "data: {\"a\":1}\n\n", 1},
		{"not an object skipped", "data: 42\n\ndata: \"s\"\n\ndata: {}\n\n", "data: {}\n\n", 2},
		{"multi-line data joined", "data: {\"a\":\ndata: 1}\n\n", "data: {\"a\":\ndata: 1}\n\n", 0},
		{"a last event without its blank line", "data: {}\n\ndata: {\"a\":1}", "data: {}\n\ndata: {\"a\":1}", 0},
		{"an event past the cap skipped", big + "data: {}\n\n", "data: {}\n\n", 1},
		{"a data line without a colon is a data line", "data\n\ndata: {}\n\n", "data: {}\n\n", 1},
		{"a long valid event passes", "data: {\"x\":\"" + strings.Repeat("b", 100<<10) + "\"}\n\n", "data: {\"x\":\"" + strings.Repeat("b", 100<<10) + "\"}\n\n", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, n := filter(t, c.in)
			require.Equal(t, c.out, out)
			require.Equal(t, c.skipped, n)
		})
	}
}

// readEvents reads in with ReadEvent the way the OpenAI adapter does, but
// asking SkipMalformed about every event: the events kept (type and data),
// how many were skipped.
func readEvents(t testing.TB, src io.Reader) ([]string, int64) {
	var n atomic.Int64
	er := newEventReader(io.NopCloser(src), &n, nil)
	var evs []string
	for {
		typ, data, err := er.ReadEvent()
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			return evs, n.Load()
		}
		if len(data) > 0 && !er.SkipMalformed(data) { // OpenAI's decoder drops a typed event without data
			evs = append(evs, fmt.Sprintf("%s|%s", typ, data))
		}
	}
}

// sdkEvents is what the OpenAI SDK's decoder makes of a body (the
// gateway's Read output): its events, as readEvents prints them.
func sdkEvents(t testing.TB, body string) []string {
	d := ssestream.NewDecoder(&http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader(body))})
	var evs []string
	for d.Next() {
		evs = append(evs, fmt.Sprintf("%s|%s", d.Event().Type, d.Event().Data))
	}
	require.NoError(t, d.Err())
	return evs
}

func TestReadEvent(t *testing.T) {
	big := "data: {\"x\":\"" + strings.Repeat("a", maxEventBytes) + "\"}\n\n"
	long := "{\"x\":\"" + strings.Repeat("b", 100<<10) + "\"}"
	for _, c := range []struct {
		name, in string
		events   []string
		skipped  int64
	}{
		{"well-formed events", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []string{"|{\"a\":1}\n", "|[DONE]\n"}, 0},
		{"CRLF, comments and a type", ": ping\r\n\r\nevent: x\r\ndata: {}\r\n\r\n", []string{"x|{}\n"}, 0},
		{"lone CR", "data: {oops\r\rdata: {}\r\r", []string{"|{}\n"}, 1},
		{"a byte-order mark", "\xef\xbb\xbfdata: {}\n\n", []string{"|{}\n"}, 0},
		{"malformed JSON skipped", "data: {oops\n\ndata: {\"a\":1}\n\n", []string{"|{\"a\":1}\n"}, 1},
		{"not an object skipped", "data: 42\n\ndata: \"s\"\n\ndata: [DONE]x\n\ndata: {}\n\n", []string{"|{}\n"}, 3},
		{"multi-line data joined", "data: {\"a\":\ndata:1}\n\n", []string{"|{\"a\":\n1}\n"}, 0},
		{"a data line without a colon", "data\n\ndata: {}\n\n", []string{"|{}\n"}, 1},
		{"an event without data is none", "event: x\nid: 1\n\ndata: {}\n\n", []string{"|{}\n"}, 0},
		{"a last event without its blank line dropped", "data: {}\n\ndata: {\"a\":1}\n", []string{"|{}\n"}, 0},
		{"an event past the cap skipped", big + "data: {}\n\n", []string{"|{}\n"}, 1},
		{"a type past the cap skipped", "event: " + strings.Repeat("t", maxEventBytes) + "\ndata: {}\n\ndata: {}\n\n", []string{"|{}\n"}, 1},
		{"a long event passes", "event: " + strings.Repeat("t", 3000) + "\ndata: " + long + "\n\n", []string{strings.Repeat("t", 3000) + "|" + long + "\n"}, 0},
	} {
		for name, src := range map[string]func(string) io.Reader{
			"whole":    func(s string) io.Reader { return strings.NewReader(s) },
			"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		} {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				evs, n := readEvents(t, src(c.in))
				require.Equal(t, c.events, evs)
				require.Equal(t, c.skipped, n)
			})
		}
	}
}

// An event with a type and no data line is none, as the SSE standard says
// (Anthropic's SDK decoder would end its stream at an "event: error" with
// no data); nor is one with neither. Nothing is counted.
func TestReadEventTypeWithoutData(t *testing.T) {
	var n atomic.Int64
	er := newEventReader(io.NopCloser(strings.NewReader("event: error\n\nevent:\nid: 1\n\n: c\n\nevent: x\ndata: {}\n\n")), &n, nil)
	var evs []string
	for {
		typ, data, err := er.ReadEvent()
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		evs = append(evs, fmt.Sprintf("%s|%s", typ, data))
	}
	require.Equal(t, []string{"x|{}\n"}, evs)
	require.Zero(t, n.Load())
}

// ReadEvent allocates nothing per event once its buffers are made, whether
// an event comes whole or split across reads.
func TestReadEventAllocs(t *testing.T) {
	body := strings.Repeat("data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\r\n\r\n: ping\n\nevent: t\ndata: {\"a\":\ndata: 1}\n\n", 8000)
	for name, src := range map[string]io.Reader{
		"whole":    strings.NewReader(body),
		"one byte": iotest.OneByteReader(strings.NewReader(body)),
	} {
		t.Run(name, func(t *testing.T) {
			if raceEnabled && name == "one byte" {
				t.Skip("every read empties the buffer, which goes to a sync.Pool, and the race detector drops pooled items at random")
			}
			var n atomic.Int64
			er := newEventReader(io.NopCloser(src), &n, nil)
			for range 2 {
				_, _, err := er.ReadEvent()
				require.NoError(t, err)
			}
			read := func() {
				if _, data, err := er.ReadEvent(); err != nil || er.SkipMalformed(data) {
					t.Fatal(err, string(data))
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

// A held stream keeps small buffers: the read buffer never grows, and what
// gathered a long event goes at the next one.
func TestReadEventKeepsBuffersSmall(t *testing.T) {
	in := "data: {\"x\":\"" + strings.Repeat("b", 100<<10) + "\"}\n\ndata: {}\n\n"
	var n atomic.Int64
	er := newEventReader(io.NopCloser(iotest.HalfReader(strings.NewReader(in))), &n, nil)
	_, data, err := er.ReadEvent()
	require.NoError(t, err)
	require.Len(t, data, 100<<10+9)
	_, data, err = er.ReadEvent()
	require.NoError(t, err)
	require.Equal(t, "{}\n", string(data))
	require.Equal(t, eventBufSize, er.lr.BufSize())
	require.LessOrEqual(t, cap(er.data), maxKeptData)
	require.LessOrEqual(t, cap(er.typ), maxKeptData)
}

// FuzzEventReader: the filter never fails or panics, and what it passes is
// exactly the input when every event is well formed. ReadEvent keeps the
// events the SDK's decoder finds in what Read passes, and skips as many.
func FuzzEventReader(f *testing.F) {
	for _, s := range []string{"data: {}\n\n", "data: [DONE]\n\n", "data: {oops\n\n", ": c\n\ndata: {\"a\":\n data: 1}\n\n", "data:{}\r\n\r\n",
		"event: x\ndata\n\ndata: {\"a\":\"" + strings.Repeat("y", 3000) + "\"}\r\n\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, n := filter(t, in)
		require.LessOrEqual(t, len(out), len(in))
		// Only CR line endings and a leading byte-order mark are rewritten.
		if n == 0 && !strings.Contains(in, "\r") && !strings.HasPrefix(in, "\xef\xbb\xbf") {
			require.Equal(t, in, out)
		}
		evs, m := readEvents(t, iotest.OneByteReader(strings.NewReader(in)))
		require.Equal(t, sdkEvents(t, out), evs)
		require.Equal(t, n, m)
	})
}

// isEventStream finds what mime.ParseMediaType finds, the filter's check
// before it.
func TestIsEventStream(t *testing.T) {
	for _, ct := range []string{"text/event-stream", "Text/Event-Stream; charset=utf-8", " text/event-stream ", "text/event-stream;", "text/event-stream; charset",
		"text/event-streamx", "text/event-stream x", "application/json", "", ";text/event-stream", "text/plain; x=text/event-stream"} {
		mt, _, _ := mime.ParseMediaType(ct)
		require.Equal(t, mt == "text/event-stream", isEventStream(ct), "%q", ct)
	}
}

// Read keeps small buffers too, and allocates nothing per event once they
// are made (the events Anthropic's SDK decoder reads through it).
func TestReadKeepsBuffersSmall(t *testing.T) {
	long := "data: {\"x\":\"" + strings.Repeat("b", 100<<10) + "\",\n" + "data: \"y\":1}\n\n"
	small := "event: e\ndata: {\"type\":\"ping\"}\n\n"
	var n atomic.Int64
	er := newEventReader(io.NopCloser(iotest.HalfReader(strings.NewReader(long+strings.Repeat(small, 4000)))), &n, nil)
	p := make([]byte, 512)
	var got []byte
	for len(got) < len(long)+len(small) {
		k, err := er.Read(p)
		require.NoError(t, err)
		got = append(got, p[:k]...)
	}
	require.True(t, string(got) == long+small, "the long event and the next, as they came")
	require.Zero(t, n.Load())
	require.Equal(t, eventBufSize, er.lr.BufSize())
	require.LessOrEqual(t, cap(er.event), maxKeptData)
	require.LessOrEqual(t, cap(er.data), maxKeptData)
	require.LessOrEqual(t, cap(er.partial), maxKeptData)
	read := func() {
		if k, err := er.Read(p); err != nil || string(p[:k]) != small {
			t.Fatal(err, string(p[:k]))
		}
	}
	allocs := testing.AllocsPerRun(500, read)
	for i := 0; i < 5 && allocs > 0; i++ {
		allocs = min(allocs, testing.AllocsPerRun(500, read))
	}
	require.Zero(t, allocs)
}
