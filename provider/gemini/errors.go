package gemini

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genai"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// apiError maps the API's error (google.rpc.Status: code, status,
// message, details) to a ProviderError. status, header and body are the
// HTTP response's when there was one (0, nil, nil for an error inside a
// stream). A RetryInfo detail's retryDelay becomes a Retry-After header
// (whole seconds, rounded up) when the response has none, so the driver
// waits as asked.
func apiError(prov string, status int, header http.Header, body []byte, ae genai.APIError) *driver.ProviderError {
	if status == 0 {
		status = ae.Code
	}
	if len(body) == 0 {
		body, _ = json.Marshal(map[string]any{"error": ae})
	}
	if d, ok := retryDelay(ae.Details); ok && header.Get("Retry-After") == "" {
		header = header.Clone()
		if header == nil {
			header = http.Header{}
		}
		header.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10))
	}
	pe := adapter.HTTPError(prov, status, header, body, ae.Status, "", ae.Message, ae)
	pe.Class = classify(status, ae.Status, ae.Message)
	switch pe.Class {
	case abi.ClassRateLimit, abi.ClassOverloaded, abi.ClassServer:
		pe.Retryable = true
	}
	return pe
}

// classify maps a google.rpc status to an error class: the status name
// wins over the HTTP status.
func classify(status int, name, msg string) abi.ErrorClass {
	switch name {
	case "RESOURCE_EXHAUSTED":
		return abi.ClassRateLimit
	case "UNAVAILABLE":
		return abi.ClassOverloaded
	case "INTERNAL", "UNKNOWN", "DEADLINE_EXCEEDED":
		return abi.ClassServer
	case "UNAUTHENTICATED", "PERMISSION_DENIED":
		return abi.ClassAuth
	case "INVALID_ARGUMENT", "FAILED_PRECONDITION", "OUT_OF_RANGE":
		m := strings.ToLower(msg)
		if strings.Contains(m, "token count") || strings.Contains(m, "maximum number of tokens") || strings.Contains(m, "too long") {
			return abi.ClassContextLength
		}
		return abi.ClassClient
	case "NOT_FOUND":
		return abi.ClassClient
	}
	return adapter.Classify(status, name, "", msg)
}

// retryDelay reads the google.rpc.RetryInfo detail: {"@type":
// "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "13s"}.
func retryDelay(details []map[string]any) (time.Duration, bool) {
	for _, d := range details {
		if t, _ := d["@type"].(string); !strings.HasSuffix(t, "google.rpc.RetryInfo") {
			continue
		}
		s, _ := d["retryDelay"].(string)
		if v, err := time.ParseDuration(s); err == nil && v >= 0 {
			return v, true
		}
	}
	return 0, false
}

// blocked is the error of an answer the API withheld before any content:
// a prompt blocked (promptFeedback.blockReason) or a candidate that
// finished for safety, recitation, a blocklist or prohibited content. It is
// classed ClassRefusal and wraps an *abi.RefusalError, as a declared
// refusal is, so the rules that fail a refusal over to another model
// cover it.
func blocked(prov, reason, msg string) *driver.ProviderError {
	text := "the model's answer was blocked: " + reason
	if msg != "" {
		text += ": " + msg
	}
	pe := adapter.Refusal(prov, reason, text)
	pe.Type = strings.ToLower(reason)
	return pe
}

// streamError maps an error met inside a stream: the API's (an error
// object in place of a chunk) or the transport's.
func streamError(prov string, err error) error {
	var ae genai.APIError
	if asAPIError(err, &ae) {
		raw, _ := json.Marshal(map[string]any{"error": ae})
		pe := adapter.EventError(prov, ae.Status, "", ae.Message, raw, ae)
		if ae.Status != "" {
			pe.Class = classify(0, ae.Status, ae.Message)
			pe.Retryable = pe.Class == abi.ClassRateLimit || pe.Class == abi.ClassOverloaded || pe.Class == abi.ClassServer
		}
		return pe
	}
	return err
}

func asAPIError(err error, ae *genai.APIError) bool {
	v, ok := err.(genai.APIError)
	if ok {
		*ae = v
	}
	return ok
}
