package redis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/testkit/redistest"
	redisstate "github.com/retryhost/retryhost/state/redis"
)

// The limits table in docs/security.md (fleet state on Redis) gives the
// defaults of zero Options: keys under "retryhost:", the retry budget's
// window 10 s, a sticky fallback counted in requests kept 1 h, and the
// documented constants behind them. TestKeysExpire sets every option; this
// one sets none, so a default changed in newState fails here.
func TestDocsZeroOptionsDefaults(t *testing.T) {
	for _, tc := range []struct {
		readme    string
		got, want time.Duration
	}{
		{"one operation on Redis: 50 ms (Options.OpTimeout)", redisstate.DefaultOpTimeout, 50 * time.Millisecond},
		{"retries of Redis while it is down: one operation per 1 s (Options.RetryInterval)", redisstate.DefaultRetryInterval, time.Second},
		{"the retry budget's window: 10 s (Options.BudgetWindow)", redisstate.DefaultBudgetWindow, 10 * time.Second},
		{"a sticky fallback: 1 h for after-N-requests (Options.StickyCountTTL)", redisstate.DefaultStickyCountTTL, time.Hour},
	} {
		require.Equal(t, tc.want, tc.got, "docs: %s", tc.readme)
	}
	require.Equal(t, "retryhost:", redisstate.DefaultPrefix)

	srv := redistest.Start(t)
	s := open(t, srv, redisstate.Options{}) // open sets only OpTimeout, for a loaded machine
	c := client(t, srv)
	s.SetSticky(ctx, "counted", "b", 3, 0)
	s.Begin(ctx, driver.BeginRequest{Key: "runner", Budget: true})
	s.TryRetry(ctx, "runner", driver.RetryBudget{Percent: 20, MinRetries: 3})
	s.Failed(ctx, driver.Failure{Model: "a", Failures: 1, For: time.Minute})

	keys, err := c.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"{retryhost:}k:counted", "{retryhost:}b:runner", "{retryhost:}c:a", "{retryhost:}h:a", "{retryhost:}f:a"}, keys,
		"every key under the default prefix")
	within := func(key string, lo, hi time.Duration) {
		t.Helper()
		d, err := c.PTTL(ctx, key).Result()
		require.NoError(t, err)
		require.Truef(t, d > lo && d <= hi, "%s: TTL %v, want (%v, %v]", key, d, lo, hi)
	}
	within("{retryhost:}k:counted", 55*time.Minute, time.Hour)
	within("{retryhost:}b:runner", 5*time.Second, 10*time.Second)
	within("{retryhost:}c:a", 55*time.Second, time.Minute)
	within("{retryhost:}h:a", 10*time.Minute+55*time.Second, 11*time.Minute) // the cooldown, then max(For, 10 min) half-open
}
