package adapter

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// JSONError checks a successful answer to a streaming call that is not an
// event stream but JSON (Content-Type application/json or +json): some
// OpenAI-compatible servers answer a stream they cannot serve with a 200
// and an error object, which an event-stream reader sees no event in and
// reports as ErrTruncated, losing the server's message. JSONError reads
// the body (at most MaxBody) and, when it is an error object, either
// OpenAI's {"error":{…}} or Anthropic's {"type":"error","error":{…}},
// returns its ProviderError (see BodyError). Otherwise it returns nil and
// leaves the body to be read as it was: what it read is put back in front
// of the rest. Any other Content-Type costs one header lookup.
//
// The body must be the one NormalizeSSE made, not read yet (its readers,
// ours or the SDK's decoder, have not started): a body of another kind is
// left alone, as its bytes could not be put back.
func JSONError(provider string, resp *http.Response) error {
	if resp == nil || resp.Body == nil || !isJSON(resp.Header.Get("Content-Type")) {
		return nil
	}
	b, ok := resp.Body.(*sseBody)
	if !ok || b.started {
		return nil
	}
	head, err := io.ReadAll(io.LimitReader(b.rc, MaxBody))
	if e := BodyError(provider, head); e != nil {
		e.Header = resp.Header
		return e
	}
	// Not an error object: the stream reads on as before, from the start.
	rest := io.Reader(b.rc)
	if err != nil {
		rest = errReader{err}
	}
	b.rc = &prefixed{Reader: io.MultiReader(bytes.NewReader(head), rest), c: b.rc}
	b.lr.Src = b.rc
	return nil
}

// BodyError returns the error of a JSON error object a provider sent with
// a 200 in place of an event stream, nil when body is not one. Its message,
// type and code are the provider's; Status is 0, as for an error event,
// since the HTTP status said nothing about it. It is Retryable, and of the
// class its type names when that is ClassOverloaded or ClassRateLimit,
// else ClassServer: the server broke the stream it accepted, which a
// fail-over rule must still see as the provider's fault (never the
// request's, as a 4xx would be).
func BodyError(provider string, body []byte) *driver.ProviderError {
	body = bytes.TrimSpace(bytes.TrimPrefix(body, bom))
	if len(body) == 0 || body[0] != '{' {
		return nil
	}
	var v struct {
		Type  string          `json:"type"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &v) != nil || len(v.Error) == 0 {
		return nil
	}
	var e struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	var msg string
	switch {
	case json.Unmarshal(v.Error, &msg) == nil: // {"error":"…"}
	case json.Unmarshal(v.Error, &e) == nil:
		msg = e.Message
	default:
		return nil // "error": null, a number…
	}
	code := RawCode(e.Code)
	if msg == "" && e.Type == "" && code == "" {
		return nil
	}
	// An error event's error, but always retryable and never the request's
	// class: the stream was accepted, so its breaking is the provider's.
	pe := EventError(provider, e.Type, code, msg, body, ErrJSONBody)
	if pe.Class != abi.ClassOverloaded && pe.Class != abi.ClassRateLimit {
		pe.Class = abi.ClassServer
	}
	pe.Retryable = true
	return pe
}

// ErrJSONBody is the cause of a BodyError: a stream answered with a JSON
// error object.
var ErrJSONBody = errors.New("the provider answered the stream with a JSON error object")

// RawCode is an error code as a string: a JSON string's value, a number's
// text, "" for null or none.
func RawCode(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if t := strings.TrimSpace(string(raw)); t != "null" {
		return t
	}
	return ""
}

// isJSON reports whether a Content-Type is JSON: application/json, or a
// +json type (application/problem+json). It allocates nothing (every
// stream's open asks it; mime.ParseMediaType would allocate).
func isJSON(ct string) bool {
	base, _, _ := strings.Cut(ct, ";")
	base = strings.TrimSpace(base)
	const suffix = "+json"
	return strings.EqualFold(base, "application/json") ||
		len(base) > len(suffix) && strings.EqualFold(base[len(base)-len(suffix):], suffix)
}

// prefixed reads what JSONError read, then the rest; Close closes the body.
type prefixed struct {
	io.Reader
	c io.Closer
}

func (p *prefixed) Close() error { return p.c.Close() }

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
