package gateway

import (
	"net/http"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// A door is one wire format the gateway serves over the same machinery
// (admission, routing, the commit gate, relaying, access logs and
// metrics): OpenAI's Chat Completions (chatDoor) or Anthropic's Messages
// (messagesDoor). It only parses requests and writes answers and errors.
type door interface {
	// newID returns the id of one answer (and of its access-log record).
	newID() string
	// parse reads a request (its body read already); a client mistake is
	// a *requestError.
	parse(body []byte, h http.Header, gen *generation) (*chatRequest, error)
	// encoder returns the writer of one committed answer.
	encoder(id, model string, cr *chatRequest) encoder
	// appendError appends e as this format's error object.
	appendError(b []byte, e *apiError) []byte
	// passthrough reports whether an upstream's error body is already in
	// this format's error shape (so that it goes to the client as is).
	passthrough(body []byte) bool
}

// An encoder writes one committed answer in a door's format: a stream's
// events, or the whole answer at once.
type encoder interface {
	// raw reads a raw provider chunk of a stream (KindRaw: what the driver
	// does not carry) and appends the events it maps to (often none: most
	// of it goes out with the parts mapped from it).
	raw(b []byte, p *abi.Part) []byte
	// appendPart appends the events p maps to (often none).
	appendPart(b []byte, p *abi.Part) []byte
	// appendEnd appends what ends a complete stream (the usage it carries
	// when the format has a place for it, and the end marker).
	appendEnd(b []byte, u *abi.Usage) []byte
	// appendErrorEvent appends the in-band event that ends a stream which
	// failed after commit; no end marker follows it.
	appendErrorEvent(b []byte, e *apiError) []byte
	// collect takes one part of a non-streaming request's answer, raw
	// chunks included.
	collect(p *abi.Part)
	// appendAnswer appends the whole answer collected.
	appendAnswer(b []byte) []byte
}

// apiError is an error answer, in OpenAI's vocabulary (typ, code, param);
// the Messages door maps it to Anthropic's error types.
type apiError struct {
	status int // the HTTP status; 0 for an in-band error event
	typ    string
	code   string
	msg    string
	param  string
	class  string // the driver's error class of an upstream failure ("overloaded", "rate_limit"…), if any
}

// writeErr writes e as d's error answer; a 429 or 503 without a
// Retry-After set gets the gateway's default one (see minRetryAfter).
func writeErr(w http.ResponseWriter, d door, e apiError) {
	setRetryAfter(w.Header(), e.status)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_, _ = w.Write(append(d.appendError(nil, &e), '\n'))
}

// setRequestID names an answer by its request id v (one value): in
// X-Request-Id on every door, and in request-id on Anthropic's, where
// Anthropic's API sends it and its SDKs read it (a response's
// _request_id, an error's requestID).
func setRequestID(h http.Header, d door, v []string) {
	h["X-Request-Id"] = v
	if _, ok := d.(messagesDoor); ok {
		h["Request-Id"] = v
	}
}

// chatDoor is OpenAI's Chat Completions: POST /v1/chat/completions.
type chatDoor struct{}

func (chatDoor) newID() string { return newID("chatcmpl-rh") }

func (chatDoor) parse(body []byte, _ http.Header, gen *generation) (*chatRequest, error) {
	return parseChat(body, gen.upstreams)
}

func (chatDoor) encoder(id, model string, cr *chatRequest) encoder {
	return &chunkEncoder{id: id, model: model, created: time.Now().Unix(), includeUsage: cr.includeUsage}
}

func (chatDoor) appendError(b []byte, e *apiError) []byte {
	return appendErrorJSON(b, e.typ, e.code, e.msg, e.param)
}

func (chatDoor) passthrough(body []byte) bool { return isErrorObject(body) }

// appendEnd appends the usage chunk when the client asked for it
// (stream_options.include_usage), then data: [DONE].
func (e *chunkEncoder) appendEnd(b []byte, u *abi.Usage) []byte {
	if e.includeUsage {
		b = e.appendUsage(b, u)
	}
	return append(b, "data: [DONE]\n\n"...)
}

func (e *chunkEncoder) raw(b []byte, p *abi.Part) []byte {
	e.up.raw(p)
	return b
}

func (e *chunkEncoder) collect(p *abi.Part) {
	if p.Kind == abi.KindRaw {
		e.up.raw(p)
		return
	}
	if p.Kind == abi.KindTextDelta && p.Delta != "" {
		e.up.take(p) // the delta's logprobs, for the whole answer's
	}
	e.acc.add(p)
}

func (e *chunkEncoder) appendAnswer(b []byte) []byte { return e.appendCompletion(b, &e.acc) }

// appendErrorEvent appends data: {"error": {...}}.
func (e *chunkEncoder) appendErrorEvent(b []byte, ae *apiError) []byte {
	b = append(b, "data: "...)
	b = appendErrorJSON(b, ae.typ, ae.code, ae.msg, ae.param)
	return append(b, "\n\n"...)
}
