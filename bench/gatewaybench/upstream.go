package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The upstream runs in a process of its own: a proxy holding N streams
// needs 2N descriptors and the load generator N, and each process's limit
// (20,000 here, which an unprivileged sandbox cannot raise) would not
// hold the load generator's N and the upstream's N together.
func serveUpstream() { serveChild(&http.Server{Handler: http.HandlerFunc(upstreamHandler)}) }

// serveChild serves srv on a free loopback port, prints its address for
// the parent, and exits when the parent closes its stdin.
func serveChild(srv *http.Server) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(ln.Addr().String())
	go func() { // the parent closes our stdin when it is done
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	_ = srv.Serve(ln)
}

// startUpstream starts the upstream process and returns its base URL and pid.
func startUpstream() (string, int, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", 0, nil, err
	}
	cmd := exec.Command(self, "-serve-upstream", "-chunks", strconv.Itoa(*chunks), "-pace", pace.String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", 0, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, nil, err
	}
	cmd.Stderr = os.Stderr
	done, err := startChild(cmd)
	if err != nil {
		return "", 0, nil, err
	}
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stopProc(cmd, done)
		return "", 0, nil, fmt.Errorf("upstream: %w", err)
	}
	return "http://" + strings.TrimSpace(addr), cmd.Process.Pid, func() { stdin.Close(); stopProc(cmd, done) }, nil
}

func upstreamHandler(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/release" {
		releaseMu.Lock()
		close(release)
		release = make(chan struct{})
		releaseMu.Unlock()
		return
	}
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req struct {
		Stream bool `json:"stream"`
	}
	if err := json.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if req.Stream && bytes.Contains(b, []byte(holdPrompt)) {
		hold(w, r)
		return
	}
	if !req.Stream {
		// A model takes as long to write a whole answer as to stream it, and
		// a gateway may ask the upstream for a stream either way: the same
		// sleeps as a stream, so timer jitter under load is the same too.
		for i := 0; i < *chunks; i++ {
			time.Sleep(*pace)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(upstreamAnswer().json)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl := w.(http.Flusher)
	a := upstreamAnswer()
	for _, ev := range a.events {
		time.Sleep(*pace)
		_, _ = w.Write(ev)
		fl.Flush() // a write a chunk, as a model streams them
	}
	_, _ = w.Write(a.end)
	fl.Flush()
}

// upstreamAnswer is the answer's bytes, built once (the upstream shares the
// cores with the proxy): the JSON answer, the -chunks content events, and
// the end (the finish_reason event and [DONE]).
var upstreamAnswer = sync.OnceValue(func() (a struct {
	json, end []byte
	events    [][]byte
}) {
	a.json = fmt.Appendf(nil, `{"id":"chatcmpl-b","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}`,
		expected(), *chunks, *chunks+5)
	for i := 0; i < *chunks; i++ {
		a.events = append(a.events, fmt.Appendf(nil, "data: {\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"},\"finish_reason\":null}]}\n\n", i))
	}
	a.end = []byte("data: {\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	return a
})

const holdPrompt = "hold this stream open"

// release ends the held streams; a new one is made per hold phase.
var (
	releaseMu sync.Mutex
	release   = make(chan struct{})
)

// hold sends one content chunk, waits for release (or the client to leave),
// then ends the stream properly.
func hold(w http.ResponseWriter, r *http.Request) {
	releaseMu.Lock()
	rel := release
	releaseMu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	fmt.Fprint(w, "data: {\"id\":\"chatcmpl-h\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"held \"},\"finish_reason\":null}]}\n\n")
	fl.Flush()
	select {
	case <-rel:
	case <-r.Context().Done():
		return
	}
	fmt.Fprint(w, "data: {\"id\":\"chatcmpl-h\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	fl.Flush()
}

func expected() string {
	var b strings.Builder
	for i := 0; i < *chunks; i++ {
		fmt.Fprintf(&b, "t%d ", i)
	}
	return b.String()
}
