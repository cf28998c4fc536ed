package openai_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/openai"
)

// TestRateLimitScope: two declarations of one upstream model on one
// account share a rate-limit scope (a Retry-After on one cools both);
// another key, server or model does not; the key itself never shows.
func TestRateLimitScope(t *testing.T) {
	scope := func(id string, opts ...openai.Option) string {
		t.Helper()
		m, err := openai.New(id, opts...)
		require.NoError(t, err)
		var s driver.RateLimitScoper = m
		return s.RateLimitScope()
	}
	const secret = "sk-secret-123"
	a := scope("gpt-4o", openai.WithAPIKey(secret), openai.WithBaseURL("http://127.0.0.1:1/v1"), openai.WithKey("a"))
	require.NotContains(t, a, secret)
	require.True(t, strings.Contains(a, "gpt-4o") && strings.Contains(a, "http://127.0.0.1:1/v1"), a)
	for _, tc := range []struct {
		name  string
		got   string
		equal bool
	}{
		{"the same model under another key", scope("gpt-4o", openai.WithAPIKey(secret), openai.WithBaseURL("http://127.0.0.1:1/v1"), openai.WithKey("b")), true},
		{"another API key", scope("gpt-4o", openai.WithAPIKey("sk-other"), openai.WithBaseURL("http://127.0.0.1:1/v1")), false},
		{"another server", scope("gpt-4o", openai.WithAPIKey(secret), openai.WithBaseURL("http://127.0.0.1:2")), false},
		{"another model", scope("other-model", openai.WithAPIKey(secret), openai.WithBaseURL("http://127.0.0.1:1/v1")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.equal, tc.got == a, tc.got)
		})
	}
	require.Equal(t, "team-account", scope("gpt-4o", openai.WithRateLimitScope("team-account")))
	require.Empty(t, scope("gpt-4o", openai.WithRateLimitScope("")), "turned off")
}
