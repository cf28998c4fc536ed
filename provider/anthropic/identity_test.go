package anthropic_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/anthropic"
)

// TestIdentity: the key is the user's (two accounts of one model are two
// keys), the provider and model id stay attributes, and a mistake is an
// error at New.
func TestIdentity(t *testing.T) {
	m, err := anthropic.New("claude-sonnet-4-5")
	require.NoError(t, err)
	require.Equal(t, "anthropic/claude-sonnet-4-5", m.Key())

	b, err := anthropic.New("claude-sonnet-4-5", anthropic.WithProvider("anthropic-b"))
	require.NoError(t, err)
	require.Equal(t, "anthropic-b/claude-sonnet-4-5", b.Key())

	k, err := anthropic.New("claude-sonnet-4-5", anthropic.WithKey("claude-team-b"), anthropic.WithProvider("anthropic"))
	require.NoError(t, err)
	require.Equal(t, "claude-team-b", k.Key())
	provider, id := driver.Describe(k)
	require.Equal(t, []string{"anthropic", "claude-sonnet-4-5"}, []string{provider, id})

	_, err = driver.New(m, driver.WithRules(driver.AnyError().Switch(k)))
	require.NoError(t, err, "one model under two keys is two models to the driver")

	for name, opt := range map[string]anthropic.Option{
		"empty key":      anthropic.WithKey(" "),
		"empty provider": anthropic.WithProvider(""),
		"bad header":     anthropic.WithHeader("a b", "x"),
		"param path":     anthropic.WithParam("metadata.user_id", "x"),
	} {
		_, err := anthropic.New("claude-sonnet-4-5", opt)
		require.Error(t, err, name)
	}
}
