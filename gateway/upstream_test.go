package gateway

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// act is what the fault-injecting upstream does with one request.
type act struct {
	status int         // an HTTP error status (with body) instead of an answer
	header http.Header // sent with the error or the stream
	body   string      // the error body; default: an OpenAI error object
	ctype  string      // the error body's Content-Type; default application/json

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
	bareEvent  string          // Anthropic: an event of this type with no data line, before the first chunk
	cut        bool            // after the chunks, reset the connection (no finish, no [DONE])
	noFinish   bool            // after the chunks, end cleanly but without finish or [DONE]
	finish     string          // default "stop" (OpenAI), "end_turn" (Anthropic)
	eol        string          // line endings: default LF; "\r" or "\r\n"
	batch      bool            // write the whole stream at once (one flush at the end)
	logprobs   bool            // each content chunk carries logprobs for its text (one token)
	tier       string          // service_tier in every chunk
	pad        int             // the text is padded with 'x' to this many bytes (JSON mode only)
	// transcript replays a recorded response of the repo's wire fixtures
	// (testdata/wire/<provider>/<name>.json: status, headers, body or
	// events) instead of the fields above, but hold.
	transcript string
}

// hit is one request the upstream received.
type hit struct {
	at     time.Time
	path   string
	header http.Header
	raw    []byte // the body's bytes
	body   map[string]json.RawMessage
}

// upstream is a loopback server that plays a script, speaking OpenAI's
// Chat Completions on /v1/chat/completions and Anthropic's Messages API on
// /v1/messages: each request takes the next act, the last act repeats.
// A Chat Completions request that does not ask for a stream ("stream"
// false or absent, openai.WithUpstreamJSON) gets the act as one
// chat.completion (serveJSON), with each fault's JSON twin.
type upstream struct {
	name string
	srv  *httptest.Server

	mu     sync.Mutex
	script []act
	hits   []hit
	// forget keeps no hits (a memory benchmark then measures the hop, not
	// the upstream's record of what the hop sent).
	forget bool
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

// next records r and returns its act, and whether r asked for a stream.
func (u *upstream) next(r *http.Request) (act, bool) {
	var body map[string]json.RawMessage
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.forget {
		u.hits = append(u.hits, hit{at: time.Now(), path: r.URL.Path, header: r.Header.Clone(), raw: b, body: body})
	}
	a := act{chunks: []string{"ok"}}
	if len(u.script) > 0 {
		a = u.script[0]
		if len(u.script) > 1 {
			u.script = u.script[1:]
		}
	}
	return a, string(body["stream"]) == "true"
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
	anthropic := strings.HasSuffix(r.URL.Path, "/v1/messages")
	if !anthropic && !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.NotFound(w, r)
		return
	}
	a, stream := u.next(r)
	if !wait(r, a.hold, a.holdFor) {
		return
	}
	for k, vs := range a.header {
		w.Header()[k] = vs
	}
	if a.transcript != "" {
		replay(w, r, a.transcript)
		return
	}
	if anthropic {
		u.serveAnthropic(w, r, a)
		return
	}
	if a.status != 0 {
		body := a.body
		if body == "" {
			body = fmt.Sprintf(`{"error":{"message":"%s says %d","type":"server_error","param":null,"code":null}}`, u.name, a.status)
		}
		w.Header().Set("Content-Type", cmp.Or(a.ctype, "application/json"))
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, body)
		return
	}
	if !stream {
		u.serveJSON(w, r, a)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
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
	out := sse{w: w, eol: a.eol, batch: a.batch}
	send := out.send
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
		out.cut()
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

// serveJSON plays a as one chat.completion, the answer to a request that
// asked for no stream: the same id, model, fingerprint, tier, text (the
// chunks joined), logprobs (one token a chunk), refusal, finish and usage
// as the stream of a. The headers go at once; the body when the stream
// would have ended: after beforeText/slowFirst, the gaps between the
// chunks, and afterText. The faults' twins: cut resets the connection
// half-way through the body, noFinish answers finish_reason null,
// errorEvent a 200 with an error object (a 200 with a body of the act's
// own is its status 200 and body, served before this); pad grows the text.
func (u *upstream) serveJSON(w http.ResponseWriter, r *http.Request, a act) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	if !wait(r, a.beforeText, a.slowFirst) {
		return
	}
	if n := len(a.chunks); n > 1 && a.gap > 0 && !wait(r, nil, time.Duration(n-1)*a.gap) {
		return
	}
	if !wait(r, a.afterText, 0) {
		return
	}
	if a.errorEvent != "" {
		_, _ = io.WriteString(w, `{"error":{"message":"`+a.errorEvent+`","type":"server_error","code":null}}`)
		return
	}
	text := strings.Join(a.chunks, "")
	if a.pad > len(text) {
		text += strings.Repeat("x", a.pad-len(text))
	}
	content, _ := json.Marshal(text)
	refusal := []byte("null")
	if a.refusal != "" {
		refusal, _ = json.Marshal(a.refusal)
	}
	lp := "null"
	if a.logprobs {
		var toks []string
		for i, c := range a.chunks {
			tok, _ := json.Marshal(c)
			toks = append(toks, fmt.Sprintf(`{"token":%s,"logprob":-0.%d,"bytes":null,"top_logprobs":[]}`, tok, i+1))
		}
		lp = `{"content":[` + strings.Join(toks, ",") + `],"refusal":null}`
	}
	tier := ""
	if a.tier != "" {
		tier = `"service_tier":"` + a.tier + `",`
	}
	finish := `"` + cmp.Or(a.finish, "stop") + `"`
	if a.noFinish {
		finish = "null"
	}
	body := fmt.Sprintf(`{"id":"chatcmpl-%s","object":"chat.completion","created":1764374400,"model":"up-%s",%s"system_fingerprint":"fp_%s","choices":[{"index":0,"message":{"role":"assistant","content":%s,"refusal":%s},"logprobs":%s,"finish_reason":%s}],"usage":{"prompt_tokens":11,"completion_tokens":%d,"total_tokens":%d}}`,
		u.name, u.name, tier, u.name, content, refusal, lp, finish, len(a.chunks), 11+len(a.chunks))
	if a.cut {
		_, _ = io.WriteString(w, body[:len(body)/2])
		w.(http.Flusher).Flush()
		sse{w: w}.cut()
		return
	}
	_, _ = io.WriteString(w, body)
}

// sse writes the events of one act: send one event (false once the client
// is gone), cut the connection mid-body.
type sse struct {
	w     http.ResponseWriter
	eol   string
	batch bool // no flush per event (the whole stream at once)
}

func (s sse) send(ev string) bool {
	if s.eol != "" {
		ev = strings.ReplaceAll(ev, "\n", s.eol)
	}
	if _, err := io.WriteString(s.w, ev); err != nil {
		return false
	}
	if !s.batch {
		s.w.(http.Flusher).Flush()
	}
	return true
}

func (s sse) cut() {
	conn, _, err := s.w.(http.Hijacker).Hijack()
	if err == nil {
		_ = conn.Close() // mid-body: the client sees an unexpected EOF
	}
}

// serveAnthropic plays a as the Messages API streams it (the shape of
// testdata/wire/anthropic/text.json): message_start, a text block of one
// text_delta per chunk, message_delta with the stop reason and usage,
// message_stop.
func (u *upstream) serveAnthropic(w http.ResponseWriter, r *http.Request, a act) {
	if a.status != 0 {
		body := a.body
		if body == "" {
			typ := map[int]string{400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error",
				503: "overloaded_error", 529: "overloaded_error"}[a.status]
			if typ == "" {
				typ = "api_error"
			}
			body = fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":"%s says %d"},"request_id":"req_%s"}`, typ, u.name, a.status, u.name)
		}
		w.Header().Set("Content-Type", cmp.Or(a.ctype, "application/json"))
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, body)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("request-id", "req_"+u.name)
	s := sse{w: w, eol: a.eol}
	ev := func(name, data string) bool { return s.send("event: " + name + "\ndata: " + data + "\n\n") }
	if !ev("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_%s","type":"message","role":"assistant","content":[],"model":"up-%s","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":10,"cache_read_input_tokens":100,"output_tokens":1}}}`, u.name, u.name)) ||
		!ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`) ||
		!ev("ping", `{"type": "ping"}`) {
		return
	}
	if !wait(r, a.beforeText, a.slowFirst) {
		return
	}
	if a.bareEvent != "" && !s.send("event: "+a.bareEvent+"\n\n") {
		return
	}
	for i, c := range a.chunks {
		if i > 0 && a.gap > 0 && !wait(r, nil, a.gap) {
			return
		}
		for range a.malformed {
			if !s.send("event: content_block_delta\ndata: {\"index\": oops not json\n\n") {
				return
			}
		}
		text, _ := json.Marshal(c)
		if !ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+string(text)+`}}`) {
			return
		}
	}
	if !wait(r, a.afterText, 0) {
		return
	}
	finish := a.finish
	if a.refusal != "" {
		finish = "refusal"
	}
	switch {
	case a.cut:
		s.cut()
		return
	case a.noFinish:
		return
	case a.errorEvent != "":
		ev("error", `{"type":"error","error":{"type":"overloaded_error","message":"`+a.errorEvent+`"}}`)
		return
	}
	if finish == "" {
		finish = "end_turn"
	}
	_ = ev("content_block_stop", `{"type":"content_block_stop","index":0}`) &&
		ev("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, finish, len(a.chunks))) &&
		ev("message_stop", `{"type":"message_stop"}`)
}

// replay writes the recorded response testdata/wire/<name>: its status,
// headers, and its body or its events (each event's name and its data on
// one line, flushed one by one; delays, comments and framing variants are
// the provider adapters' tests' business, not used here).
func replay(w http.ResponseWriter, r *http.Request, name string) {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "wire", name))
	if err != nil {
		panic(err)
	}
	var tr struct {
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
		Events  []struct {
			Event string          `json:"event"`
			Data  json.RawMessage `json:"data"`
		} `json:"events"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		panic(fmt.Sprintf("%s: %v", name, err))
	}
	for k, v := range tr.Headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(cmp.Or(tr.Status, http.StatusOK))
	if tr.Body != "" {
		_, _ = io.WriteString(w, tr.Body)
		return
	}
	s := sse{w: w}
	for _, e := range tr.Events {
		var line string
		if json.Unmarshal(e.Data, &line) != nil { // an object: compacted on one line
			var buf bytes.Buffer
			_ = json.Compact(&buf, e.Data)
			line = buf.String()
		}
		ev := "data: " + line + "\n\n"
		if e.Event != "" {
			ev = "event: " + e.Event + "\n" + ev
		}
		if !s.send(ev) || r.Context().Err() != nil {
			return
		}
	}
}
