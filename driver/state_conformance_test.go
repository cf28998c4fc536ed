package driver_test

import (
	"testing"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/testkit/statetest"
)

// TestLocalState_Conformance runs the semantics every State keeps on the
// in-process one, the default.
func TestLocalState_Conformance(t *testing.T) {
	statetest.Run(t, func(*testing.T) driver.State { return driver.NewLocalState() })
}
