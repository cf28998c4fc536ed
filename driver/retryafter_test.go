package driver

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A wait too long to represent is capped at
// WithRetryAfterCap, never dropped; what is not a non-negative decimal
// (or, for Retry-After, an HTTP date) is ignored, in every format.
func TestRetryAfterFormats(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const limit = 2 * time.Second
	ms := func(v string) http.Header { return http.Header{"Retry-After-Ms": {v}} }
	azure := func(v string) http.Header { return http.Header{"X-Ms-Retry-After-Ms": {v}} }
	sec := func(v string) http.Header { return http.Header{"Retry-After": {v}} }
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		// seconds
		{"seconds", sec("1"), time.Second},
		{"seconds padded", sec(" 1 "), time.Second},
		{"seconds zero", sec("0"), 0},
		{"seconds fractional", sec("1.25"), 1250 * time.Millisecond},
		{"seconds at the cap", sec("2"), limit},
		{"seconds just under 1e9", sec("999999999"), limit},
		{"seconds 1e9", sec("1000000000"), limit},
		{"seconds 1e10", sec("10000000000"), limit},
		{"seconds past int64", sec("99999999999999999999"), limit},
		{"seconds past float64", sec(strings.Repeat("9", 400)), limit},
		{"seconds huge fractional", sec("1000000000.5"), limit},
		{"seconds negative", sec("-1"), -1},
		{"seconds negative huge", sec("-1000000000"), -1},
		{"seconds exponent", sec("1e9"), -1},
		{"seconds inf", sec("inf"), -1},
		{"seconds Infinity", sec("+Infinity"), -1},
		{"seconds NaN", sec("NaN"), -1},
		{"seconds hex", sec("0x10"), -1},
		{"seconds plus sign", sec("+1"), -1},
		{"seconds trailing dot", sec("1."), -1},
		{"seconds leading dot", sec(".5"), -1},
		{"seconds two dots", sec("1.2.3"), -1},
		{"seconds unit", sec("5s"), -1},
		{"seconds garbage", sec("soon"), -1},
		{"seconds empty", sec(""), -1},
		// milliseconds
		{"ms", ms("1500"), 1500 * time.Millisecond},
		{"ms fractional", ms("0.5"), 500 * time.Microsecond},
		{"ms 1e12", ms("1000000000000"), limit},
		{"ms just under 1e12", ms("999999999999"), limit},
		{"ms past int64", ms("9223372036854775808000"), limit},
		{"ms past float64", ms(strings.Repeat("9", 400)), limit},
		{"ms negative", ms("-20"), -1},
		{"ms garbage", ms("later"), -1},
		{"azure ms 1e12", azure("1000000000000"), limit},
		{"azure ms", azure("20"), 20 * time.Millisecond},
		// precedence: a usable ms header wins, a bad one falls back
		{"huge ms wins over seconds", http.Header{"Retry-After-Ms": {"1000000000000"}, "Retry-After": {"1"}}, limit},
		{"negative ms falls back", http.Header{"Retry-After-Ms": {"-5"}, "Retry-After": {"1"}}, time.Second},
		{"garbage ms falls back to huge seconds", http.Header{"Retry-After-Ms": {"x"}, "Retry-After": {"1000000000"}}, limit},
		// HTTP dates
		{"date", sec(now.Add(time.Second).Format(http.TimeFormat)), time.Second},
		{"date past", sec(now.Add(-time.Hour).Format(http.TimeFormat)), 0},
		{"date far", sec("Fri, 31 Dec 9999 23:59:59 GMT"), limit},
		{"date RFC 850", sec("Thursday, 01-Jan-26 00:00:01 GMT"), time.Second},
		{"date ANSI C", sec("Thu Jan  1 00:00:01 2026"), time.Second},
		{"date garbage", sec("Mon, 99 Foo 2026 00:00:00 GMT"), -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, retryAfter(tc.header, now, limit))
		})
	}
}

// A cap of zero makes every Retry-After wait zero, however large.
func TestRetryAfterZeroCap(t *testing.T) {
	now := time.Now()
	for _, v := range []string{"0", "1", "1000000000", strings.Repeat("9", 400)} {
		require.Equal(t, time.Duration(0), retryAfter(http.Header{"Retry-After": {v}}, now, 0), v)
	}
	require.Equal(t, time.Duration(-1), retryAfter(http.Header{"Retry-After": {"-1"}}, now, 0))
}
