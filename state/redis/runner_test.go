package redis_test

import (
	"context"
	"log/slog"
	"net/http"
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

// hits counts the calls per model of the Runners that share it.
type hits struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *hits) add(m string) {
	h.mu.Lock()
	h.n[m]++
	h.mu.Unlock()
}

func (h *hits) get(m string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[m]
}

func rateLimited(retryAfter string) error {
	e := &driver.ProviderError{Provider: "test", Status: http.StatusTooManyRequests, Message: "slow down", Retryable: true, Header: http.Header{}}
	e.Header.Set("Retry-After", retryAfter)
	return e
}

// replicaRunner is one replica's Runner over models a and b, on st: a 429
// switches to b.
func replicaRunner(t *testing.T, st driver.State) *driver.Runner {
	t.Helper()
	r, err := driver.New(instant("a"), driver.WithModels(instant("b")),
		driver.WithRules(driver.OnStatus(429).Switch(instant("b"))),
		driver.WithCooldown(driver.Cooldown{Failures: 3, For: time.Minute}),
		driver.WithState(st))
	require.NoError(t, err)
	return r
}

// TestRetryAfterCoolsTheFleet: a 429 with Retry-After seen through one
// Runner cools the model for another Runner on the same Redis (another
// replica: its own client, its own process state) at its very next
// request, which goes straight to b.
func TestRetryAfterCoolsTheFleet(t *testing.T) {
	srv := redistest.Start(t)
	h := &hits{n: map[string]int{}}
	aDown := func(_ context.Context, c *driver.Call) (string, error) {
		h.add(c.Model.Key())
		if c.Model.Key() == "a" {
			return "", rateLimited("30")
		}
		return "from " + c.Model.Key(), nil
	}
	r1 := replicaRunner(t, open(t, srv, redisstate.Options{}))
	r2 := replicaRunner(t, open(t, srv, redisstate.Options{}))

	got, err := driver.Do(ctx, r1, aDown)
	require.NoError(t, err)
	require.Equal(t, "from b", got)
	require.Equal(t, 1, h.get("a"))

	for range 3 {
		got, err = driver.Do(ctx, r2, aDown)
		require.NoError(t, err)
		require.Equal(t, "from b", got)
	}
	require.Equal(t, 1, h.get("a"), "the other replica never calls the cooling model")
	require.Equal(t, 4, h.get("b"))

	// Without the shared state the other replica pays for the 429 itself.
	r3 := replicaRunner(t, driver.NewLocalState())
	_, err = driver.Do(ctx, r3, aDown)
	require.NoError(t, err)
	require.Equal(t, 2, h.get("a"))
}

// TestOutageUnderLoad: Redis is killed and restarted while requests flow
// through two replicas. No request fails because of it; each replica
// logs the outage once and counts it; after the restart the replicas
// share their state again (a cooldown recorded by one is seen by the
// other).
func TestOutageUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	var logs [2]testkit.LogBuffer
	var reps [2]*redisstate.State
	var runners [2]*driver.Runner
	for i := range reps {
		reps[i] = open(t, srv, redisstate.Options{RetryInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(&logs[i], nil))})
		runners[i] = replicaRunner(t, reps[i])
	}
	var failA atomic.Bool
	var requests, failures atomic.Int64
	call := func(_ context.Context, c *driver.Call) (string, error) {
		if c.Model.Key() == "a" && failA.Load() {
			return "", rateLimited("30")
		}
		return c.Model.Key(), nil
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				requests.Add(1)
				if _, err := driver.Do(ctx, runners[i%2], call); err != nil {
					failures.Add(1)
					t.Errorf("request failed: %v", err)
				}
			}
		})
	}
	waitRequests := func(n int64) {
		start := requests.Load()
		require.Eventually(t, func() bool { return requests.Load() >= start+n }, 20*time.Second, time.Millisecond)
	}
	waitRequests(200)
	srv.Kill()
	// Each replica finds Redis gone on its next operation; on a loaded
	// machine one replica's workers may still be inside an operation that
	// started before the kill when the other has served hundreds of
	// requests locally, so wait for both rather than count requests.
	require.Eventually(t, func() bool { return reps[0].Stats().Down && reps[1].Stats().Down }, 20*time.Second, time.Millisecond,
		"both replicas go on their local copy")
	waitRequests(500)
	srv.Restart()
	require.Eventually(t, func() bool { return !reps[0].Stats().Down && !reps[1].Stats().Down }, 20*time.Second, time.Millisecond,
		"both replicas go back to the shared state")
	waitRequests(200)
	close(stop)
	wg.Wait()
	require.Zero(t, failures.Load())
	for i, s := range reps {
		st := s.Stats()
		require.EqualValuesf(t, 1, st.Outages, "replica %d: one kill is one outage:\n%s", i, logs[i].String())
		require.Positivef(t, st.LocalOps, "replica %d", i)
		require.EqualValuesf(t, st.Outages, strings.Count(logs[i].String(), "shared state unreachable"), "replica %d logs each outage once:\n%s", i, logs[i].String())
		require.EqualValuesf(t, st.Outages, strings.Count(logs[i].String(), "shared state reachable again"), "replica %d", i)
	}

	// Shared again: a's cooldown recorded through replica 0 keeps replica 1 off a.
	failA.Store(true)
	_, err := driver.Do(ctx, runners[0], call)
	require.NoError(t, err)
	var seen []string
	_, err = driver.Do(ctx, runners[1], func(ctx context.Context, c *driver.Call) (string, error) {
		seen = append(seen, c.Model.Key())
		return call(ctx, c)
	})
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, seen)
}

// TestOneRoundTripPerRequest: a successful request through a Runner with
// a cooldown, a sticky policy and a retry budget costs Redis one command.
func TestOneRoundTripPerRequest(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), DisableIdentity: true})
	defer c.Close()
	n := &counter{}
	c.AddHook(n)
	st, err := redisstate.New(c, redisstate.Options{OpTimeout: 2 * time.Second})
	require.NoError(t, err)
	r, err := driver.New(instant("a"), driver.WithModels(instant("b")),
		driver.WithRules(driver.OnStatus(429).Switch(instant("b"))),
		driver.WithCooldown(driver.Cooldown{Failures: 3, For: time.Minute}),
		driver.WithSticky(driver.StickyFor(time.Minute)),
		driver.WithRetryBudget(driver.RetryBudget{}),
		driver.WithState(st))
	require.NoError(t, err)
	ok := func(ctx context.Context, c *driver.Call) (string, error) { return c.Model.Key(), nil }
	_, err = driver.Do(ctx, r, ok) // loads the script
	require.NoError(t, err)
	n.n.Store(0)
	for range 10 {
		got, err := driver.Do(ctx, r, ok)
		require.NoError(t, err)
		require.Equal(t, "a", got)
	}
	require.EqualValues(t, 10, n.n.Load())
}

// TestOneProbeAcrossRunners: after a cooldown, of many requests through
// two replicas' Runners exactly one probes the model; the others go to
// the fallback meanwhile, and the probe's success puts the model back for
// both.
func TestOneProbeAcrossRunners(t *testing.T) {
	srv := redistest.Start(t)
	var down atomic.Bool
	down.Store(true)
	release := make(chan struct{})
	h := &hits{n: map[string]int{}}
	call := func(ctx context.Context, c *driver.Call) (string, error) {
		h.add(c.Model.Key())
		if c.Model.Key() == "a" {
			if down.Load() {
				return "", &driver.ProviderError{Provider: "test", Status: 503, Message: "down", Retryable: true}
			}
			<-release // the probe, held while the other requests arrive
		}
		return c.Model.Key(), nil
	}
	newRunner := func() (*driver.Runner, *redisstate.State) {
		st := open(t, srv, redisstate.Options{})
		r, err := driver.New(instant("a"), driver.WithModels(instant("b")),
			driver.WithRules(driver.OnStatus(503).Switch(instant("b"))),
			driver.WithCooldown(driver.Cooldown{Failures: 1, For: 50 * time.Millisecond}),
			driver.WithAttemptTimeout(time.Minute), // the probe's lease
			driver.WithState(st))
		require.NoError(t, err)
		return r, st
	}
	r1, s1 := newRunner()
	r2, _ := newRunner()
	got, err := driver.Do(ctx, r1, call)
	require.NoError(t, err)
	require.Equal(t, "b", got)
	require.Eventually(t, func() bool {
		return s1.Begin(ctx, driver.BeginRequest{Models: []string{"a"}}).Models[0].HalfOpen
	}, 5*time.Second, 5*time.Millisecond)
	down.Store(false)

	results := make(chan string, 20)
	var wg sync.WaitGroup
	for i := range 20 {
		r := r1
		if i%2 == 1 {
			r = r2
		}
		wg.Go(func() {
			got, err := driver.Do(ctx, r, call)
			if err != nil {
				got = err.Error()
			}
			results <- got
		})
	}
	released := false
	defer func() {
		if !released {
			close(release) // a failed assertion must not leave probes blocked
			wg.Wait()
		}
	}()
	// 19 answers from b while the probe is held.
	for range 19 {
		select {
		case got := <-results:
			require.Equal(t, "b", got)
		case <-time.After(30 * time.Second): // a guard against a hang (two probes held), not a timing assertion
			t.Fatalf("fewer than 19 requests answered while the probe was held: %d calls to a", h.get("a"))
		}
	}
	require.Equal(t, 2, h.get("a"), "the first request's failure, then exactly one probe")
	close(release)
	released = true
	wg.Wait()
	require.Equal(t, "a", <-results, "the probe's own answer")
	for _, r := range []*driver.Runner{r1, r2} {
		got, err := driver.Do(ctx, r, call)
		require.NoError(t, err)
		require.Equal(t, "a", got, "back in rotation for both replicas")
	}
}
