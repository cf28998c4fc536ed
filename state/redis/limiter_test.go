package redis_test

import (
	"strconv"
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
	require.NoError(t, l.Settle(ctx, "k", lim, 40, 0, p, now)) // used 100
	got, err = l.Admit(ctx, "k", lim, 1, p, now)
	require.NoError(t, err)
	require.Equal(t, redisstate.RefusedBudget, got.Refused)
	require.False(t, got.Month)

	require.NoError(t, l.Settle(ctx, "k", lim, -50, 0, p, now))
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

// TestLimiterSpendBudgets: a request's cost is settled after it on the
// day's and the month's spend, in fractions of the currency; the
// admission after the one that crossed a budget is refused, naming the
// day's or the month's, a new period starts from nothing, and each
// counter expires an hour after its period ends.
func TestLimiterSpendBudgets(t *testing.T) {
	srv := redistest.Start(t)
	l := openLimiter(t, srv, redisstate.Options{})
	now := time.Now()
	p := period(now)
	day := redisstate.Limits{CostPerDay: 0.0001}
	for range 2 { // 0 and 0.00006 spent: under the budget
		got, err := l.Admit(ctx, "d", day, 0, p, now)
		require.NoError(t, err)
		require.Equal(t, redisstate.NotRefused, got.Refused)
		require.NoError(t, l.Settle(ctx, "d", day, 0, 0.00006, p, now))
	}
	got, err := l.Admit(ctx, "d", day, 0, p, now)
	require.NoError(t, err)
	require.Equal(t, redisstate.RefusedSpend, got.Refused, "0.00012 spent of 0.0001")
	require.False(t, got.Month)
	counter := "{retryhost:}vk:d:cd" + strconv.FormatInt(p.Day, 10)
	require.InDelta(t, 0.00012, queryFloat(t, srv, "GET", counter), 1e-12)
	require.InDelta(t, float64((p.DayEnd.Sub(now) + time.Hour).Milliseconds()), queryFloat(t, srv, "PTTL", counter), 5000,
		"expires an hour after the day")

	next := p
	next.Day++
	got, err = l.Admit(ctx, "d", day, 0, next, now)
	require.NoError(t, err)
	require.Equal(t, redisstate.NotRefused, got.Refused, "a new day's spend starts from nothing")

	month := redisstate.Limits{CostPerMonth: 2.5, TokensPerDay: 1000}
	require.NoError(t, l.Settle(ctx, "m", month, 0, 2.5, p, now))
	got, err = l.Admit(ctx, "m", month, 1, p, now)
	require.NoError(t, err)
	require.Equal(t, redisstate.RefusedSpend, got.Refused)
	require.True(t, got.Month, "the month's spend refused it")
	require.NoError(t, l.Settle(ctx, "free", redisstate.Limits{}, 0, 1, p, now))
	require.Zero(t, queryFloat(t, srv, "EXISTS", "{retryhost:}vk:free:cd"+strconv.FormatInt(p.Day, 10), "{retryhost:}vk:free:cm1"),
		"no budget, no counter")
}

// queryFloat sends a command to srv and reads its answer as a number.
func queryFloat(t *testing.T, srv *redistest.Server, args ...string) float64 {
	t.Helper()
	r, err := srv.Query(args...)
	require.NoError(t, err)
	require.Len(t, r, 1)
	f, err := strconv.ParseFloat(r[0], 64)
	require.NoError(t, err, r[0])
	return f
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
	require.ErrorIs(t, l.Settle(ctx, "k", redisstate.Limits{TPM: 10}, 5, 0, period(now), now), redisstate.ErrUnavailable)
	require.True(t, l.Stats().Down, "%+v", l.Stats())
	require.Positive(t, l.Stats().LocalOps)

	srv.Restart()
	require.Eventually(t, func() bool {
		_, err := l.Admit(ctx, "k", lim, 0, period(time.Now()), time.Now())
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	require.False(t, l.Stats().Down)
}
