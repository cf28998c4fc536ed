package anthropic_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/anthropic"
)

// TestRateLimitScope: two declarations of one upstream model on one
// account share a rate-limit scope (a Retry-After on one cools both);
// another key, server or model does not; the key itself never shows.
func TestRateLimitScope(t *testing.T) {
	scope := func(id string, opts ...anthropic.Option) string {
		t.Helper()
		m, err := anthropic.New(id, opts...)
		require.NoError(t, err)
		var s driver.RateLimitScoper = m
		return s.RateLimitScope()
	}
	const secret = "sk-secret-123"
	a := scope("claude-sonnet-4-5", anthropic.WithAPIKey(secret), anthropic.WithBaseURL("http://127.0.0.1:1"), anthropic.WithKey("a"))
	require.NotContains(t, a, secret)
	require.True(t, strings.Contains(a, "claude-sonnet-4-5") && strings.Contains(a, "http://127.0.0.1:1"), a)
	for _, tc := range []struct {
		name  string
		got   string
		equal bool
	}{
		{"the same model under another key", scope("claude-sonnet-4-5", anthropic.WithAPIKey(secret), anthropic.WithBaseURL("http://127.0.0.1:1"), anthropic.WithKey("b")), true},
		{"another API key", scope("claude-sonnet-4-5", anthropic.WithAPIKey("sk-other"), anthropic.WithBaseURL("http://127.0.0.1:1")), false},
		{"another server", scope("claude-sonnet-4-5", anthropic.WithAPIKey(secret), anthropic.WithBaseURL("http://127.0.0.1:2")), false},
		{"another model", scope("other-model", anthropic.WithAPIKey(secret), anthropic.WithBaseURL("http://127.0.0.1:1")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.equal, tc.got == a, tc.got)
		})
	}
	require.Equal(t, "team-account", scope("claude-sonnet-4-5", anthropic.WithRateLimitScope("team-account")))
	require.Empty(t, scope("claude-sonnet-4-5", anthropic.WithRateLimitScope("")), "turned off")
}
