package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// act is what the fault-injecting upstream does with one request.
type act struct {
	status int         // an HTTP error status (with body) instead of an answer
	header http.Header // sent with the error or the stream
	body   string      // the error body; default: an OpenAI error object

	hold       <-chan struct{} // before anything (headers included): wait for it
	holdFor    time.Duration   // … or this long
	chunks     []string        // the answer's text, one content delta each
	preamble   bool            // a role-only chunk first (before any content)
	beforeText <-chan struct{} // after the preamble, before the first content: wait
	slowFirst  time.Duration   // … or this long
	gap        time.Duration   // between content chunks
	afterText  <-chan struct{} // after the last content, before the finish: wait
	malformed  int             // malformed events sent before each content chunk
	refusal    string          // a declared refusal delta after the chunks
	errorEvent string          // an in-stream error event after the chunks (no finish)
	cut        bool            // after the chunks, reset the connection (no finish, no [DONE])
	noFinish   bool            // after the chunks, end cleanly but without finish or [DONE]
	finish     string          // default "stop"
	eol        string          // line endings: default LF; "\r" or "\r\n"
	logprobs   bool            // each content chunk carries logprobs for its text (one token)
	tier       string          // service_tier in every chunk
}

// hit is one request the upstream received.
type hit struct {
	at     time.Time
	body   map[string]json.RawMessage
	header http.Header
}

// upstream is a loopback OpenAI-compatible server that plays a script:
// each request takes the next act, the last act repeats.
type upstream struct {
	name string
	srv  *httptest.Server

	mu     sync.Mutex
	script []act
	hits   []hit
}

func newUpstream(name string, script ...act) *upstream {
	u := &upstream{name: name, script: script}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	return u
}

func (u *upstream) url() string { return u.srv.URL + "/v1" }

// play replaces the script (and keeps the hits).
func (u *upstream) play(script ...act) {
	u.mu.Lock()
	u.script = script
	u.mu.Unlock()
}

func (u *upstream) requests() []hit {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]hit(nil), u.hits...)
}

func (u *upstream) reset() {
	u.mu.Lock()
	u.hits = nil
	u.mu.Unlock()
}

func (u *upstream) next(r *http.Request) act {
	var body map[string]json.RawMessage
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.hits = append(u.hits, hit{at: time.Now(), body: body, header: r.Header.Clone()})
	a := act{chunks: []string{"ok"}}
	if len(u.script) > 0 {
		a = u.script[0]
		if len(u.script) > 1 {
			u.script = u.script[1:]
		}
	}
	return a
}

func wait(r *http.Request, ch <-chan struct{}, d time.Duration) bool {
	var tc <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		tc = t.C
	}
	if ch == nil && tc == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-tc:
		return true
	case <-r.Context().Done():
		return false
	}
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.NotFound(w, r)
		return
	}
	a := u.next(r)
	if !wait(r, a.hold, a.holdFor) {
		return
	}
	for k, vs := range a.header {
		w.Header()[k] = vs
	}
	if a.status != 0 {
		body := a.body
		if body == "" {
			body = fmt.Sprintf(`{"error":{"message":"%s says %d","type":"server_error","param":null,"code":null}}`, u.name, a.status)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, body)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	id := "chatcmpl-" + u.name
	chunkLP := func(delta, finish, logprobs string) string {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		tier := ""
		if a.tier != "" {
			tier = `"service_tier":"` + a.tier + `",`
		}
		return fmt.Sprintf(`data: {"id":%q,"object":"chat.completion.chunk","created":1764374400,"model":%q,%s"system_fingerprint":"fp_%s","choices":[{"index":0,"delta":%s,"logprobs":%s,"finish_reason":%s}]}`+"\n\n",
			id, "up-"+u.name, tier, u.name, delta, logprobs, f)
	}
	chunk := func(delta, finish string) string { return chunkLP(delta, finish, "null") }
	send := func(s string) bool {
		if a.eol != "" {
			s = strings.ReplaceAll(s, "\n", a.eol)
		}
		if _, err := io.WriteString(w, s); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	if a.preamble && !send(chunk(`{"role":"assistant","content":""}`, "")) {
		return
	}
	if !wait(r, a.beforeText, a.slowFirst) {
		return
	}
	for i, c := range a.chunks {
		if i > 0 && a.gap > 0 && !wait(r, nil, a.gap) {
			return
		}
		for range a.malformed {
			if !send("data: {\"id\": oops not json\n\n") {
				return
			}
		}
		text, _ := json.Marshal(c)
		lp := "null"
		if a.logprobs {
			lp = fmt.Sprintf(`{"content":[{"token":%s,"logprob":-0.%d,"bytes":null,"top_logprobs":[]}],"refusal":null}`, text, i+1)
		}
		if !send(chunkLP(`{"content":`+string(text)+`}`, "", lp)) {
			return
		}
	}
	if a.refusal != "" {
		text, _ := json.Marshal(a.refusal)
		if !send(chunk(`{"refusal":`+string(text)+`}`, "")) {
			return
		}
	}
	if !wait(r, a.afterText, 0) {
		return
	}
	switch {
	case a.cut:
		hj, ok := w.(http.Hijacker)
		if !ok {
			panic("no hijacker")
		}
		conn, _, err := hj.Hijack()
		if err == nil {
			_ = conn.Close() // mid-body: the client sees an unexpected EOF
		}
		return
	case a.noFinish:
		return // the handler returns: the chunked body ends cleanly
	case a.errorEvent != "":
		send(`data: {"error":{"message":"` + a.errorEvent + `","type":"server_error","code":null}}` + "\n\n")
		return
	}
	finish := a.finish
	if finish == "" {
		finish = "stop"
	}
	send(chunk(`{}`, finish))
	send(fmt.Sprintf(`data: {"id":%q,"object":"chat.completion.chunk","created":1764374400,"model":"up-%s","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n",
		id, u.name, len(a.chunks), 11+len(a.chunks)))
	send("data: [DONE]\n\n")
}
