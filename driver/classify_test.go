package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/stretchr/testify/require"
)

type sdkError struct{}

func (sdkError) Error() string { return "sdk says no" }

type timeoutNetErr struct{}

func (timeoutNetErr) Error() string   { return "i/o timeout" }
func (timeoutNetErr) Timeout() bool   { return true }
func (timeoutNetErr) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		err        error
		class      abi.ErrorClass
		status     int
		deadline   abi.Deadline
		retryAfter time.Duration
		errName    string
		retryable  bool
	}{
		{name: "nil is a result", err: nil, class: abi.ClassNone, retryAfter: -1},
		{name: "429", err: statusRetryAfter(429, "Retry-After", "3"), class: abi.ClassRateLimit, status: 429,
			retryAfter: 3 * time.Second, errName: "ProviderError", retryable: true},
		{name: "529 overloaded", err: status(529), class: abi.ClassOverloaded, status: 529, retryAfter: -1, errName: "ProviderError", retryable: true},
		{name: "503 overloaded", err: status(503), class: abi.ClassOverloaded, status: 503, retryAfter: -1, errName: "ProviderError", retryable: true},
		{name: "500 server", err: status(500), class: abi.ClassServer, status: 500, retryAfter: -1, errName: "ProviderError", retryable: true},
		{name: "401 auth", err: status(401), class: abi.ClassAuth, status: 401, retryAfter: -1, errName: "ProviderError"},
		{name: "404 client", err: status(404), class: abi.ClassClient, status: 404, retryAfter: -1, errName: "ProviderError"},
		{name: "400 context length from the provider's words",
			err:   &ProviderError{Provider: "openai", Status: 400, Type: "invalid_request_error", Message: "This model's maximum context length is 8192 tokens"},
			class: abi.ClassContextLength, status: 400, retryAfter: -1, errName: "ProviderError"},
		{name: "400 content filter", err: &ProviderError{Status: 400, Type: "content_filter", Message: "blocked"},
			class: abi.ClassContentFilter, status: 400, retryAfter: -1, errName: "ProviderError"},
		// Defect 12.15: the reference's status and message conditions miss
		// Anthropic's plain-object in-stream error; here it is classified.
		{name: "defect 12.15: in-stream overloaded_error without status",
			err:   &ProviderError{Provider: "anthropic", Type: "overloaded_error", Message: "Overloaded"},
			class: abi.ClassOverloaded, retryAfter: -1, errName: "ProviderError"},
		{name: "adapter's own class wins", err: &ProviderError{Status: 400, Class: abi.ClassRefusal},
			class: abi.ClassRefusal, status: 400, retryAfter: -1, errName: "ProviderError"},
		{name: "SDK error type is the name", err: &ProviderError{Status: 500, Err: sdkError{}},
			class: abi.ClassServer, status: 500, retryAfter: -1, errName: "driver.sdkError"},
		{name: "wrapped provider error", err: fmt.Errorf("call: %w", status(429)), class: abi.ClassRateLimit, status: 429,
			retryAfter: -1, errName: "ProviderError", retryable: true},
		{name: "refusal", err: &abi.RefusalError{Transform: "refusal", Phrase: "i can't"}, class: abi.ClassRefusal,
			retryAfter: -1, errName: "RefusalError"},
		{name: "transform error keeps its class", err: &abi.TransformError{Class: abi.ClassContentFilter}, class: abi.ClassContentFilter,
			retryAfter: -1, errName: "TransformError"},
		{name: "transform error defaults to transform", err: &abi.TransformError{}, class: abi.ClassTransform,
			retryAfter: -1, errName: "TransformError"},
		{name: "driver deadline", err: fmt.Errorf("x: %w", &DeadlineError{Deadline: abi.DeadlineFirstContent, Limit: time.Second}),
			class: abi.ClassTimeout, deadline: abi.DeadlineFirstContent, retryAfter: -1, errName: "DeadlineError"},
		{name: "canceled", err: context.Canceled, class: abi.ClassCanceled, retryAfter: -1, errName: "*errors.errorString"},
		{name: "deadline exceeded", err: context.DeadlineExceeded, class: abi.ClassTimeout, retryAfter: -1, errName: "context.deadlineExceededError"},
		{name: "net timeout", err: timeoutNetErr{}, class: abi.ClassTimeout, retryAfter: -1, errName: "driver.timeoutNetErr"},
		{name: "connection refused", err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
			class: abi.ClassNetwork, retryAfter: -1, errName: "*net.OpError"},
		{name: "reset", err: fmt.Errorf("read: %w", syscall.ECONNRESET), class: abi.ClassNetwork, retryAfter: -1, errName: "*fmt.wrapError"},
		{name: "cut stream", err: io.ErrUnexpectedEOF, class: abi.ClassNetwork, retryAfter: -1, errName: "*errors.errorString"},
		{name: "context length in words", err: errors.New("prompt is too long: 300000 tokens"), class: abi.ClassContextLength,
			retryAfter: -1, errName: "*errors.errorString"},
		{name: "unknown", err: errors.New("boom"), class: abi.ClassUnknown, retryAfter: -1, errName: "*errors.errorString"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a abi.Attempt
			classify(tc.err, &a, now, time.Minute)
			require.Equal(t, tc.class, a.Class, "class %s", a.Class)
			require.Equal(t, tc.status, a.Status)
			require.Equal(t, tc.deadline, a.Deadline)
			require.Equal(t, tc.retryAfter, a.RetryAfter)
			require.Equal(t, tc.errName, a.ErrorName)
			require.Equal(t, tc.retryable, a.Retryable)
			require.Equal(t, tc.err, a.Err)
			if tc.err != nil {
				require.Equal(t, tc.err.Error(), a.Message)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{name: "none", header: nil, want: -1},
		{name: "milliseconds", header: http.Header{"Retry-After-Ms": {"1500"}}, want: 1500 * time.Millisecond},
		{name: "azure milliseconds", header: http.Header{"X-Ms-Retry-After-Ms": {"20"}}, want: 20 * time.Millisecond},
		{name: "milliseconds win over seconds", header: http.Header{"Retry-After-Ms": {"10"}, "Retry-After": {"5"}}, want: 10 * time.Millisecond},
		{name: "seconds", header: http.Header{"Retry-After": {"2"}}, want: 2 * time.Second},
		{name: "fractional seconds", header: http.Header{"Retry-After": {"0.5"}}, want: 500 * time.Millisecond},
		{name: "HTTP date", header: http.Header{"Retry-After": {now.Add(7 * time.Second).Format(http.TimeFormat)}}, want: 7 * time.Second},
		{name: "date in the past", header: http.Header{"Retry-After": {now.Add(-time.Hour).Format(http.TimeFormat)}}, want: 0},
		{name: "capped", header: http.Header{"Retry-After": {"3600"}}, want: time.Minute},
		{name: "negative seconds ignored", header: http.Header{"Retry-After": {"-3"}}, want: -1},
		{name: "garbage ignored", header: http.Header{"Retry-After": {"soon"}}, want: -1},
		{name: "bad ms falls back to seconds", header: http.Header{"Retry-After-Ms": {"x"}, "Retry-After": {"1"}}, want: time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, retryAfter(tc.header, now, time.Minute))
		})
	}
}

func TestDeadlineError(t *testing.T) {
	de := &DeadlineError{Deadline: abi.DeadlineGap, Limit: 2 * time.Second}
	require.ErrorIs(t, de, context.DeadlineExceeded)
	require.NotErrorIs(t, de, context.Canceled)
	require.True(t, de.Timeout())
	require.True(t, de.Recoverable())
	require.False(t, (&DeadlineError{Deadline: abi.DeadlineTotal}).Recoverable())
	require.Equal(t, "retryhost: gap deadline of 2s exceeded", de.Error())
	require.True(t, Timeout().Matches(attemptOf(de)))
}

// attemptOf classifies err into an Attempt, as the engine does.
func attemptOf(err error) *Attempt {
	a := &Attempt{}
	classify(err, a, time.Time{}, time.Minute)
	return a
}
