package redis_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine is left behind (a
// client not closed, a connection pool's reaper).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
