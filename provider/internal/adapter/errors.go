// Package adapter holds what the provider adapters share: the mapping of
// provider errors to *driver.ProviderError and the pull-driven stream that
// turns SDK events into parts.
package adapter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// MaxBody caps the response body kept in a ProviderError.
const MaxBody = 64 << 10

// ReadBody reads (up to MaxBody of) a response body the SDK buffered, and
// puts it back for whoever dumps the response later.
func ReadBody(r *http.Response) []byte {
	if r.Body == nil {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(r.Body, MaxBody))
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b
}

// HTTPError builds the error of a failed HTTP response. typ and code are the
// provider's error type and code ("rate_limit_error", "context_length_exceeded"),
// msg its message, sdk the SDK's own error.
func HTTPError(provider string, status int, header http.Header, body []byte, typ, code, msg string, sdk error) *driver.ProviderError {
	if len(body) > MaxBody {
		body = body[:MaxBody]
	}
	if typ == "" {
		typ = code
	}
	e := &driver.ProviderError{
		Provider:  provider,
		Status:    status,
		Type:      typ,
		Message:   msg,
		Header:    header,
		Body:      body,
		Retryable: driver.DefaultRetryable(status),
		Class:     Classify(status, typ, code, msg),
		Err:       sdk,
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	// Both providers send x-should-retry to override the status's verdict.
	switch strings.ToLower(header.Get("x-should-retry")) {
	case "true":
		e.Retryable = true
	case "false":
		e.Retryable = false
	}
	if code == "insufficient_quota" { // a 429 that waiting does not fix
		e.Retryable = false
	}
	return e
}

// EventError builds the error of an error event inside a stream: Status is
// 0 and the class comes from the provider's error type alone. An event
// with no error type or code (no data, data that is not JSON, an error
// object with a message only) is a retryable ClassServer fault, with
// [EmptyErrorEvent] as its message when it has none: the server broke the
// stream, and an unclassified error would slip past every class-based rule.
func EventError(provider, typ, code, msg string, raw []byte, sdk error) *driver.ProviderError {
	if len(raw) > MaxBody {
		raw = raw[:MaxBody]
	}
	if typ == "" {
		typ = code
	}
	c := Classify(0, typ, code, msg)
	if typ == "" {
		c = abi.ClassServer
	}
	if msg == "" {
		msg = EmptyErrorEvent
	}
	return &driver.ProviderError{
		Provider:  provider,
		Type:      typ,
		Message:   msg,
		Body:      raw,
		Retryable: c == abi.ClassOverloaded || c == abi.ClassServer || c == abi.ClassRateLimit,
		Class:     c,
		Err:       sdk,
	}
}

// EmptyErrorEvent is the message of an error event that carried no error.
const EmptyErrorEvent = "the provider sent an error event with no error type or message"

// Classify maps an HTTP status (0 for an in-stream error) and the
// provider's error type, code and message to an error class. The type and
// code win over the status: a 400 "context_length_exceeded" is
// ClassContextLength, not ClassClient.
func Classify(status int, typ, code, msg string) abi.ErrorClass {
	for _, s := range [...]string{code, typ} {
		switch s {
		case "context_length_exceeded", "string_above_max_length":
			return abi.ClassContextLength
		case "content_filter", "content_policy_violation":
			return abi.ClassContentFilter
		case "overloaded_error", "overloaded":
			return abi.ClassOverloaded
		case "rate_limit_error", "rate_limit_exceeded", "insufficient_quota":
			return abi.ClassRateLimit
		case "authentication_error", "permission_error", "invalid_api_key":
			return abi.ClassAuth
		}
	}
	if typ == "invalid_request_error" && strings.Contains(strings.ToLower(msg), "prompt is too long") {
		return abi.ClassContextLength // Anthropic's wording; it has no code for it
	}
	switch {
	case status == http.StatusTooManyRequests:
		return abi.ClassRateLimit
	case status == http.StatusServiceUnavailable || status == 529:
		return abi.ClassOverloaded
	case status >= 500:
		return abi.ClassServer
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return abi.ClassAuth
	case status >= 400:
		return abi.ClassClient
	}
	switch typ {
	case "api_error", "server_error":
		return abi.ClassServer
	}
	if strings.HasPrefix(typ, "invalid_") || strings.HasPrefix(code, "invalid_") {
		// In a stream: invalid_request_error, or a failed response's
		// invalid_prompt, invalid_image…: the request's fault.
		return abi.ClassClient
	}
	return abi.ClassUnknown
}

// ErrTruncated is the cause of a stream that ended (cleanly, at the TCP
// level) before the provider said it was finished.
var ErrTruncated = errors.New("stream ended before the provider finished it")

// TransportError turns an error that is not the provider's (a context
// error, a cut connection, a truncated stream) into what the driver expects:
// the context's error when ctx is done, net.ErrClosed after Close, and
// otherwise a ProviderError of class ClassNetwork, Retryable, that wraps the
// original.
func TransportError(ctx context.Context, provider string, closed bool, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return CtxError(ctx)
	}
	if closed {
		return net.ErrClosed
	}
	var pe *driver.ProviderError
	if errors.As(err, &pe) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	msg := "stream interrupted: " + err.Error()
	if errors.Is(err, io.EOF) || errors.Is(err, ErrTruncated) {
		err = ErrTruncated
		msg = err.Error()
	}
	return &driver.ProviderError{
		Provider:  provider,
		Message:   msg,
		Retryable: true,
		Class:     abi.ClassNetwork,
		Err:       err,
	}
}

// CtxError returns ctx's error, joined with its cause when the cause says
// more (a driver deadline names itself in the cause), so that errors.Is
// matches both.
func CtxError(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return &ctxErr{err: err, cause: cause}
	}
	return err
}

type ctxErr struct{ err, cause error }

func (e *ctxErr) Error() string   { return e.err.Error() + ": " + e.cause.Error() }
func (e *ctxErr) Unwrap() []error { return []error{e.err, e.cause} }

// Refusal is the error of a provider-declared refusal that came before any
// content: the driver can still fail over. It wraps an *abi.RefusalError so
// that one condition (errors.As RefusalError, or ClassRefusal) covers both
// declared and natural-language refusals.
func Refusal(provider, raw, text string) *driver.ProviderError {
	if text == "" {
		text = "the model refused to answer"
	}
	return &driver.ProviderError{
		Provider: provider,
		Type:     "refusal",
		Message:  text,
		Class:    abi.ClassRefusal,
		Err:      &abi.RefusalError{Transform: provider, Phrase: raw, Text: text},
	}
}

// What a stream may hold on the provider's behalf. A provider (or whatever
// answers at its URL) that streams without end cannot make an adapter grow
// without end: past these, the stream fails with a LimitError.
const (
	// MaxHeld caps the bytes a stream accumulates across its life: the
	// input of tool calls (kept until each call completes) and a refusal
	// held for a possible fail-over. 4 MiB: eight times the longest output
	// a model writes today (128k tokens, about 512 KiB).
	MaxHeld = 4 << 20
	// MaxOpen caps the blocks and tool calls open at once in a stream.
	MaxOpen = 1024
)

// LimitType is the ProviderError.Type of a stream that broke MaxHeld or
// MaxOpen.
const LimitType = "adapter_limit_exceeded"

// LimitError is the error of a stream that broke MaxHeld or MaxOpen: class
// ClassServer (the provider misbehaved), not retryable (it would again),
// so a fail-over rule can still move to another model.
func LimitError(provider, what string, limit int) *driver.ProviderError {
	return &driver.ProviderError{
		Provider: provider,
		Type:     LimitType,
		Message:  fmt.Sprintf("the stream exceeded the adapter's limit of %d %s", limit, what),
		Class:    abi.ClassServer,
	}
}

// Held counts the bytes a stream has accumulated against MaxHeld.
type Held struct{ n int }

// Add counts n more bytes; it returns a LimitError once the total passes
// MaxHeld.
func (h *Held) Add(provider string, n int) error {
	h.n += n
	if h.n > MaxHeld {
		return LimitError(provider, "bytes of tool input and held refusal", MaxHeld)
	}
	return nil
}
