package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/retryhost/retryhost/driver"
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

// upstreamRetryAfter reads the wait an upstream's answer asks for, as the
// driver reads it before it retries (driver.RetryAfter), capped at
// maxRetryAfter; -1 when there is none that parses. ms reports whether the
// wait came from a milliseconds header.
func upstreamRetryAfter(h http.Header, now time.Time) (d time.Duration, ms bool) {
	return driver.RetryAfter(h, now, maxRetryAfter)
}

// setRetryAfter gives a 429 or 503 answer the gateway's default
// Retry-After (minRetryAfter) unless a more telling one is set already.
func setRetryAfter(h http.Header, status int) {
	if (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) && h.Get("Retry-After") == "" {
		h.Set("Retry-After", retryAfterHeader(-1))
	}
}
