package redis_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/testkit"
	"github.com/retryhost/retryhost/internal/testkit/redistest"
	redisstate "github.com/retryhost/retryhost/state/redis"
)

var ctx = context.Background()

// open returns a State on srv with its own client (as another replica
// would have), closed at cleanup.
func open(t *testing.T, srv *redistest.Server, o redisstate.Options) *redisstate.State {
	t.Helper()
	if o.OpTimeout == 0 {
		o.OpTimeout = 2 * time.Second // a loaded CI machine under -race; the outage tests set their own
	}
	s, err := redisstate.Open(srv.URL(), o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// client is a test's own view of the server's keys.
func client(t *testing.T, srv *redistest.Server) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// counter counts the commands a client sends (a pipeline counts each).
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c *counter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

var cd = driver.Failure{Failures: 2, For: time.Minute}

func failure(model string, retryAfter time.Duration) driver.Failure {
	f := cd
	f.Model, f.RetryAfter = model, retryAfter
	return f
}

// TestBeginIsOneRoundTrip: a request's start (models, scopes, sticky and
// budget together) is one command on the wire once the script is cached.
func TestBeginIsOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), DisableIdentity: true})
	defer c.Close()
	n := &counter{}
	c.AddHook(n)
	s, err := redisstate.New(c, redisstate.Options{})
	require.NoError(t, err)
	b := driver.BeginRequest{Key: "k", Models: []string{"a", "b", "c"}, Scopes: []string{"acct"}, Sticky: true, Budget: true}
	s.Begin(ctx, b) // loads the script (EVALSHA, NOSCRIPT, EVAL)
	n.n.Store(0)
	for range 10 {
		s.Begin(ctx, b)
	}
	require.EqualValues(t, 10, n.n.Load())
	require.Zero(t, s.Stats().Errors)
}

// TestCooldownShared: a 429 with Retry-After reported by one replica cools
// the model for another at its next request; a success anywhere ends it.
func TestCooldownShared(t *testing.T) {
	srv := redistest.Start(t)
	r1, r2 := open(t, srv, redisstate.Options{}), open(t, srv, redisstate.Options{})
	b := driver.BeginRequest{Key: "k", Models: []string{"a", "b"}}

	snap := r2.Begin(ctx, b)
	require.Equal(t, []driver.ModelState{{}, {}}, snap.Models)

	st, cooled := r1.Failed(ctx, failure("a", 30*time.Second))
	require.True(t, cooled, "a Retry-After cools the model at once")
	require.Equal(t, 1, st.Failures)
	require.InDelta(t, float64(30*time.Second), float64(st.Cooling), float64(time.Second))

	snap = r2.Begin(ctx, b)
	require.Greater(t, snap.Models[0].Cooling, 25*time.Second)
	require.LessOrEqual(t, snap.Models[0].Cooling, 30*time.Second)
	require.Equal(t, driver.ModelState{}, snap.Models[1])

	require.True(t, r2.Succeeded(ctx, "a"), "the success ends the cooldown")
	require.Equal(t, driver.ModelState{}, r1.Begin(ctx, b).Models[0])
	require.False(t, r1.Succeeded(ctx, "a"), "nothing left to end")
}

// TestFailuresCountAcrossReplicas: consecutive failures seen by different
// replicas add up to the cooldown's threshold; a scope's Retry-After
// blocks the scope for everyone.
func TestFailuresCountAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	r1, r2 := open(t, srv, redisstate.Options{}), open(t, srv, redisstate.Options{})
	st, cooled := r1.Failed(ctx, failure("a", 0))
	require.False(t, cooled)
	require.Equal(t, 1, st.Failures)
	st, cooled = r2.Failed(ctx, failure("a", 0))
	require.True(t, cooled, "the second failure, on another replica, reaches Failures: 2")
	require.Equal(t, 1, st.Failures, "after a cooldown starts the count is Failures-1")
	require.InDelta(t, float64(time.Minute), float64(st.Cooling), float64(time.Second))

	// A failure during the cooldown does not restart it.
	_, cooled = r1.Failed(ctx, failure("a", 0))
	require.False(t, cooled)

	f := failure("b", 20*time.Second)
	f.Scope = "acct-1"
	_, cooled = r1.Failed(ctx, f)
	require.True(t, cooled)
	snap := r2.Begin(ctx, driver.BeginRequest{Key: "k", Scopes: []string{"acct-1", "acct-2"}})
	require.Greater(t, snap.Scopes[0], 15*time.Second)
	require.Zero(t, snap.Scopes[1])
}

// TestOneProbe: when a cooldown ends, of many replicas asking at once
// exactly one takes the half-open probe; its failure cools the model again
// and releases the lease; a lease whose holder vanished expires.
func TestOneProbe(t *testing.T) {
	srv := redistest.Start(t)
	var reps []*redisstate.State
	for range 5 {
		reps = append(reps, open(t, srv, redisstate.Options{}))
	}
	short := driver.Failure{Model: "a", Failures: 1, For: 50 * time.Millisecond}
	_, cooled := reps[0].Failed(ctx, short)
	require.True(t, cooled)
	require.False(t, reps[1].TakeProbe(ctx, "a", time.Second), "no probe while it cools down")
	require.Eventually(t, func() bool {
		return reps[2].Begin(ctx, driver.BeginRequest{Models: []string{"a"}}).Models[0].HalfOpen
	}, 5*time.Second, 10*time.Millisecond)

	var took atomic.Int64
	var wg sync.WaitGroup
	for _, r := range reps {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r.TakeProbe(ctx, "a", time.Minute) {
					took.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	require.EqualValues(t, 1, took.Load(), "exactly one probe across the fleet")
	snap := reps[3].Begin(ctx, driver.BeginRequest{Models: []string{"a"}})
	require.Equal(t, driver.ModelState{HalfOpen: true, Probing: true}, snap.Models[0])

	// The probe fails: cooled again, lease released.
	st, cooled := reps[4].Failed(ctx, short)
	require.True(t, cooled)
	require.Positive(t, st.Cooling)
	require.Eventually(t, func() bool { return reps[0].TakeProbe(ctx, "a", 30*time.Millisecond) }, 5*time.Second, 10*time.Millisecond)
	// Its holder never reports: the lease expires and another takes it.
	require.False(t, reps[1].TakeProbe(ctx, "a", time.Minute))
	require.Eventually(t, func() bool { return reps[1].TakeProbe(ctx, "a", time.Minute) }, 5*time.Second, 10*time.Millisecond)

	require.True(t, reps[2].TakeProbe(ctx, "fresh", time.Minute), "a model in rotation needs no probe")
}

// TestKeysExpire: every key the state writes has a TTL on Redis's clock,
// so nothing needs cleaning up.
func TestKeysExpire(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, redisstate.Options{Prefix: "{t:}", BudgetWindow: 5 * time.Second, StickyCountTTL: 7 * time.Second})
	c := client(t, srv)
	f := failure("a", 30*time.Second)
	f.Scope = "acct"
	s.Failed(ctx, f)
	s.Failed(ctx, failure("b", 0))
	s.SetSticky(ctx, "runner", "b", 0, 40*time.Second)
	s.SetSticky(ctx, "other", "b", 3, 0)
	s.Begin(ctx, driver.BeginRequest{Key: "runner", Budget: true})
	s.TryRetry(ctx, "runner", driver.RetryBudget{Percent: 20, MinRetries: 3})

	keys, err := c.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"{t:}c:a", "{t:}h:a", "{t:}f:a", "{t:}f:b", "{t:}s:acct", "{t:}k:runner", "{t:}k:other", "{t:}b:runner"}, keys)
	within := func(key string, lo, hi time.Duration) {
		d, err := c.PTTL(ctx, key).Result()
		require.NoError(t, err)
		require.Truef(t, d > lo && d <= hi, "%s: TTL %v, want (%v, %v]", key, d, lo, hi)
	}
	within("{t:}c:a", 25*time.Second, 30*time.Second)
	within("{t:}h:a", 625*time.Second, 630*time.Second) // the cooldown, then 10 minutes of half-open at most
	within("{t:}f:a", 625*time.Second, 630*time.Second)
	within("{t:}f:b", 55*time.Second, time.Minute) // a count that does not grow is forgotten after For
	within("{t:}s:acct", 25*time.Second, 30*time.Second)
	within("{t:}k:runner", 35*time.Second, 40*time.Second)
	within("{t:}k:other", 5*time.Second, 7*time.Second)
	within("{t:}b:runner", 3*time.Second, 5*time.Second)

	// And they do go: a count that does not grow, a cooldown.
	s.Failed(ctx, driver.Failure{Model: "z", Failures: 2, For: 30 * time.Millisecond})
	require.Eventually(t, func() bool { return c.Exists(ctx, "{t:}f:z").Val() == 0 }, 5*time.Second, 10*time.Millisecond)
	s.Failed(ctx, driver.Failure{Model: "z", Failures: 1, For: 30 * time.Millisecond})
	require.Eventually(t, func() bool { return c.Exists(ctx, "{t:}c:z").Val() == 0 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, int64(2), c.Exists(ctx, "{t:}h:z", "{t:}f:z").Val(), "half-open until a probe's outcome")
}

// TestSticky: a sticky fallback set on one replica is where the others
// start; a count policy is used up across replicas.
func TestSticky(t *testing.T) {
	srv := redistest.Start(t)
	r1, r2 := open(t, srv, redisstate.Options{}), open(t, srv, redisstate.Options{})
	b := driver.BeginRequest{Key: "k", Sticky: true}
	require.Empty(t, r2.Begin(ctx, b).Sticky)
	r1.SetSticky(ctx, "k", "b", 3, 0)
	require.Equal(t, "b", r2.Begin(ctx, b).Sticky)
	require.Equal(t, "b", r1.Begin(ctx, b).Sticky)
	require.Equal(t, "b", r2.Begin(ctx, b).Sticky)
	require.Empty(t, r1.Begin(ctx, b).Sticky, "three requests, then back to the base model")
	require.Empty(t, r2.Begin(ctx, driver.BeginRequest{Key: "other", Sticky: true}).Sticky)

	r2.SetSticky(ctx, "k", "c", 0, 40*time.Millisecond)
	require.Equal(t, "c", r1.Begin(ctx, b).Sticky)
	require.Eventually(t, func() bool { return r1.Begin(ctx, b).Sticky == "" }, 5*time.Second, 10*time.Millisecond)
}

// TestBudgetShared: retries across replicas share one budget: MinRetries
// in a quiet window, Percent of the requests started in it under load.
func TestBudgetShared(t *testing.T) {
	srv := redistest.Start(t)
	r1, r2 := open(t, srv, redisstate.Options{}), open(t, srv, redisstate.Options{})
	bud := driver.RetryBudget{Percent: 20, MinRetries: 2}
	require.True(t, r1.TryRetry(ctx, "k", bud))
	require.True(t, r2.TryRetry(ctx, "k", bud))
	require.False(t, r1.TryRetry(ctx, "k", bud), "MinRetries used up by the two replicas")
	for range 10 {
		r1.Begin(ctx, driver.BeginRequest{Key: "k", Budget: true})
		r2.Begin(ctx, driver.BeginRequest{Key: "k", Budget: true})
	}
	// 20 requests: 20 % is 4 retries.
	require.True(t, r2.TryRetry(ctx, "k", bud))
	require.True(t, r1.TryRetry(ctx, "k", bud))
	require.False(t, r2.TryRetry(ctx, "k", bud))
	require.True(t, r1.TryRetry(ctx, "other", bud), "keys have budgets of their own")
}

// TestOutage: with Redis gone every operation answers from the local copy
// (which knows this replica's own failures), the outage is logged once
// and counted however many operations it spans, and when Redis is back
// the state is shared again.
func TestOutage(t *testing.T) {
	srv := redistest.Start(t)
	var logs testkit.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	s := open(t, srv, redisstate.Options{Logger: logger, RetryInterval: 20 * time.Millisecond})
	other := open(t, srv, redisstate.Options{})
	b := driver.BeginRequest{Key: "k", Models: []string{"a", "b"}, Sticky: true, Budget: true}
	s.Failed(ctx, failure("a", time.Minute))
	require.False(t, s.Stats().Down)

	srv.Kill()
	for range 50 {
		snap := s.Begin(ctx, b)
		require.Positive(t, snap.Models[0].Cooling, "the local copy knows this replica's cooldown")
		s.Failed(ctx, failure("b", 0))
		s.TakeProbe(ctx, "b", time.Second)
		s.TryRetry(ctx, "k", driver.RetryBudget{Percent: 20, MinRetries: 3})
	}
	st := s.Stats()
	require.True(t, st.Down)
	require.EqualValues(t, 1, st.Outages)
	require.Positive(t, st.Errors)
	require.Positive(t, st.LocalOps)
	require.Equal(t, 1, strings.Count(logs.String(), "shared state unreachable"), logs.String())

	srv.Restart()
	other.Failed(ctx, failure("b", 30*time.Second)) // reconnects by itself
	require.Eventually(t, func() bool {
		return s.Begin(ctx, driver.BeginRequest{Models: []string{"b"}}).Models[0].Cooling > 20*time.Second && !s.Stats().Down
	}, 10*time.Second, 10*time.Millisecond, "back to the shared state")
	require.EqualValues(t, 1, s.Stats().Outages)
	require.Equal(t, 1, strings.Count(logs.String(), "shared state reachable again"), logs.String())
}

// TestSlowRedis: a server that does not answer within OpTimeout is an
// outage too (here: paused with CLIENT PAUSE).
func TestSlowRedis(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, redisstate.Options{OpTimeout: 20 * time.Millisecond, RetryInterval: 10 * time.Millisecond})
	s.Begin(ctx, driver.BeginRequest{Models: []string{"a"}})
	c := client(t, srv)
	require.NoError(t, c.Do(ctx, "CLIENT", "PAUSE", "500", "ALL").Err())
	s.Begin(ctx, driver.BeginRequest{Models: []string{"a"}})
	require.True(t, s.Stats().Down)
	require.EqualValues(t, 1, s.Stats().Outages)
	require.Eventually(t, func() bool {
		s.Begin(ctx, driver.BeginRequest{Models: []string{"a"}})
		return !s.Stats().Down
	}, 5*time.Second, 5*time.Millisecond)
}

// TestCallerCancelIsNotAnOutage: an operation whose caller gave up is
// answered locally without declaring Redis down.
func TestCallerCancelIsNotAnOutage(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, redisstate.Options{})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	s.Begin(cctx, driver.BeginRequest{Models: []string{"a"}})
	s.Failed(cctx, failure("a", 0))
	require.Equal(t, redisstate.Stats{LocalOps: 2}, s.Stats())
}

func TestOptions(t *testing.T) {
	_, err := redisstate.Open("http://nope", redisstate.Options{})
	require.Error(t, err)
	_, err = redisstate.Open("redis://127.0.0.1:1/0", redisstate.Options{OpTimeout: -1})
	require.Error(t, err)
	_, err = redisstate.New(nil, redisstate.Options{})
	require.Error(t, err)
}

// TestMemoryPerModel bounds what a model costs in Redis at its worst,
// with the default prefix and a 32-byte model key: three keys, either
// cooling (c, h, f) or half-open with its probe lease (h, f, p). The
// README's limits table quotes it.
func TestMemoryPerModel(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, redisstate.Options{})
	c := client(t, srv)
	model := strings.Repeat("m", 32)
	usage := func() int64 {
		keys, err := c.Keys(ctx, "{retryhost:}*").Result()
		require.NoError(t, err)
		require.Len(t, keys, 3)
		var total int64
		for _, k := range keys {
			n, err := c.MemoryUsage(ctx, k).Result()
			require.NoError(t, err)
			total += n
		}
		return total
	}
	s.Failed(ctx, driver.Failure{Model: model, Failures: 1, For: 50 * time.Millisecond})
	cooling := usage()
	require.Eventually(t, func() bool { return s.TakeProbe(ctx, model, time.Minute) }, 5*time.Second, 5*time.Millisecond)
	probing := usage()
	t.Logf("a model's keys take %d bytes cooling, %d half-open with a probe (32-byte key, default prefix)", cooling, probing)
	require.LessOrEqual(t, max(cooling, probing), int64(320))
}

// TestOpenBeforeRedis: a replica that starts while Redis is down starts on
// its local copy (logged once) and shares its state once Redis is up.
func TestOpenBeforeRedis(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	var logs testkit.LogBuffer
	s := open(t, srv, redisstate.Options{RetryInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.Equal(t, redisstate.Stats{Errors: 1, Outages: 1, Down: true}, s.Stats())
	_, cooled := s.Failed(ctx, failure("a", time.Minute))
	require.True(t, cooled, "the local copy answers")
	srv.Restart()
	other := open(t, srv, redisstate.Options{})
	other.Failed(ctx, failure("b", time.Minute))
	require.Eventually(t, func() bool {
		return s.Begin(ctx, driver.BeginRequest{Models: []string{"b"}}).Models[0].Cooling > 0
	}, 10*time.Second, 10*time.Millisecond, "shared once Redis is up")
	require.False(t, s.Stats().Down)
	require.Equal(t, 1, strings.Count(logs.String(), "shared state unreachable"), logs.String())
}

// TestPoolExhausted: an operation that cannot get one of the client's
// connections within OpTimeout is answered locally and counted, like any
// other slow Redis.
func TestPoolExhausted(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), DisableIdentity: true, PoolSize: 1, ContextTimeoutEnabled: true})
	defer c.Close()
	s, err := redisstate.New(c, redisstate.Options{OpTimeout: 50 * time.Millisecond, RetryInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	s.Begin(ctx, driver.BeginRequest{Models: []string{"a"}})
	require.False(t, s.Stats().Down)

	done := make(chan struct{})
	go func() { defer close(done); c.BLPop(ctx, time.Second, "never") }() // holds the only connection for a second
	require.Eventually(t, func() bool { st := c.PoolStats(); return st.TotalConns == 1 && st.IdleConns == 0 }, 5*time.Second, time.Millisecond)
	snap := s.Begin(ctx, driver.BeginRequest{Models: []string{"a"}})
	require.Empty(t, snap.Models, "answered from the local copy: clean")
	st := s.Stats()
	require.True(t, st.Down)
	require.EqualValues(t, 1, st.Outages)
	require.EqualValues(t, 1, st.LocalOps)
	<-done
	require.Eventually(t, func() bool {
		s.Begin(ctx, driver.BeginRequest{Models: []string{"a"}})
		return !s.Stats().Down
	}, 5*time.Second, 5*time.Millisecond)
}

// TestRestartBetweenOperationsIsNoOutage: Redis restarted between two
// operations leaves dead connections in the pool; the next operation
// that draws one retries once on a fresh connection (within OpTimeout)
// instead of reporting an outage while Redis is up.
func TestRestartBetweenOperationsIsNoOutage(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, redisstate.Options{})
	b := driver.BeginRequest{Key: "k", Models: []string{"a", "b"}, Sticky: true, Budget: true}
	var wg sync.WaitGroup
	for range 8 { // several pooled connections
		wg.Go(func() {
			for range 20 {
				s.Begin(ctx, b)
			}
		})
	}
	wg.Wait()
	srv.Restart()
	for range 20 {
		s.Begin(ctx, b)
		s.Failed(ctx, failure("a", 0))
	}
	st := s.Stats()
	require.False(t, st.Down)
	require.Zero(t, st.Outages, "Redis was up for every operation")
}
