package gateway

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStreamWithoutDeltasNamesItsRole: a stream whose answer has no delta
// (an empty answer ended by length, an Anthropic answer stopped before its
// first text) still says role "assistant" on its first chunk, as every
// OpenAI stream does; its only choice chunk was the finish, with
// "delta": {}, and a client that takes the role from the first delta got
// none.
func TestStreamWithoutDeltasNamesItsRole(t *testing.T) {
	for _, tc := range []struct {
		name      string
		anthropic bool
		act       act
		finish    string
	}{
		{name: "openai, empty answer", act: act{chunks: []string{}, finish: "length"}, finish: "length"},
		{name: "openai, role preamble only", act: act{chunks: []string{}, preamble: true, finish: "length"}, finish: "length"},
		{name: "anthropic, empty answer", anthropic: true, act: act{chunks: []string{}, finish: "max_tokens"}, finish: "length"},
		{name: "openai, text", act: act{chunks: []string{"Paris."}}, finish: "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var anth []string
			if tc.anthropic {
				anth = []string{"primary"}
			}
			r := newRigOf(t, `"rules": []`, anth)
			r.up["primary"].play(tc.act)
			resp, body := r.rawStream(streamBody("primary"))
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			evs := events(body)
			require.NotEmpty(t, evs)
			require.Equal(t, "[DONE]", evs[len(evs)-1])
			var roles []string
			finishes := 0
			for _, ev := range evs[:len(evs)-1] {
				var c struct {
					Choices []struct {
						Delta struct {
							Role string `json:"role"`
						} `json:"delta"`
						FinishReason *string `json:"finish_reason"`
					} `json:"choices"`
				}
				require.NoError(t, json.Unmarshal([]byte(ev), &c), ev)
				for _, ch := range c.Choices {
					if ch.Delta.Role != "" {
						roles = append(roles, ch.Delta.Role)
					}
					if ch.FinishReason != nil {
						finishes++
						require.Equal(t, tc.finish, *ch.FinishReason)
					}
				}
			}
			require.Equal(t, []string{"assistant"}, roles, "the role, once, on the first chunk: %s", body)
			require.Equal(t, 1, finishes, body)
			require.Contains(t, evs[0], `"role":"assistant"`)
		})
	}
}
