package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The demo starts servers and streams; nothing of them may outlive a run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
