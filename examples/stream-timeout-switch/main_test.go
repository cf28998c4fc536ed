package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/examples/internal/exampletest"
)

func TestMain_FirstContentTimeoutSwitchesGapTruncates(t *testing.T) {
	got := exampletest.Stdout(t, main)
	require.Equal(t, `1. no content within 50ms: switch before the caller sees anything
  attempt 1 on big/model-stuck failed: timeout (first-content deadline)
  committed on small/model-fast (attempt 2)
  preamble from small/model-fast
  The answer is 42.

2. silence after content: the stream is truncated, nothing re-runs
  committed on big/model-halting (attempt 1)
  preamble from big/model-halting
  The answer is 
  stream ended: gap deadline (recoverable before commit only)`, got)
}
