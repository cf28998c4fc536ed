package redis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit/redistest"
	redisstate "github.com/retryhost/retryhost/state/redis"
)

func openLimiter(t *testing.T, srv *redistest.Server, o redisstate.Options) *redisstate.Limiter {
	t.Helper()
	if o.OpTimeout == 0 {
		o.OpTimeout = 2 * time.Second
	}
	l, err := redisstate.OpenLimiter(srv.URL(), o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

func period(now time.Time) redisstate.Period {
	day := now.UTC().Truncate(24 * time.Hour)
	return redisstate.Period{Day: day.Unix() / 86400, Month: 1, DayEnd: day.Add(24 * time.Hour), MonthEnd: day.Add(48 * time.Hour)}
}

// TestLimiterHoldsRatesAcrossReplicas: two replicas' Limiters on one
// Redis share a client's RPM: the third request of an RPM of 2 is refused
// whichever replica it reaches, with the wait for the next one.
func TestLimiterHoldsRatesAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	a, b := openLimiter(t, srv, redisstate.Options{}), openLimiter(t, srv, redisstate.Options{})
	lim := redisstate.Limits{RPM: 2}
	now := time.Now()
	for i, l := range []*redisstate.Limiter{a, b} {
		got, err := l.Admit(ctx, "team-a", lim, 0, period(now), now)
		require.NoError(t, err)
		require.Equal(t, redisstate.NotRefused, got.Refused)
		require.EqualValues(t, 1-i, got.RemainingRequests)
	}
	got, err := a.Admit(ctx, "team-a", lim, 0, period(now), now)
	require.NoError(t, err)
	require.Equal(t, redisstate.RefusedRPM, got.Refused)
	require.Positive(t, got.Wait)
	require.LessOrEqual(t, got.Wait, 30*time.Second, "one request's share of a minute")

	other, err := b.Admit(ctx, "team-b", lim, 0, period(now), now)
	require.NoError(t, err)
	require.Equal(t, redisstate.NotRefused, other.Refused, "another client has its own rate")
}

// TestLimiterBudgetsSettle: a day's token budget is charged at admission
// and settled to the usage; once spent, the next admission is refused for
// the day, and a settlement that gives tokens back reopens it.
func TestLimiterBudgetsSettle(t *testing.T) {
	srv := redistest.Start(t)
	l := openLimiter(t, srv, redisstate.Options{})
	lim := redisstate.Limits{TokensPerDay: 100}
	now := time.Now()
	p := period(now)
	got, err := l.Admit(ctx, "k", lim, 60, p, now)
	require.NoError(t, err)
	require.Equal(t, redisstate.NotRefused, got.Refused)
	require.NoError(t, l.Settle(ctx, "k", lim, 40, p, now)) // used 100
	got, err = l.Admit(ctx, "k", lim, 1, p, now)
	require.NoError(t, err)
	require.Equal(t, redisstate.RefusedBudget, got.Refused)
	require.False(t, got.Month)

	require.NoError(t, l.Settle(ctx, "k", lim, -50, p, now))
	got, err = l.Admit(ctx, "k", lim, 1, p, now)
	require.NoError(t, err)
	require.Equal(t, redisstate.NotRefused, got.Refused)

	next := p
	next.Day++
	got, err = l.Admit(ctx, "k2", redisstate.Limits{TokensPerMonth: 10}, 10, next, now)
	require.NoError(t, err)
	require.Equal(t, redisstate.NotRefused, got.Refused)
	got, err = l.Admit(ctx, "k2", redisstate.Limits{TokensPerMonth: 10}, 1, next, now)
	require.NoError(t, err)
	require.Equal(t, redisstate.RefusedBudget, got.Refused)
	require.True(t, got.Month, "the month's budget refused it")
}

// TestLimiterUnavailable: while Redis is down an operation returns
// ErrUnavailable (the caller limits on its own), and the Limiter finds
// Redis again by itself.
func TestLimiterUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	l := openLimiter(t, srv, redisstate.Options{OpTimeout: 200 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	lim := redisstate.Limits{RPM: 1000}
	now := time.Now()
	srv.Kill()
	_, err := l.Admit(ctx, "k", lim, 0, period(now), now)
	require.ErrorIs(t, err, redisstate.ErrUnavailable)
	require.ErrorIs(t, l.Settle(ctx, "k", redisstate.Limits{TPM: 10}, 5, period(now), now), redisstate.ErrUnavailable)
	require.True(t, l.Stats().Down, "%+v", l.Stats())
	require.Positive(t, l.Stats().LocalOps)

	srv.Restart()
	require.Eventually(t, func() bool {
		_, err := l.Admit(ctx, "k", lim, 0, period(time.Now()), time.Now())
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	require.False(t, l.Stats().Down)
}
