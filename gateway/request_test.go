package gateway

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
)

// FuzzParseChat: any body is a request or a *requestError, never a panic;
// a parsed request forwards every field but the gateway's own.
func FuzzParseChat(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		c, err := parseChat([]byte(body), upstreams{providers: []string{"openai"}})
		requireParsed(t, body, "openai", c, err)
	})
}

// requireParsed checks what both parsers promise for any body: an error
// is a *requestError; a request has a route and messages and forwards every
// field but the gateway's own to the provider's upstreams. It reports
// whether body parsed.
func requireParsed(t *testing.T, body, provider string, c *chatRequest, err error) bool {
	t.Helper()
	if err != nil {
		var re *requestError
		require.ErrorAs(t, err, &re)
		return false
	}
	require.NotEmpty(t, c.model)
	require.NotEmpty(t, c.req.Messages)
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &fields))
	fwd := c.req.ProviderOptions[provider].(map[string]any)
	for k, v := range fields {
		_, ok := fwd[k]
		if k == "stream_options" && isNull(v) {
			require.False(t, ok, "a null stream_options is not forwarded")
			continue
		}
		require.Equal(t, !gatewayFields[k], ok, k)
	}
	return true
}

// FuzzParseMessages: any body is a request or a *requestError, never a
// panic; a parsed request has a route and messages, and forwards every
// field but the gateway's own to Anthropic upstreams.
func FuzzParseMessages(f *testing.F) {
	f.Add(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		c, err := parseMessages([]byte(body), upstreams{anthropic: []string{"anthropic"}, providers: []string{"openai"}})
		if !requireParsed(t, body, "anthropic", c, err) {
			return
		}
		for _, m := range c.req.Messages {
			require.Contains(t, []driver.Role{driver.RoleUser, driver.RoleAssistant, driver.RoleTool}, m.Role)
		}
	})
}
