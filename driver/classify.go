package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// defaultRetryAfterCap is the longest Retry-After the driver honours unless
// WithRetryAfterCap says otherwise.
const defaultRetryAfterCap = 60 * time.Second

// classify fills a's error fields (Class, Status, ErrorName, Message,
// RetryAfter, Deadline, Retryable, Err) from err. now is used to resolve a
// Retry-After given as an HTTP date; retryAfterCap caps it.
//
// Order matters: the driver's own deadline first (it is the most precise
// statement of what happened), then typed errors of the pipeline, then the
// provider's error, then context and network errors, then the message.
func classify(err error, a *abi.Attempt, now time.Time, retryAfterCap time.Duration) {
	a.Err = err
	a.RetryAfter = -1
	if err == nil {
		a.Class = abi.ClassNone
		return
	}
	a.Message = err.Error()
	a.ErrorName = typeName(err)

	var de *DeadlineError
	var re *abi.RefusalError
	var te *abi.TransformError
	var pe *ProviderError
	switch {
	case errors.As(err, &de):
		a.Class, a.Deadline, a.ErrorName = abi.ClassTimeout, de.Deadline, "DeadlineError"
	case errors.As(err, &re):
		a.Class, a.ErrorName = abi.ClassRefusal, "RefusalError"
	case errors.As(err, &te):
		a.Class, a.ErrorName = te.Class, "TransformError"
		if a.Class == abi.ClassNone {
			a.Class = abi.ClassTransform
		}
	case errors.As(err, &pe):
		a.Status, a.Retryable = pe.Status, pe.Retryable
		a.ErrorName = "ProviderError"
		if pe.Err != nil {
			a.ErrorName = typeName(pe.Err)
		}
		a.RetryAfter = retryAfter(pe.Header, now, retryAfterCap)
		a.Class = pe.Class
		if a.Class == abi.ClassNone {
			a.Class = classifyProvider(pe)
		}
	case errors.Is(err, context.Canceled):
		a.Class = abi.ClassCanceled
	case errors.Is(err, context.DeadlineExceeded):
		a.Class = abi.ClassTimeout
	default:
		a.Class = classifyOther(err)
	}
}

// typeName is the Go type of err, such as "*url.Error".
func typeName(err error) string { return fmt.Sprintf("%T", err) }

func classifyProvider(pe *ProviderError) abi.ErrorClass {
	if c := classifyText(pe.Type + " " + pe.Message); c != abi.ClassUnknown {
		// The provider's own words are more precise than a status: a 400
		// "context_length_exceeded" or an in-stream "overloaded_error".
		return c
	}
	switch s := pe.Status; {
	case s == http.StatusTooManyRequests:
		return abi.ClassRateLimit
	case s == 529 || s == http.StatusServiceUnavailable:
		return abi.ClassOverloaded
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		return abi.ClassAuth
	case s == http.StatusRequestTimeout || s == http.StatusGatewayTimeout:
		return abi.ClassTimeout
	case s >= 500:
		return abi.ClassServer
	case s >= 400:
		return abi.ClassClient
	}
	return abi.ClassUnknown
}

func classifyOther(err error) abi.ErrorClass {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return abi.ClassTimeout
	}
	var op *net.OpError
	var dns *net.DNSError
	if errors.As(err, &op) || errors.As(err, &dns) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return abi.ClassNetwork
	}
	return classifyText(err.Error())
}

// classifyText recognises the few failures providers only report in words.
func classifyText(s string) abi.ErrorClass {
	s = strings.ToLower(s)
	switch {
	case containsAny(s, "context length", "context_length", "context window", "prompt is too long",
		"maximum context", "too many tokens"):
		return abi.ClassContextLength
	case containsAny(s, "content filter", "content_filter", "content management policy", "content_policy"):
		return abi.ClassContentFilter
	case containsAny(s, "overloaded"):
		return abi.ClassOverloaded
	case containsAny(s, "rate limit", "rate_limit", "too many requests"):
		return abi.ClassRateLimit
	}
	return abi.ClassUnknown
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// RetryAfter reads the wait a server asked for, as the driver does before
// it retries: retry-after-ms (or x-ms-retry-after-ms) in milliseconds, else
// Retry-After in seconds or as an HTTP date. Numbers are non-negative
// decimals ("2", "0.5"). It returns -1 when there is none or it does not
// parse (a negative number, "inf", hex, garbage), and never more than
// limit: a wait too long to represent (1e9 s, 1e12 ms, a 400-digit number,
// a date centuries away) is capped, not dropped, since a server that asks
// for a very long wait wants at least the longest one the caller allows.
// ms reports whether the wait came from a milliseconds header. A proxy
// that passes a server's wait on (the gateway) reads it here, so that it
// tells its client what the driver itself would have honoured.
func RetryAfter(h http.Header, now time.Time, limit time.Duration) (d time.Duration, ms bool) {
	if h == nil {
		return -1, false
	}
	for _, k := range [...]string{"Retry-After-Ms", "X-Ms-Retry-After-Ms"} {
		if d := waitFor(h.Get(k), time.Millisecond, limit); d >= 0 {
			return d, true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if d := waitFor(v, time.Second, limit); d >= 0 || v == "" {
		return d, false
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), limit), false // Sub saturates far dates
	}
	return -1, false
}

// retryAfter is RetryAfter's wait alone.
func retryAfter(h http.Header, now time.Time, limit time.Duration) time.Duration {
	d, _ := RetryAfter(h, now, limit)
	return d
}

// waitFor parses v as a non-negative decimal count of unit, capped at
// limit; -1 when v is not such a number.
func waitFor(v string, unit, limit time.Duration) time.Duration {
	v = strings.TrimSpace(v)
	if !isDecimal(v) {
		return -1
	}
	// Digits only, so the one error left is ErrRange, whose +Inf caps.
	n, _ := strconv.ParseFloat(v, 64)
	if f := n * float64(unit); f < float64(limit) {
		return time.Duration(f)
	}
	return limit
}

// isDecimal reports whether v is digits with an optional fraction: "12",
// "0.5". ParseFloat alone would also take "-1", "inf", "NaN" and "0x1p4".
func isDecimal(v string) bool {
	intPart, frac, dot := strings.Cut(v, ".")
	return allDigits(intPart) && (!dot || allDigits(frac))
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
