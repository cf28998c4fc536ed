package redis_test

import (
	"testing"

	"go.uber.org/goleak"

	redisstate "github.com/retryhost/retryhost/state/redis"
)

// TestMain fails the package's tests if any goroutine is left behind (a
// client not closed, a connection pool's reaper). The outage tests' dial
// failures are the State's to report, not go-redis's.
func TestMain(m *testing.M) {
	redisstate.QuietClientLogs()
	goleak.VerifyTestMain(m)
}
