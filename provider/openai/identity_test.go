package openai_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/openai"
)

// TestIdentity: the key is the user's (gpt-4o on OpenAI and on Azure are
// two keys), the provider and model id stay attributes, and a mistake is
// an error at New.
func TestIdentity(t *testing.T) {
	direct, err := openai.New("gpt-4o")
	require.NoError(t, err)
	require.Equal(t, "openai/gpt-4o", direct.Key())

	az, err := openai.New("gpt-4o", openai.WithKey("gpt-4o-azure"), openai.WithAzure("https://x.openai.azure.com", "prod", "2024-10-21"))
	require.NoError(t, err)
	require.Equal(t, "gpt-4o-azure", az.Key())
	provider, id := driver.Describe(az)
	require.Equal(t, []string{"azure", "gpt-4o"}, []string{provider, id})
	_, err = driver.New(direct, driver.WithRules(driver.AnyError().Switch(az)))
	require.NoError(t, err)

	for name, opts := range map[string][]openai.Option{
		"empty key":            {openai.WithKey("")},
		"azure and base url":   {openai.WithAzure("https://x.openai.azure.com", "d", "v"), openai.WithBaseURL("http://127.0.0.1:1/v1")},
		"azure without deploy": {openai.WithAzure("https://x.openai.azure.com", "", "v")},
		"azure bad endpoint":   {openai.WithAzure("x.openai.azure.com", "d", "v")},
		"bad header":           {openai.WithHeader("", "x")},
		"param path":           {openai.WithParam("stream_options.include_usage", true)},
	} {
		_, err := openai.New("gpt-4o", opts...)
		require.Error(t, err, name)
	}
}

// Account tells apart the upstream accounts whose stored responses two
// models reach: one base URL, key and headers is one account, whatever
// the model id or the API; Azure's deployment path has none.
func TestAccountNamesTheUpstreamAccount(t *testing.T) {
	const base = "http://127.0.0.1:1/v1"
	one := []openai.Option{openai.WithBaseURL(base), openai.WithAPIKey("sk-one")}
	a, err := openai.New("gpt-4.1", one...)
	require.NoError(t, err)
	require.NotEmpty(t, a.Account())
	require.NotContains(t, a.Account(), "sk-one", "never the key itself")
	for _, tc := range []struct {
		name string
		id   string
		opts []openai.Option
		same bool
	}{
		{"another model of the account", "gpt-4o", one, true},
		{"the Responses API on it", "gpt-4o", append(one[:2:2], openai.WithResponsesAPI()), true},
		{"another key", "gpt-4.1", []openai.Option{openai.WithBaseURL(base), openai.WithAPIKey("sk-two")}, false},
		{"another server", "gpt-4.1", []openai.Option{openai.WithBaseURL("http://127.0.0.1:2/v1"), openai.WithAPIKey("sk-one")}, false},
		{"another project", "gpt-4.1", append(one[:2:2], openai.WithHeader("OpenAI-Project", "proj_2")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := openai.New(tc.id, tc.opts...)
			require.NoError(t, err)
			require.Equal(t, tc.same, m.Account() == a.Account(), "%s against %s", m.Account(), a.Account())
		})
	}
	az, err := openai.New("gpt-4o", openai.WithAzure("https://x.openai.azure.com", "d", "2024-10-21"), openai.WithAPIKey("k"))
	require.NoError(t, err)
	require.Empty(t, az.Account())
}
