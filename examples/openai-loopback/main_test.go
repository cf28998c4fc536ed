package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRun_RetriesTheRateLimitAndStreamsTheAnswer(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	require.Equal(t, `server: call 1: POST /v1/chat/completions model=gpt-4o-mini stream=true messages=2
attempt 1 on local/gpt-4o-mini failed: HTTP 429 rate-limit, Retry-After 50ms
server: call 2: POST /v1/chat/completions model=gpt-4o-mini stream=true messages=2
[stream-start][response-metadata from gpt-4o-mini][text-start]Paris is the capital of France.[text-end][finish]
finish: stop (raw "stop"), 14 tokens in, 7 out
`, out.String())
}
