package redis_test

import (
	"testing"

	"go.uber.org/goleak"

	redisstate "github.com/retryhost/retryhost/state/redis"
)

// TestMain fails the package's tests if any goroutine is left behind (a
// client not closed, a connection pool's reaper). The outage tests' dial
// failures are the State's to report, not go-redis's.
//
// go-redis's Sentinel client (sentinelFailover) can leave its
// +switch-master subscription's goroutines running after Close, after a
// failover in a loaded run: they are go-redis's own and are ignored here,
// and only those.
func TestMain(m *testing.M) {
	redisstate.QuietClientLogs()
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/redis/go-redis/v9.(*sentinelFailover).listen"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9.(*channel).initHealthCheck.func1"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9.(*channel).initMsgChan.func1"))
}
