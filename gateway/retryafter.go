package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Every 429 and 503 the gateway sends carries a Retry-After in whole
// seconds, from minRetryAfter to maxRetryAfter: a client (or a load
// balancer) told to back off is told for how long, so that it neither
// hammers a full or draining gateway nor waits on a number the gateway
// never meant. The bounds are why:
//   - at least 1 s: "0" (an upstream's, or a wait under a second rounded
//     down) reads as "retry at once", which is what a rate limit is not;
//   - at most 60 s: the driver's default cap on an upstream's Retry-After,
//     and a wait both SDKs honour as asked (openai-go drops one over 2
//     minutes for its own backoff; anthropic-sdk-go waits any, an hour
//     included, which a client should not be told to do by a hop).
//     Waiting longer is the policy's business (its deadlines).
const (
	minRetryAfter = time.Second
	maxRetryAfter = 60 * time.Second
)

// retryAfterHeader renders d as the Retry-After the gateway sends: whole
// seconds rounded up, within [minRetryAfter, maxRetryAfter]; a negative d
// (nothing known) is minRetryAfter.
func retryAfterHeader(d time.Duration) string {
	d = min(max(d, minRetryAfter), maxRetryAfter)
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// retryAfterMsHeader renders d as a Retry-After-Ms, capped as Retry-After
// is (OpenAI's SDKs prefer it, so it must not say more than Retry-After
// does) but not raised to a second: it is the upstream's finer wait.
func retryAfterMsHeader(d time.Duration) string {
	d = min(max(d, 0), maxRetryAfter)
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

// upstreamRetryAfter reads the wait an upstream's answer asks for, the way
// the driver does before it retries: Retry-After-Ms (or
// X-Ms-Retry-After-Ms) in milliseconds, else Retry-After in seconds or as
// an HTTP date (a past one is 0). Numbers are non-negative decimals. It
// returns -1 when there is none that parses, and never more than
// maxRetryAfter (a wait too long to represent is capped, not dropped).
// ms reports whether the wait came from a milliseconds header.
func upstreamRetryAfter(h http.Header, now time.Time) (d time.Duration, ms bool) {
	for _, k := range [...]string{"Retry-After-Ms", "X-Ms-Retry-After-Ms"} {
		if d := decimalWait(h.Get(k), time.Millisecond); d >= 0 {
			return d, true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if d := decimalWait(v, time.Second); d >= 0 {
		return d, false
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter), false // Sub saturates far dates
	}
	return -1, false
}

// decimalWait parses v as a non-negative decimal count of unit ("2",
// "0.5"), capped at maxRetryAfter; -1 when v is not such a number
// (negative, "inf", hex, empty).
func decimalWait(v string, unit time.Duration) time.Duration {
	v = strings.TrimSpace(v)
	whole, frac, dot := strings.Cut(v, ".")
	if !allDigits(whole) || dot && !allDigits(frac) {
		return -1
	}
	// Digits only, so the one error left is ErrRange, whose +Inf caps.
	n, _ := strconv.ParseFloat(v, 64)
	if f := n * float64(unit); f < float64(maxRetryAfter) {
		return time.Duration(f)
	}
	return maxRetryAfter
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// setRetryAfter gives a 429 or 503 answer the gateway's default
// Retry-After (minRetryAfter) unless a more telling one is set already.
func setRetryAfter(h http.Header, status int) {
	if (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) && h.Get("Retry-After") == "" {
		h.Set("Retry-After", retryAfterHeader(-1))
	}
}
