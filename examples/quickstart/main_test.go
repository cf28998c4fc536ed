package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/examples/internal/exampletest"
)

func TestMain_PrintsEachAttemptAndTheAnswer(t *testing.T) {
	got := exampletest.Stdout(t, main)
	require.Equal(t, `attempt 1 → openai/gpt-4o
  attempt 1 failed: rate-limit (HTTP 429)
  waited 10ms, next: openai/gpt-4o
attempt 2 → openai/gpt-4o
  attempt 2 failed: overloaded (HTTP 503)
  waited 0s, next: anthropic/claude-sonnet-4
attempt 3 → anthropic/claude-sonnet-4
answer from anthropic/claude-sonnet-4: "Paris is the capital of France."`, got)
}
