package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// writeError writes an OpenAI-style error answer.
func writeError(w http.ResponseWriter, status int, typ, code, msg string, _ error) {
	writeErrorParam(w, status, typ, code, msg, "")
}

func writeErrorParam(w http.ResponseWriter, status int, typ, code, msg, param string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(appendErrorJSON(nil, typ, code, msg, param), '\n'))
}

func appendErrorJSON(b []byte, typ, code, msg, param string) []byte {
	b = append(b, `{"error":{"message":`...)
	b = appendJSONString(b, msg)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"param":`...)
	if param == "" {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, param)
	}
	b = append(b, `,"code":`...)
	if code == "" {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, code)
	}
	return append(b, "}}"...)
}

// lastProviderError returns the provider error of the request's last
// attempt, if it was one.
func lastProviderError(err error) *driver.ProviderError {
	var re *driver.RetryError
	if errors.As(err, &re) {
		if err = re.Last(); err == nil {
			return nil
		}
	}
	var pe *driver.ProviderError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// lastErr returns the error of a failed request's last attempt (err when
// it is not a *driver.RetryError).
func lastErr(err error) error {
	var re *driver.RetryError
	if errors.As(err, &re) && re.Last() != nil {
		return re.Last()
	}
	return err
}

// codePluginFailed is the error code of a request a fail-closed plugin
// failed (before commit or in band after it), and its access log outcome.
const codePluginFailed = "plugin_failed"

// failure is the answer to a request that failed before commit.
type failure struct {
	apiError
	raw []byte // the upstream's own error body (a 4xx), passed through when the door can
	// retryAfter is a 429's Retry-After: the upstream's wait (see
	// upstreamRetryAfter) rounded up to whole seconds and bounded (see
	// minRetryAfter), the gateway's default when the upstream gave none.
	retryAfter string
	// retryAfterMs is the same wait in milliseconds, capped but not
	// raised, when the upstream sent Retry-After-Ms (OpenAI sends it beside
	// Retry-After and its SDKs prefer it, finer than whole seconds).
	retryAfterMs string
}

// classify maps a request's final error to its HTTP answer. An upstream's
// rejection of the request itself (a 4xx) is returned with the upstream's
// status and, when it is in the door's error shape, its body; a rate
// limit keeps its Retry-After, bounded; the upstreams' own auth failures, server
// errors, cut connections and refusals are the gateway's 502 (the
// client's credentials are not in question); the policy's deadlines are
// 504.
func classify(err error) failure {
	pe := lastProviderError(err)
	var de *driver.DeadlineError
	switch {
	case pe != nil && (pe.Status == http.StatusUnauthorized || pe.Status == http.StatusForbidden):
		return failure{apiError: apiError{status: http.StatusBadGateway, class: "upstream_auth", typ: "upstream_error", code: "upstream_auth",
			msg: "retryhost gateway: the upstream rejected the gateway's credentials: " + oneLine(pe.Error())}}
	case pe != nil && pe.Status >= 400 && pe.Status < 500:
		f := failure{apiError: apiError{status: pe.Status, class: pe.Class.String(), typ: "invalid_request_error", code: pe.Type, msg: pe.Message},
			raw: bytes.TrimSpace(pe.Body)}
		if pe.Status == http.StatusTooManyRequests {
			d, ms := upstreamRetryAfter(pe.Header, time.Now())
			f.retryAfter = retryAfterHeader(d)
			if ms {
				f.retryAfterMs = retryAfterMsHeader(d)
			}
			f.typ = "rate_limit_error"
		}
		return f
	case errors.Is(lastErr(err), driver.ErrAnswerTooLarge):
		return failure{apiError: apiError{status: http.StatusBadGateway, class: "answer_too_large", typ: "upstream_error", code: "answer_too_large",
			msg: "retryhost gateway: " + oneLine(err.Error())}}
	case errors.As(err, &de):
		return failure{apiError: apiError{status: http.StatusGatewayTimeout, class: "timeout", typ: "timeout", code: de.Deadline.String(),
			msg: "retryhost gateway: " + oneLine(err.Error())}}
	case pe != nil && pe.Class == abi.ClassRefusal:
		return failure{apiError: apiError{status: http.StatusBadGateway, class: "refusal", typ: "upstream_error", code: "refusal",
			msg: "retryhost gateway: every model refused: " + oneLine(err.Error())}}
	}
	class := "unknown"
	var re *driver.RetryError
	var te *abi.TransformError
	switch {
	case pe != nil:
		class = pe.Class.String()
	case errors.As(err, &re) && len(re.Attempts) > 0 && re.Attempts[len(re.Attempts)-1].Class != abi.ClassNone:
		// No upstream error (a fail-closed plugin, a transform's verdict):
		// the class the driver gave the last attempt, as attempts_total has it.
		class = re.Attempts[len(re.Attempts)-1].Class.String()
	case errors.As(err, &te) && te.Class != abi.ClassNone:
		class = te.Class.String()
	}
	if class == abi.ClassPlugin.String() {
		// The gateway's own plugin failed (a fail-closed trap, timeout …),
		// not an upstream: said so, so that no one looks at the upstreams.
		return failure{apiError: apiError{status: http.StatusBadGateway, class: class, typ: "server_error", code: codePluginFailed,
			msg: "retryhost gateway: " + oneLine(err.Error())}}
	}
	return failure{apiError: apiError{status: http.StatusBadGateway, class: class, typ: "upstream_error", code: "upstream_failed",
		msg: "retryhost gateway: " + oneLine(err.Error())}}
}

// pluginFailed reports whether a stream's err is a fail-closed plugin's
// failure (a transform's error of class plugin), not an upstream's.
func pluginFailed(err error) bool {
	var re *driver.RetryError
	var te *abi.TransformError
	switch {
	case errors.As(err, &re) && len(re.Attempts) > 0 && re.Attempts[len(re.Attempts)-1].Class != abi.ClassNone:
		return re.Attempts[len(re.Attempts)-1].Class == abi.ClassPlugin
	case errors.As(err, &te):
		return te.Class == abi.ClassPlugin
	}
	return false
}

// oneLine is an error's text as a client gets it: without the stack
// traces wazero appends to a plugin's trap ("wasm stack trace:" and its
// indented frames, the guest's internals, which say nothing to a client
// and grow with the guest's call depth) and on one line.
func oneLine(s string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	var b strings.Builder
	for line := range strings.SplitSeq(s, "\n") {
		if line == "wasm stack trace:" || strings.HasPrefix(line, "\t") || strings.TrimSpace(line) == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(line)
	}
	return b.String()
}

// body returns the failure's answer in d's format.
func (f *failure) body(d door) []byte {
	if len(f.raw) > 0 && d.passthrough(f.raw) {
		return f.raw
	}
	return d.appendError(nil, &f.apiError)
}

// isErrorObject reports whether b is a JSON object with an "error" object,
// the shape OpenAI clients parse, and not Anthropic's envelope of it (a
// "type" at the top level, which OpenAI's errors never have): an
// Anthropic upstream's error is re-encoded in the OpenAI shape rather
// than passed through.
func isErrorObject(b []byte) bool {
	var v struct {
		Type  json.RawMessage            `json:"type"`
		Error map[string]json.RawMessage `json:"error"`
	}
	return json.Valid(b) && json.Unmarshal(b, &v) == nil && v.Error != nil && v.Type == nil
}

// streamFailure is the in-band error that ends a committed stream which
// failed: no end marker follows it.
func streamFailure(ctx context.Context, err error) apiError {
	e := apiError{typ: "upstream_error", code: "stream_failed", msg: "retryhost gateway: the answer failed after it started: " + oneLine(err.Error())}
	if pe := lastProviderError(err); pe != nil {
		e.class = pe.Class.String()
	} else if pluginFailed(err) { // as classify says it before commit
		e.typ, e.code, e.class = "server_error", codePluginFailed, abi.ClassPlugin.String()
	}
	var de *driver.DeadlineError
	switch cause := context.Cause(ctx); {
	case cause != nil && errors.Is(cause, ErrShuttingDown):
		e.typ, e.code, e.msg = "server_error", "shutting_down", "retryhost gateway: shutting down; the answer is incomplete"
	case errors.As(err, &de):
		e.typ, e.code, e.class = "timeout", de.Deadline.String(), "timeout"
		e.msg = "retryhost gateway: the answer stalled (" + strconv.Quote(de.Error()) + "); it is incomplete"
	}
	return e
}
