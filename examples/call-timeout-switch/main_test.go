package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/examples/internal/exampletest"
)

func TestMain_TimeoutSwitchesButCallerCancelStops(t *testing.T) {
	got := exampletest.Stdout(t, main)
	require.Equal(t, `1. the slow model times out, the fast one answers:
attempt 1 → big/model-slow (timeout 50ms)
  the driver's attempt deadline of 50ms fired
  attempt 1 on big/model-slow failed: timeout, by the driver's attempt deadline
attempt 2 → small/model-fast (timeout 5s)
answer: 42

2. the caller gives up first: no fail-over
attempt 1 → big/model-slow (timeout 50ms)
  attempt 1 on big/model-slow failed: timeout, by the caller's deadline or cancellation
error: context deadline exceeded (caller's deadline: true)`, got)
}
