package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// rawChunks posts a streaming request over a bare connection and returns
// the HTTP chunks of the answer's body, as the gateway flushed them.
func rawChunks(t *testing.T, base, body string) []string {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	c, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: "+u.Host+"\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
	// Read the chunked framing ourselves: each chunk is one write the
	// gateway flushed.
	var out []string
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		n, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		require.NoError(t, err, "chunk size line %q", line)
		if n == 0 {
			return out
		}
		b := make([]byte, n+2)
		_, err = io.ReadFull(br, b)
		require.NoError(t, err)
		out = append(out, string(b[:n]))
	}
}

// Events that reach the gateway together leave it together: an upstream
// that writes its whole answer at once is relayed in a few writes, not one
// write and flush per event, and nothing is lost or reordered.
func TestStreamEventsCoalesced(t *testing.T) {
	r := newRig(t, "")
	words := strings.Fields("one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen")
	for i := range words {
		words[i] += " "
	}
	r.up["primary"].play(act{chunks: words, batch: true})
	chunks := rawChunks(t, r.srv.URL, streamBody("primary"))
	ev := events(strings.Join(chunks, ""))
	require.Len(t, ev, len(words)+2, "every content chunk, the finish and [DONE]")
	require.Equal(t, "[DONE]", ev[len(ev)-1])
	var text strings.Builder
	for _, e := range ev {
		if i := strings.Index(e, `"content":"`); i >= 0 {
			rest := e[i+len(`"content":"`):]
			text.WriteString(rest[:strings.IndexByte(rest, '"')])
		}
	}
	require.Equal(t, strings.Join(words, ""), text.String())
	// The first content commits the stream and goes out alone (the commit
	// gate reads up to it); the rest came in one upstream write.
	require.LessOrEqual(t, len(chunks), 4, "%d writes for %d events", len(chunks), len(ev))
}

// The first content part, which commits the stream, goes out at once with
// the headers and the preamble the gate held, even when the upstream sent
// more in the same read: it is the event the client waits for, and the
// rest follows in as few writes as it arrived in. (Written from the relay
// itself, the headers are also not written from under the upstream read,
// whose deep stack every held stream would keep: BenchmarkHeldStreams.)
func TestStreamFirstContentGoesOutAtOnce(t *testing.T) {
	r := newRig(t, "")
	r.up["primary"].play(act{chunks: []string{"one ", "two ", "three ", "four "}, preamble: true, batch: true})
	chunks := rawChunks(t, r.srv.URL, streamBody("primary"))
	require.NotEmpty(t, chunks)
	first := events(chunks[0])
	require.NotEmpty(t, first)
	require.Contains(t, first[len(first)-1], `"content":"one "`, "the first write ends with the first content")
	for _, e := range first[:len(first)-1] {
		require.NotContains(t, e, `"content":`, "only the preamble comes before it")
	}
	ev := events(strings.Join(chunks, ""))
	require.Equal(t, "[DONE]", ev[len(ev)-1])
	var text strings.Builder
	for _, e := range ev {
		if i := strings.Index(e, `"content":"`); i >= 0 {
			rest := e[i+len(`"content":"`):]
			text.WriteString(rest[:strings.IndexByte(rest, '"')])
		}
	}
	require.Equal(t, "one two three four ", text.String())
	require.LessOrEqual(t, len(chunks), 3, "the rest arrived in one upstream write")
}

// Coalescing never holds a part back: an upstream that sends a chunk and
// then waits until the client has it (a model thinking) is relayed at
// once; the client would otherwise never see it and the upstream never
// go on.
func TestStreamPartNeverHeldForTheNext(t *testing.T) {
	r := newRig(t, "")
	seen := make(chan struct{})
	r.up["primary"].play(act{chunks: []string{"Par", "is"}, gap: time.Millisecond, afterText: seen})
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+"/v1/chat/completions", strings.NewReader(streamBody("primary")))
	require.NoError(t, err)
	resp, err := r.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		var b strings.Builder
		signalled := false
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			if !signalled && strings.Contains(sc.Text(), `"content":"is"`) {
				signalled = true
				close(seen) // the upstream goes on only now
			}
		}
		got <- b.String()
	}()
	select {
	case body := <-got:
		require.Contains(t, body, "data: [DONE]")
	case <-time.After(20 * time.Second):
		close(seen) // unblock the upstream so that the test ends
		t.Fatal("the last content part was held back until more came")
	}
}

// openers run their work to the end and raise its panic on the caller's
// goroutine (where net/http recovers a handler's panic), never on a
// worker's, which would end the process; a worker survives a panic.
func TestOpenersRunAndPanic(t *testing.T) {
	o := newOpeners(2)
	defer o.stop()
	ran := false
	o.run(openFunc(func() { ran = true }))
	require.True(t, ran)
	require.PanicsWithValue(t, "boom", func() { o.run(openFunc(func() { panic("boom") })) })
	ran = false
	o.run(openFunc(func() { ran = true }))
	require.True(t, ran)
}

// goid returns the current goroutine's id.
func goid() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(b), "goroutine "), " ")
	return id
}

// An opening runs on a worker that keeps its stack between requests (the
// stack an earlier opening grew), not on the handler's goroutine, and not on
// a goroutine started per request; at most maxIdle workers wait, and stop
// ends them.
func TestOpenersReuseWorkers(t *testing.T) {
	o := newOpeners(2)
	var first, second string
	o.run(openFunc(func() { first = goid() }))
	o.run(openFunc(func() { second = goid() }))
	require.NotEqual(t, goid(), first)
	require.Equal(t, first, second, "the second opening did not run on the idle worker")

	// Five openings at once: five workers, of which two stay.
	release := make(chan struct{})
	var started, done sync.WaitGroup
	for range 5 {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			o.run(openFunc(func() { started.Done(); <-release }))
		}()
	}
	started.Wait()
	close(release)
	done.Wait()
	require.Eventually(t, func() bool { return o.idle.Load() == 2 }, 5*time.Second, time.Millisecond)
	o.stop()
	require.Zero(t, o.idle.Load())
}
