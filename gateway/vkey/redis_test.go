package vkey

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit/redistest"
	redisstate "github.com/retryhost/retryhost/state/redis"
)

func fleet(t *testing.T, srv *redistest.Server, onDown string) *Fleet {
	t.Helper()
	r, err := redisstate.OpenLimiter(srv.URL(), redisstate.Options{OpTimeout: 2 * time.Second, RetryInterval: time.Hour})
	require.NoError(t, err)
	f := NewFleet(r, func() string { return onDown })
	t.Cleanup(func() { f.Close(); require.NoError(t, r.Close()) })
	return f
}

// TestFleetSharesALimitAndAnswersTheBudgetsEnd: two replicas' Fleets on
// one Redis hold one RPM between them, and a spent day's budget is
// refused until the UTC day ends.
func TestFleetSharesALimitAndAnswersTheBudgetsEnd(t *testing.T) {
	srv := redistest.Start(t)
	a, b := fleet(t, srv, StoreDownLocal), fleet(t, srv, StoreDownLocal)
	ctx := context.Background()
	now := time.Now()
	k := &Key{ID: "team", RPM: 2, Budget: Budget{TokensPerDay: 10}}
	require.Equal(t, Admitted, a.Admit(ctx, k, 1, now).Reason)
	require.Equal(t, Admitted, b.Admit(ctx, k, 1, now).Reason)
	d := a.Admit(ctx, k, 1, now)
	require.Equal(t, OverRPM, d.Reason)
	require.Positive(t, d.RetryAfter)

	spent := &Key{ID: "spent", Budget: Budget{TokensPerDay: 10}}
	require.Equal(t, Admitted, a.Admit(ctx, spent, 10, now).Reason)
	d = b.Admit(ctx, spent, 1, now)
	require.Equal(t, OverBudget, d.Reason)
	_, _, dayEnd, _ := Period(now)
	require.Equal(t, dayEnd.Sub(now), d.RetryAfter)
}

// TestFleetWhileRedisIsDown: with on_store_down "refuse" a limited key
// gets StoreDown; with "local" the replica limits in process.
func TestFleetWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	refuse, local := fleet(t, srv, StoreDownRefuse), fleet(t, srv, StoreDownLocal)
	srv.Kill()
	ctx := context.Background()
	now := time.Now()
	k := &Key{ID: "k", RPM: 1}
	require.Equal(t, StoreDown, refuse.Admit(ctx, k, 0, now).Reason)
	require.Equal(t, Admitted, local.Admit(ctx, k, 0, now).Reason)
	require.Equal(t, OverRPM, local.Admit(ctx, k, 0, now).Reason, "the local limiter holds the key's rate")
	require.Equal(t, Admitted, refuse.Admit(ctx, &Key{ID: "free"}, 0, now).Reason, "an unlimited key needs no store")
}

// TestFleetSumsSpendAcrossReplicas: the costs two replicas settle add up
// on Redis; once they cross the key's day's spend budget each replica
// refuses the key until the UTC day ends. A spend settled while Redis is
// down is kept in process.
func TestFleetSumsSpendAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	a, b := fleet(t, srv, StoreDownLocal), fleet(t, srv, StoreDownLocal)
	ctx := context.Background()
	now := time.Now()
	k := &Key{ID: "team", Budget: Budget{CostPerDay: 0.05}}
	for _, f := range []*Fleet{a, b} {
		require.Equal(t, Admitted, f.Admit(ctx, k, 10, now).Reason)
		f.Settle(ctx, k, 0, 0.03, now)
		f.Close() // the settlement is off the request's path: wait for it
	}
	_, _, dayEnd, _ := Period(now)
	for _, f := range []*Fleet{a, b} {
		d := f.Admit(ctx, k, 10, now)
		require.Equal(t, OverSpend, d.Reason, "0.06 spent of 0.05 by two replicas")
		require.Equal(t, dayEnd.Sub(now), d.RetryAfter)
	}

	srv.Kill()
	other := &Key{ID: "other", Budget: Budget{CostPerDay: 0.05}}
	a.Settle(ctx, other, 0, 0.06, now)
	a.Close()
	require.Equal(t, OverSpend, a.local.Admit(ctx, other, 0, now).Reason, "the spend went to the local limiter")
}
