package redis_test

import (
	"testing"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/testkit/redistest"
	"github.com/retryhost/retryhost/internal/testkit/statetest"
	redisstate "github.com/retryhost/retryhost/state/redis"
)

// TestConformance runs driver.State's semantics on a real redis-server:
// one handle, and two handles with their own clients (two replicas).
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	t.Run("One", func(t *testing.T) {
		statetest.Run(t, func(t *testing.T) driver.State { return open(t, srv, redisstate.Options{Prefix: "one:"}) })
	})
	t.Run("Shared", func(t *testing.T) {
		statetest.RunShared(t, func(t *testing.T) (driver.State, driver.State) {
			return open(t, srv, redisstate.Options{Prefix: "two:"}), open(t, srv, redisstate.Options{Prefix: "two:"})
		})
	})
}
