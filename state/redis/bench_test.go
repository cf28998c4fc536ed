package redis_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/testkit/redistest"
	redisstate "github.com/retryhost/retryhost/state/redis"
)

// instant is a model that answers at once: what a request costs beyond
// it is the driver's and the state's.
type instant string

func (m instant) Key() string { return string(m) }
func (m instant) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	return &driver.Response{}, nil
}
func (m instant) Stream(context.Context, *driver.Request) (driver.Stream, error) { return nil, nil }

// BenchmarkState: requests per second and their p99 latency through a
// Runner with a cooldown (so every request reads the state at its start),
// on the in-process state and on Redis (a redis-server on loopback),
// parallel, in one run:
//
//	go test -run '^$' -bench BenchmarkState -benchmem ./state/redis/
//
// The difference of the two p99s is what the shared state adds to a
// request; the models answer at once, so nothing hides it.
func BenchmarkState(b *testing.B) {
	srv := redistest.Start(b)
	rs, err := redisstate.Open(srv.URL(), redisstate.Options{OpTimeout: time.Second})
	require.NoError(b, err)
	defer rs.Close()
	for _, tc := range []struct {
		name  string
		state driver.State
	}{
		{"local", driver.NewLocalState()},
		{"redis", rs},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r, err := driver.New(instant("a"), driver.WithModels(instant("b"), instant("c")),
				driver.WithCooldown(driver.Cooldown{Failures: 3, For: time.Minute}), driver.WithState(tc.state))
			require.NoError(b, err)
			call := func(ctx context.Context, c *driver.Call) (*driver.Response, error) {
				return c.Model.Generate(ctx, nil)
			}
			var mu sync.Mutex
			var lat []time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				own := make([]time.Duration, 0, 1024)
				ctx := context.Background()
				for pb.Next() {
					t0 := time.Now()
					if _, err := driver.Do(ctx, r, call); err != nil {
						b.Error(err)
						return
					}
					own = append(own, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, own...)
				mu.Unlock()
			})
			b.StopTimer()
			if len(lat) > 0 {
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
				b.ReportMetric(float64(len(lat))/b.Elapsed().Seconds(), "req/s")
			}
			require.Zero(b, rs.Stats().Errors, "every operation reached Redis")
		})
	}
}
