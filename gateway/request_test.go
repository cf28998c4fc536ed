package gateway

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseChat: any body is a request or a *requestError, never a panic;
// a parsed request forwards every field but the gateway's own.
func FuzzParseChat(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		c, err := parseChat([]byte(body), []string{"openai"})
		if err != nil {
			var re *requestError
			require.ErrorAs(t, err, &re)
			return
		}
		require.NotEmpty(t, c.model)
		require.NotEmpty(t, c.req.Messages)
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(body), &fields))
		fwd := c.req.ProviderOptions["openai"].(map[string]any)
		for k := range fields {
			_, ok := fwd[k]
			require.Equal(t, !gatewayFields[k], ok, k)
		}
	})
}
