package gateway

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/gateway/vkey"
	"github.com/retryhost/retryhost/internal/testkit/redistest"
	redisstate "github.com/retryhost/retryhost/state/redis"
)

// limitCommands sorts the commands a Redis client sends into the
// limiter's admissions (their first key a key's request GCRA, ":r") and
// the rest, and holds each settlement (first key ":t") until release is
// closed.
type limitCommands struct {
	mu             sync.Mutex
	admits, others int
	settles        int // sent, held or not
	release        chan struct{}
}

func (c *limitCommands) counts() (admits, settles, others int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.admits, c.settles, c.others
}

func (c *limitCommands) reset(release chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.admits, c.settles, c.others, c.release = 0, 0, 0, release
}

func (c *limitCommands) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c *limitCommands) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		first := ""
		if a := cmd.Args(); len(a) > 3 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			first, _ = a[3].(string)
		}
		c.mu.Lock()
		release := c.release
		switch {
		case strings.HasSuffix(first, ":r"):
			c.admits++
		case strings.HasSuffix(first, ":t"):
			c.settles++
		default:
			c.others++
		}
		c.mu.Unlock()
		if strings.HasSuffix(first, ":t") && release != nil {
			<-release
		}
		return next(ctx, cmd)
	}
}
func (c *limitCommands) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.mu.Lock()
		c.others += len(cmds)
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

// TestFleetLimitIsOneRoundTripOnTheRequestsPath: with a key's limits on
// Redis, a request's path sends Redis one command, its admission (rates
// and budgets in one script), and its answer is whole while its
// settlement is held back: the settlement runs after it, off its path,
// and lands once let through.
func TestFleetLimitIsOneRoundTripOnTheRequestsPath(t *testing.T) {
	srv := redistest.Start(t)
	rc := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), DisableIdentity: true})
	defer rc.Close()
	cmds := &limitCommands{}
	rc.AddHook(cmds)
	rl, err := redisstate.NewLimiter(rc, redisstate.Options{OpTimeout: 5 * time.Second, RetryInterval: time.Hour})
	require.NoError(t, err)
	fleet := vkey.NewFleet(rl, nil)
	k := &vkey.Key{ID: "team", Hash: vkey.Hash("secret-team"), RPM: 1000, TPM: 1 << 30, Budget: vkey.Budget{CostPerDay: 1000}}
	set, err := (&vkey.File{Keys: []*vkey.Key{k}}).Set()
	require.NoError(t, err)
	r := newPricedRig(t, nil, `"rules": []`, WithKeySet(set), WithLimiter(fleet))
	c := r.oc("secret-team")

	// The first request loads the scripts (EVALSHA, NOSCRIPT, EVAL).
	_, err = c.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	fleet.Close()

	for i := range 3 {
		release := make(chan struct{})
		cmds.reset(release)
		var once sync.Once
		let := func() { once.Do(func() { close(release) }) }
		defer let() // a failure before the release lets the settlement go, for the rig's cleanup
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.Chat.Completions.New(ctx, params("primary"))
		cancel()
		require.NoError(t, err, "request %d: answered while its settlement is held", i)
		require.NotEmpty(t, resp.Choices)
		admits, _, others := cmds.counts()
		require.Equal(t, 1, admits, "request %d: one admission on the request's path", i)
		require.Zero(t, others, "request %d: no other command", i)
		require.Eventually(t, func() bool { _, s, _ := cmds.counts(); return s == 1 }, 5*time.Second, time.Millisecond,
			"request %d: its settlement is sent after its answer", i)
		let()
		fleet.Close() // waits for the settlement
		_, settles, others := cmds.counts()
		require.Equal(t, 1, settles)
		require.Zero(t, others)
	}
	spent, err := rc.Keys(context.Background(), "*vk:team:cd*").Result()
	require.NoError(t, err)
	require.Len(t, spent, 1, "the settlements landed: the key's spend of the day is on Redis")
	cost, err := rc.Get(context.Background(), spent[0]).Float64()
	require.NoError(t, err)
	require.Positive(t, cost)
}
