package driver

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine is left behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
