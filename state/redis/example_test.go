package redis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/retryhost/retryhost/driver"
	redisstate "github.com/retryhost/retryhost/state/redis"
)

// Replicas that open the same Redis (and prefix) share their Runners'
// cooldowns, probes, Retry-After scopes, sticky fallbacks and retry budget.
func Example() {
	st, err := redisstate.Open("redis://127.0.0.1:6379/0", redisstate.Options{Prefix: "checkout:"})
	if err != nil {
		fmt.Println(err) // a malformed URL; a server that is down is served locally
		return
	}
	defer st.Close()
	r, err := driver.New(primary, driver.WithModels(backup),
		driver.WithRules(driver.OnStatus(429).Switch(backup)),
		driver.WithCooldown(driver.Cooldown{Failures: 3, For: 30 * time.Second}),
		driver.WithState(st))
	if err != nil {
		fmt.Println(err)
		return
	}
	_, _ = driver.Do(context.Background(), r, func(ctx context.Context, c *driver.Call) (*driver.Response, error) {
		return c.Model.Generate(ctx, &driver.Request{})
	})
	if s := st.Stats(); s.Down {
		fmt.Println("Redis is unreachable: this replica uses its local copy")
	}
}

var primary, backup driver.Model = instant("primary"), instant("backup")
