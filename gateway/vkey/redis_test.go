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
