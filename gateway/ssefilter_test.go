package gateway

import (
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

func filter(t testing.TB, in string) (string, int64) {
	var n atomic.Int64
	er := &eventReader{src: io.NopCloser(strings.NewReader(in)), skipped: &n}
	er.r = newBufReader(strings.NewReader(in))
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
		{"a long valid event passes", "data: {\"x\":\"" + strings.Repeat("b", 100<<10) + "\"}\n\n", "data: {\"x\":\"" + strings.Repeat("b", 100<<10) + "\"}\n\n", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, n := filter(t, c.in)
			require.Equal(t, c.out, out)
			require.Equal(t, c.skipped, n)
		})
	}
}

// FuzzEventReader: the filter never fails or panics, and what it passes is
// exactly the input when every event is well formed.
func FuzzEventReader(f *testing.F) {
	for _, s := range []string{"data: {}\n\n", "data: [DONE]\n\n", "data: {oops\n\n", ": c\n\ndata: {\"a\":\n data: 1}\n\n", "data:{}\r\n\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, n := filter(t, in)
		require.LessOrEqual(t, len(out), len(in))
		// Only CR line endings and a leading byte-order mark are rewritten.
		if n == 0 && !strings.Contains(in, "\r") && !strings.HasPrefix(in, "\xef\xbb\xbf") {
			require.Equal(t, in, out)
		}
	})
}
