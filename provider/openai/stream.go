package openai

import (
	"bytes"
	"io"
	"slices"
	"strconv"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// source turns chat.completion.chunk events into parts (adapter.Source).
type source struct {
	provider string
	// st is the SDK's stream, read when ev is nil; with ev, the SDK's
	// stream is dropped once opened (a held stream would keep its chunk
	// value and its line scanner) and ev's body is closed instead.
	st     *ssestream.Stream[oai.ChatCompletionChunk]
	raw    bool // emit each chunk as a KindRaw part too (WithRawChunks)
	fields bool // emit the chunks' ChunkFields as KindRaw parts (WithChunkFields)
	// What newFields last let through, and whether a chunk had logprobs.
	fieldsSent     bool
	lastFP, lastST string
	logprobs       bool
	// ev reads the events itself (nil with WithRawChunks, which needs the
	// SDK's chunk type): lean-decoded, the SDK's decoding for the rest.
	ev  *events
	cur chunk

	metaSent      bool
	textOpen      bool
	reasoningOpen bool
	refusalOpen   bool
	content       bool // a content part (text, reasoning, tool) went out
	refusal       strings.Builder
	tools         map[int64]*toolCall // made on the first tool call
	order         []int64
	held          adapter.Held // tool input and refusal bytes, against MaxHeld

	finished bool
	reason   abi.FinishReason
	usage    abi.Usage
}

type toolCall struct {
	id, name string
	args     strings.Builder
}

// toolCallID is the id of the tool call at index: the upstream's, else
// "call_<index>", made unique among the ids used (taken) by suffixing the
// index. Downstream, parts name their tool call by id: two calls an
// upstream gave one id (or an empty id and an id "call_1") would be merged
// into one, its name and arguments run together, or one of them dropped.
func toolCallID(id string, index int64, taken func(string) bool) string {
	if id == "" {
		id = "call_" + strconv.FormatInt(index, 10)
	}
	for taken(id) {
		id += "_" + strconv.FormatInt(index, 10)
	}
	return id
}

func (s *source) Close() error {
	if s.ev != nil {
		return s.ev.body.Close()
	}
	return s.st.Close()
}

func (s *source) Next(q []abi.Part) ([]abi.Part, error) {
	if s.ev == nil {
		return s.nextSDK(q)
	}
	for len(q) == 0 {
		more, err := s.ev.next(&s.cur)
		if err != nil {
			return q, streamError(s.provider, err)
		}
		if !more {
			return s.end(q)
		}
		if q, err = s.chunk(q, &s.cur); err != nil {
			return q, err
		}
	}
	return q, nil
}

// nextSDK is Next over the SDK's stream (WithRawChunks). Not inlined: the
// SDK's chunk is large, and a held stream's goroutine should not carry its
// frame while it waits on the network.
//
//go:noinline
func (s *source) nextSDK(q []abi.Part) ([]abi.Part, error) {
	for len(q) == 0 {
		if !s.st.Next() {
			if err := s.st.Err(); err != nil {
				return q, streamError(s.provider, err)
			}
			return s.end(q)
		}
		var err error
		c := s.st.Current()
		if s.raw {
			q = append(q, abi.Part{Kind: abi.KindRaw, Raw: c})
		}
		s.cur.fromSDK(&c)
		q, err = s.chunk(q, &s.cur)
		if err != nil {
			return q, err
		}
	}
	return q, nil
}

// end handles the clean end of the SSE stream ([DONE] or EOF).
func (s *source) end(q []abi.Part) ([]abi.Part, error) {
	if s.refusal.Len() > 0 && !s.content && !s.refusalOpen {
		return q, adapter.Refusal(s.provider, s.reason.Raw, s.refusal.String())
	}
	if !s.finished {
		return q, adapter.ErrTruncated
	}
	return append(q, abi.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: s.reason, Usage: s.usage}}), io.EOF
}

// chunk maps one chunk of the stream to parts appended to q.
func (s *source) chunk(q []abi.Part, c *chunk) ([]abi.Part, error) {
	if s.fields {
		if f := chunkFields(c); s.newFields(&f) {
			q = append(q, abi.Part{Kind: abi.KindRaw, Raw: f})
		}
	}
	if !s.metaSent && (c.id != "" || c.model != "") {
		s.metaSent = true
		q = append(q, abi.Part{Kind: abi.KindResponseMeta, ID: c.id,
			Meta: &abi.ResponseMeta{ID: c.id, ModelID: c.model, Timestamp: unix(c.created)}})
	}
	if c.hasUsage {
		s.usage = c.usage
	}
	for i := range c.choices { // index 0 only: n > 1 is not part of the driver's model
		var err error
		if q, err = s.choice(q, &c.choices[i]); err != nil {
			return q, err
		}
	}
	return q, nil
}

// newFields reports whether a chunk's ChunkFields go out (WithChunkFields):
// the first chunk's, those whose system fingerprint or service tier
// differ from the last sent, and from the first chunk with logprobs on,
// every chunk's (a caller matches each delta to its chunk's text). The
// others would repeat what the caller has: a compatible server sends its
// fingerprint with every chunk.
func (s *source) newFields(f *ChunkFields) bool {
	s.logprobs = s.logprobs || f.Logprobs != ""
	if s.fieldsSent && !s.logprobs && f.SystemFingerprint == s.lastFP && f.ServiceTier == s.lastST {
		return false
	}
	s.fieldsSent, s.lastFP, s.lastST = true, f.SystemFingerprint, f.ServiceTier
	return true
}

// chunkFields are the chunk's fields a gateway forwards (WithChunkFields).
func chunkFields(c *chunk) ChunkFields {
	f := ChunkFields{SystemFingerprint: c.fingerprint, ServiceTier: c.tier}
	for i := range c.choices { // a later choice 0 (never sent) overrides what it has
		ch := &c.choices[i]
		f.Content, f.Refusal = ch.content, ch.refusal
		if ch.lp != "" {
			f.Logprobs = ch.lp
			if ch.lpContent != "" {
				f.LogprobsContent = ch.lpContent
			}
			if ch.lpRefusal != "" {
				f.LogprobsRefusal = ch.lpRefusal
			}
		}
	}
	return f
}

// choice maps a choice's deltas: reasoning, text, a refusal (held while no
// content has come, so that it can still fail over), tool calls, and its
// finish.
func (s *source) choice(q []abi.Part, d *choice) ([]abi.Part, error) {
	r := d.reasoning
	if s.refusal.Len() > 0 && (r != "" || d.content != "" || len(d.tools) > 0) {
		// Content after a held refusal: the refusal cannot fail over
		// any more; it goes out first, as text, in the order it came.
		q = s.flushRefusal(q)
	}
	if r != "" {
		if !s.reasoningOpen {
			s.reasoningOpen = true
			q = append(q, abi.Part{Kind: abi.KindReasoningStart, ID: reasoningID})
		}
		s.content = true
		q = append(q, abi.Part{Kind: abi.KindReasoningDelta, ID: reasoningID, Delta: r})
	}
	if d.content != "" {
		q = s.closeReasoning(q)
		if !s.textOpen {
			s.textOpen = true
			q = append(q, abi.Part{Kind: abi.KindTextStart, ID: textID})
		}
		s.content = true
		q = append(q, abi.Part{Kind: abi.KindTextDelta, ID: textID, Delta: d.content})
	}
	if d.refusal != "" {
		var err error
		if q, err = s.refusalDelta(q, d.refusal); err != nil {
			return q, err
		}
	}
	for j := range d.tools {
		var err error
		if q, err = s.toolDelta(q, &d.tools[j]); err != nil {
			return q, err
		}
	}
	if d.finish != "" && !s.finished {
		return s.finish(q, d.finish)
	}
	return q, nil
}

// refusalDelta delivers a refusal after content as text, or holds it.
func (s *source) refusalDelta(q []abi.Part, refusal string) ([]abi.Part, error) {
	if s.content || s.refusalOpen {
		// A refusal after content cannot be failed over any more:
		// deliver it as text and finish with ReasonRefusal.
		q = s.flushRefusal(q)
		q = append(q, abi.Part{Kind: abi.KindTextDelta, ID: refusalID, Delta: refusal})
	} else {
		if err := s.held.Add(s.provider, len(refusal)); err != nil {
			return q, err
		}
		s.refusal.WriteString(refusal)
	}
	return q, nil
}

// toolDelta opens a tool call at its first delta and adds its arguments.
func (s *source) toolDelta(q []abi.Part, tc *toolDelta) ([]abi.Part, error) {
	t, ok := s.tools[tc.index]
	if !ok {
		if len(s.tools) >= adapter.MaxOpen {
			return q, adapter.LimitError(s.provider, "tool calls", adapter.MaxOpen)
		}
		t = &toolCall{id: toolCallID(tc.id, tc.index, func(id string) bool {
			for _, o := range s.tools {
				if o.id == id {
					return true
				}
			}
			return false
		}), name: tc.name}
		if s.tools == nil {
			s.tools = map[int64]*toolCall{}
		}
		s.tools[tc.index] = t
		s.order = append(s.order, tc.index)
		q = s.closeReasoning(q)
		s.content = true
		q = append(q, abi.Part{Kind: abi.KindToolInputStart, ID: t.id, Tool: &abi.ToolInfo{Name: t.name}})
	}
	if a := tc.args; a != "" {
		if err := s.held.Add(s.provider, len(a)); err != nil {
			return q, err
		}
		t.args.WriteString(a)
		q = append(q, abi.Part{Kind: abi.KindToolInputDelta, ID: t.id, Delta: a})
	}
	return q, nil
}

// finish ends the answer at the first finish reason: a refusal before any
// content fails; otherwise every open block closes.
func (s *source) finish(q []abi.Part, reason string) ([]abi.Part, error) {
	s.finished = true
	s.reason = finishReason(reason)
	if s.refusal.Len() > 0 && !s.content {
		// Declared refusal before any content: fail now, the driver
		// can still switch models.
		return q, adapter.Refusal(s.provider, reason, s.refusal.String())
	}
	if s.refusal.Len() > 0 {
		q = s.flushRefusal(q) // held, then content came: text, never dropped
	}
	if s.refusalOpen {
		s.reason = abi.FinishReason{Unified: abi.ReasonRefusal, Raw: "refusal"}
	}
	q = s.closeAll(q)
	return q, nil
}

// flushRefusal opens the refusal text block, once, and delivers the
// refusal text held while no content had come.
func (s *source) flushRefusal(q []abi.Part) []abi.Part {
	if !s.refusalOpen {
		s.refusalOpen = true
		q = append(q, abi.Part{Kind: abi.KindTextStart, ID: refusalID})
	}
	if s.refusal.Len() > 0 {
		q = append(q, abi.Part{Kind: abi.KindTextDelta, ID: refusalID, Delta: s.refusal.String()})
		s.refusal.Reset()
	}
	return q
}

func (s *source) closeReasoning(q []abi.Part) []abi.Part {
	if s.reasoningOpen {
		s.reasoningOpen = false
		q = append(q, abi.Part{Kind: abi.KindReasoningEnd, ID: reasoningID})
	}
	return q
}

// closeAll ends every open block, then emits the complete tool calls.
func (s *source) closeAll(q []abi.Part) []abi.Part {
	q = s.closeReasoning(q)
	if s.textOpen {
		s.textOpen = false
		q = append(q, abi.Part{Kind: abi.KindTextEnd, ID: textID})
	}
	if s.refusalOpen {
		q = append(q, abi.Part{Kind: abi.KindTextEnd, ID: refusalID})
	}
	for _, idx := range slices.Sorted(slices.Values(s.order)) {
		t := s.tools[idx]
		q = append(q,
			abi.Part{Kind: abi.KindToolInputEnd, ID: t.id},
			abi.Part{Kind: abi.KindToolCall, ID: t.id, Tool: &abi.ToolInfo{Name: t.name, Input: orEmptyObject(t.args.String())}})
	}
	return q
}

// events reads a Chat Completions event stream as the SDK's
// ssestream.Stream does — the same line and field rules, the same end at
// a "[DONE]" data prefix, the same in-stream "error" — but decodes each
// chunk with decodeChunk, and hands only what that declines to the SDK's
// own per-event decoding (oneEvent), so the parts are the same either way
// while the common chunk costs no reflection and no per-field allocation.
// The body splits the events (adapter.EventBody): an event's data comes
// as one slice, most often of the body's read buffer, copied by no one.
type events struct {
	body io.ReadCloser
	src  adapter.EventBody // made at the first read
	// skip is the body's SkipMalformed, if it has one (the gateway's):
	// an event decodeChunk declines is skipped when it says so, before
	// the SDK could end the stream with it.
	skip interface{ SkipMalformed(data []byte) bool }
	done bool
	err  error
}

// next decodes the next chunk into c: false at the end of the stream
// ("[DONE]" or the body's end), or the error that ended it.
func (e *events) next(c *chunk) (bool, error) {
	if e.src == nil {
		e.src = adapter.Events(e.body)
		e.skip, _ = e.src.(interface{ SkipMalformed([]byte) bool })
	}
	for {
		if e.done || e.err != nil {
			return false, e.err
		}
		typ, data, err := e.src.ReadEvent()
		if err != nil {
			if e.done = true; err != io.EOF {
				e.err = err
			}
			return false, e.err
		}
		if len(data) == 0 {
			continue // a type and no data: the SDK's decoder drops it
		}
		if string(data) == "[DONE]\n" {
			e.done = true
			if r, ok := e.src.(adapter.Releaser); ok {
				r.Release() // data is not used again
			}
			return false, nil
		}
		thread := bytes.HasPrefix(typ, []byte("thread."))
		if !thread && decodeChunk(data, c) {
			return true, nil
		}
		if e.skip != nil && e.skip.SkipMalformed(data) {
			continue
		}
		if bytes.HasPrefix(data, []byte("[DONE]")) {
			e.done = true
			return false, nil
		}
		return e.sdk(string(typ), data, c)
	}
}

// sdk decodes an event by the SDK's own rules: its "error" member, its
// synthesised thread.* data, its lenient decoding. Not inlined, to keep
// the SDK's large chunk off the waiting frames.
//
//go:noinline
func (e *events) sdk(typ string, data []byte, c *chunk) (bool, error) {
	st := ssestream.NewStream[oai.ChatCompletionChunk](&oneEvent{ev: ssestream.Event{Type: typ, Data: data}}, nil)
	if st.Next() {
		sc := st.Current()
		c.fromSDK(&sc)
		return true, nil
	}
	e.err = st.Err()
	if e.err == nil {
		e.err = io.ErrUnexpectedEOF // not reached: one event, not [DONE]
	}
	return false, e.err
}

// oneEvent is an ssestream.Decoder of one event, for the SDK's per-event
// decoding.
type oneEvent struct {
	ev   ssestream.Event
	read bool
}

func (o *oneEvent) Next() bool             { r := !o.read; o.read = true; return r }
func (o *oneEvent) Event() ssestream.Event { return o.ev }
func (o *oneEvent) Close() error           { return nil }
func (o *oneEvent) Err() error             { return nil }
