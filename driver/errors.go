package driver

import (
	"fmt"
	"net/http"

	"github.com/retryhost/retryhost/abi"
)

// ProviderError is an error a model's provider reported: an HTTP error
// status, or an error event inside a stream. Adapters return it (wrapped or
// not) so that conditions can match status codes, headers and the
// provider's retryable flag without knowing the SDK.
type ProviderError struct {
	Provider string      // "openai", "anthropic", …
	Status   int         // HTTP status; 0 for an in-stream error event
	Type     string      // the provider's error type, such as "overloaded_error"
	Message  string      // the provider's message
	Header   http.Header // the response headers (Retry-After, retry-after-ms, …)
	Body     []byte      // the raw response body, possibly truncated
	// Retryable is the provider's (or adapter's) opinion: true for 408,
	// 409, 429 and 5xx by default.
	Retryable bool
	// Class is the adapter's classification; ClassNone lets the driver
	// derive it from Status and Type.
	Class abi.ErrorClass
	// Err is the SDK's own error, kept for errors.As.
	Err error
}

func (e *ProviderError) Error() string {
	switch {
	case e.Status != 0 && e.Type != "":
		return fmt.Sprintf("%s: HTTP %d %s: %s", e.Provider, e.Status, e.Type, e.Message)
	case e.Status != 0:
		return fmt.Sprintf("%s: HTTP %d: %s", e.Provider, e.Status, e.Message)
	case e.Type != "":
		return fmt.Sprintf("%s: %s: %s", e.Provider, e.Type, e.Message)
	default:
		return fmt.Sprintf("%s: %s", e.Provider, e.Message)
	}
}

// Unwrap returns the SDK's error.
func (e *ProviderError) Unwrap() error { return e.Err }

// DefaultRetryable reports whether an HTTP status is worth retrying by
// default: 408, 409, 429 and every 5xx.
func DefaultRetryable(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
}
