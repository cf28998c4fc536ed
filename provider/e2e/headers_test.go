package e2e_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

// A design difference from ai-retry, end to end with the real SDKs: the
// RetryableModel's stream exposes the response headers of the attempt that
// answered (here the Anthropic fallback's request-id after an OpenAI 503),
// so a caller can log the provider's request id of the answer it got.
func TestStreamHeadersAreTheAnsweringAttempts(t *testing.T) {
	first := wiretest.Serve(t, transcript(t, "openai", "overloaded_503"))
	second := wiretest.Serve(t, transcript(t, "anthropic", "text"))
	var commits []driver.CommitInfo
	rm := retryable(t, openaiModel(t, first.URL, first.Client()), anthropicModel(t, second), nil,
		driver.WithOnCommit(func(_ context.Context, c driver.CommitInfo) { commits = append(commits, c) }))
	s, err := rm.Stream(t.Context(), request())
	require.NoError(t, err)
	hs, ok := s.(driver.HeaderStream)
	require.True(t, ok)
	want := transcript(t, "anthropic", "text").Headers["request-id"]
	require.NotEmpty(t, want)
	require.Equal(t, want, hs.Header().Get("Request-Id"))
	require.Len(t, commits, 1)
	require.Equal(t, want, commits[0].Header.Get("Request-Id"))
	text, _, err := read(t, s)
	require.NoError(t, err)
	require.Equal(t, anthropicAnswer, text)
}
