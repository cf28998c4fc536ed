package redis_test

import (
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/testkit/redistest"
	"github.com/retryhost/retryhost/internal/testkit/statetest"
	redisstate "github.com/retryhost/retryhost/state/redis"
)

// openURL returns a State on url with its own client, closed at cleanup;
// before it closes, it checks that no operation failed against Redis (a
// CROSSSLOT error, a MOVED not followed, a timeout), since the State would
// otherwise hide the failure behind its local copy.
func openURL(t *testing.T, url string, o redisstate.Options) *redisstate.State {
	t.Helper()
	if o.OpTimeout == 0 {
		o.OpTimeout = 2 * time.Second
	}
	s, err := redisstate.Open(url, o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	t.Cleanup(func() {
		st := s.Stats()
		require.Zerof(t, st.Errors, "operations failed against Redis: %+v", st)
		require.Zero(t, st.Outages, "operations answered locally")
	})
	return s
}

// TestOpenURLs: the schemes pick go-redis's client, and a URL that names
// none, or a Sentinel URL without its primary's name, is refused with
// ErrURL before any connection.
func TestOpenURLs(t *testing.T) {
	for _, tc := range []struct {
		url, err string
	}{
		{"redis://127.0.0.1:1/0", ""},
		{"rediss://127.0.0.1:1/0", ""},
		{"unix:///tmp/no-such-redis.sock", ""},
		{"redis+sentinel://127.0.0.1:1/0?master_name=m&addr=127.0.0.1:2", ""},
		{"rediss+sentinel://127.0.0.1:1?master_name=m", ""},
		{"redis+cluster://127.0.0.1:1?addr=127.0.0.1:2&addr=127.0.0.1:3", ""},
		{"REDIS+CLUSTER://127.0.0.1:1", ""},
		{"127.0.0.1:6379", "no scheme"},
		{"http://127.0.0.1:1", `scheme "http"`},
		{"redis+raft://127.0.0.1:1", `scheme "redis+raft"`},
		{"unix+cluster:///tmp/x.sock", `scheme "unix+cluster"`},
		{"redis+sentinel://127.0.0.1:1/0", "master_name"},
		{"redis+sentinel://127.0.0.1:1/0?master_name=m&addr=nohost", "addr"},
		{"redis+cluster://127.0.0.1:1?no_such_option=1", "no_such_option"},
		{"redis://127.0.0.1:1/x", "database"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			s, err := redisstate.Open(tc.url, redisstate.Options{OpTimeout: 10 * time.Millisecond})
			if tc.err == "" {
				require.NoError(t, err)
				require.NoError(t, s.Close())
				return
			}
			require.ErrorIs(t, err, redisstate.ErrURL)
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// TestClusterConformance runs driver.State's semantics on a real
// three-master Redis Cluster, and checks that no operation failed there:
// every script's keys share one hash slot (no CROSSSLOT), whatever the
// models, scopes and keys.
func TestClusterConformance(t *testing.T) {
	c := redistest.StartCluster(t)
	t.Run("One", func(t *testing.T) {
		statetest.Run(t, func(t *testing.T) driver.State { return openURL(t, c.URL(), redisstate.Options{Prefix: "one:"}) })
	})
	t.Run("Shared", func(t *testing.T) {
		statetest.RunShared(t, func(t *testing.T) (driver.State, driver.State) {
			return openURL(t, c.URL(), redisstate.Options{Prefix: "two:"}), openURL(t, c.URL(), redisstate.Options{Prefix: "two:"})
		})
	})
	t.Run("EveryOperationOneSlot", func(t *testing.T) {
		for _, prefix := range []string{"", "fleet:", "fleet-{eu}:"} {
			for _, n := range c.Nodes {
				_, err := n.Query("FLUSHALL")
				require.NoError(t, err)
			}
			s := openURL(t, c.URL(), redisstate.Options{Prefix: prefix})
			var models, scopes []string
			for i := range 20 { // names whose own slots differ
				models = append(models, fmt.Sprintf("model-%d", i))
				scopes = append(scopes, fmt.Sprintf("acct-%d", i))
			}
			s.SetSticky(ctx, "runner-{x}", "model-3", 2, 0)
			snap := s.Begin(ctx, driver.BeginRequest{Models: models, Scopes: scopes, Key: "runner-{x}", Sticky: true, Budget: true})
			require.Equal(t, "model-3", snap.Sticky)
			require.True(t, s.TryRetry(ctx, "runner-{x}", driver.RetryBudget{Percent: 10, MinRetries: 1}))
			for _, m := range models {
				s.Failed(ctx, driver.Failure{Model: m, Failures: 1, For: time.Hour, RetryAfter: time.Minute, Scope: "acct-" + m})
				require.False(t, s.TakeProbe(ctx, m, time.Minute), "cooling")
				require.True(t, s.Succeeded(ctx, m))
			}
			snap = s.Begin(ctx, driver.BeginRequest{Models: models, Scopes: scopes, Key: "runner-{x}", Sticky: true, Budget: true})
			require.Len(t, snap.Models, len(models))

			// Every key the State wrote is on one node.
			holders := 0
			for _, n := range c.Nodes {
				r, err := n.Query("DBSIZE")
				require.NoError(t, err)
				if r[0] != "0" {
					holders++
				}
			}
			require.Equalf(t, 1, holders, "prefix %q: the keys are on one node", prefix)
		}
	})
}

// TestSentinelFailover: a State on a Sentinel topology whose primary is
// killed keeps answering (from its local copy) while the Sentinels elect
// the replica, reconnects to the promoted one by itself, and two States
// share their state again after that; it logs how long that took.
func TestSentinelFailover(t *testing.T) {
	topo := redistest.StartSentinel(t)
	const op = 100 * time.Millisecond
	o := redisstate.Options{Prefix: "ha:", OpTimeout: op, RetryInterval: 100 * time.Millisecond}
	a, err := redisstate.Open(topo.URL(), o)
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Close()) }()
	b, err := redisstate.Open(topo.URL(), o)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()

	shared := func(model string) bool {
		a.Failed(ctx, driver.Failure{Model: model, Failures: 1, For: time.Hour})
		snap := b.Begin(ctx, driver.BeginRequest{Models: []string{model}})
		return snap.Models[0].Cooling > 0
	}
	require.True(t, shared("before"), "a and b share their state through the primary")
	require.Zero(t, a.Stats().Outages)

	topo.Primary.Kill()
	killed := time.Now()
	var slowest time.Duration
	i := 0
	for promoted := make(chan struct{}); ; i++ {
		if i == 0 {
			go func() { topo.WaitPromoted(t); close(promoted) }()
		}
		start := time.Now()
		a.Begin(ctx, driver.BeginRequest{Models: []string{"m"}})
		mid := time.Now()
		b.Failed(ctx, driver.Failure{Model: "m", Failures: 5, For: time.Minute})
		slowest = max(slowest, mid.Sub(start), time.Since(mid))
		select {
		case <-promoted:
		default:
			time.Sleep(5 * time.Millisecond)
			continue
		}
		break
	}
	promotedAt := time.Now()
	require.NotZero(t, a.Stats().Outages+b.Stats().Outages, "the primary's loss was seen")

	n := 0
	require.Eventually(t, func() bool {
		n++
		return shared(fmt.Sprintf("after-%d", n))
	}, 30*time.Second, 10*time.Millisecond, "shared again after the promotion")
	t.Logf("primary killed; promoted after %v; shared state back %v after the promotion (%v after the kill); slowest operation during the failover %v (op timeout %v)",
		promotedAt.Sub(killed).Round(time.Millisecond), time.Since(promotedAt).Round(time.Millisecond),
		time.Since(killed).Round(time.Millisecond), slowest.Round(time.Millisecond), op)
	require.False(t, a.Stats().Down)
	require.False(t, b.Stats().Down)
}

// TestNewTakesAnyClient: New accepts go-redis's cluster client (any
// UniversalClient), which the caller keeps.
func TestNewTakesAnyClient(t *testing.T) {
	c := redistest.StartCluster(t)
	cl := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), DisableIdentity: true})
	defer cl.Close()
	s, err := redisstate.New(cl, redisstate.Options{OpTimeout: 2 * time.Second})
	require.NoError(t, err)
	s.Failed(ctx, driver.Failure{Model: "a", Failures: 1, For: time.Hour})
	snap := s.Begin(ctx, driver.BeginRequest{Models: []string{"a", "b", "c"}, Key: "k", Budget: true, Sticky: true})
	require.Positive(t, snap.Models[0].Cooling)
	require.Zero(t, s.Stats().Errors)
	require.NoError(t, s.Close())
	require.NoError(t, cl.Ping(ctx).Err(), "the caller's client stays open")
}
