package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A thinking model that refuses in words after its thinking, through
// `serve` with a refusal transform in the policy: with "reasoning": "hold"
// (the native detector's and the refusal plugin's) the refusal fails over
// and the client gets the backup's answer whole and nothing of the refused
// attempt (its thinking, its signature, its text); without the option
// (the default, or "detach") the detector detaches at the thinking and the
// refusal reaches the client, as before the option.

// thinkingTransforms are the policies' transforms under test, by name:
// whether each holds the reasoning.
var thinkingTransforms = []struct {
	name, transforms string
	hold             bool
}{
	{"native hold", `"transforms": [{"refusal": {"reasoning": "hold"}}]`, true},
	{"plugin hold", `"transforms": [{"plugin": {"builtin": "refusal", "config": {"reasoning": "hold"}}}]`, true},
	{"c plugin hold", `"transforms": [{"plugin": {"builtin": "c-refusal", "config": {"reasoning": "hold"}}}]`, true},
	{"native default", `"transforms": [{"refusal": {}}]`, false},
	{"native detach", `"transforms": [{"refusal": {"reasoning": "detach"}}]`, false},
	{"plugin default", `"transforms": [{"plugin": {"builtin": "refusal"}}]`, false},
}

// refusedAttempt is what the primary's refused answer carries, none of
// which may reach the client once it failed over.
var refusedAttempt = []string{"harmful", "must decline", "sorry", "EqQBCgIYAhIMdeclineThinkingSig0RefusalAfterThought", "msg_01ThinkRefuse7Qm2Lk9VbXc", "chatcmpl-9c3e1f0a"}

func requireNoneOf(t *testing.T, body string, words []string) {
	t.Helper()
	for _, w := range words {
		require.NotContains(t, body, w, "nothing of the refused attempt reaches the client")
	}
}

// TestMessagesThinkingRefusalFailsOver: an Anthropic upstream with extended
// thinking, then "I'm sorry, but I can't help with that." (end_turn), on
// /v1/messages through anthropic-sdk-go, streamed and not, and as raw SSE.
func TestMessagesThinkingRefusalFailsOver(t *testing.T) {
	for _, tc := range thinkingTransforms {
		t.Run(tc.name, func(t *testing.T) {
			r := newRigOf(t, defaultRules+", "+tc.transforms, allAnthropic)
			for _, mode := range []string{"streamed", "collected", "raw"} {
				r.up["primary"].play(act{transcript: "anthropic/refusal_text_after_thinking.json"})
				r.up["backup"].play(act{transcript: "anthropic/thinking.json"})
				switch mode {
				case "raw":
					resp, body := r.rawMessages(messagesStreamBody)
					require.Equal(t, http.StatusOK, resp.StatusCode, body)
					if tc.hold {
						require.Contains(t, body, `"text":"Hi there!"`)
						requireNoneOf(t, body, refusedAttempt)
					} else {
						require.Contains(t, body, `I must decline.`)
						require.Contains(t, body, `I can't help with that.`)
						require.NotContains(t, body, "Hi there!")
					}
				default:
					var model, thinking, text, raw string
					if mode == "streamed" {
						got := r.anthStream(msgParams("primary"))
						require.NoError(t, got.err)
						require.NoError(t, got.accumErr)
						require.True(t, got.sawStop)
						require.Equal(t, got.msg.Content[len(got.msg.Content)-1].Text, got.text, "one text block, once")
						model, raw = got.startedAs, strings.Join(got.events, " ")+got.msg.RawJSON()
						thinking, text = got.msg.Content[0].Thinking, got.text
						require.Len(t, got.msg.Content, 2)
					} else {
						m, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
						require.NoError(t, err)
						require.Len(t, m.Content, 2)
						model, raw = string(m.Model), m.RawJSON()
						thinking, text = m.Content[0].Thinking, m.Content[1].Text
					}
					if tc.hold {
						require.Equal(t, "backup", model, "the refusal failed over")
						require.Equal(t, "The user greets me. Answer briefly.", thinking)
						require.Equal(t, "Hi there!", text)
						requireNoneOf(t, raw, refusedAttempt)
					} else {
						require.Equal(t, "primary", model, "the default passes the refusal")
						require.Equal(t, "The user asks for something harmful. I must decline.", thinking)
						require.Equal(t, "I'm sorry, but I can't help with that.", text)
					}
				}
				require.Len(t, r.up["primary"].requests(), 1, mode)
				backup := 0
				if tc.hold {
					backup = 1
				}
				require.Len(t, r.up["backup"].requests(), backup, mode)
				r.up["primary"].reset()
				r.up["backup"].reset()
			}
		})
	}
}

// TestChatThinkingRefusalFailsOver: an OpenAI-compatible upstream
// streaming reasoning_content, then "I'm sorry, but I can't help with
// that." (finish_reason stop), on /v1/chat/completions through openai-go,
// streamed and not.
func TestChatThinkingRefusalFailsOver(t *testing.T) {
	for _, tc := range thinkingTransforms {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, defaultRules+", "+tc.transforms)
			for _, streamed := range []bool{true, false} {
				r.up["primary"].play(act{transcript: "openai/refusal_after_reasoning_compatible.json"})
				r.up["backup"].play(act{transcript: "openai/reasoning_compatible.json"})
				var model, text, raw string
				if streamed {
					p := params("primary")
					s := r.client.Chat.Completions.NewStreaming(context.Background(), p)
					var b, rb strings.Builder
					models := map[string]bool{}
					for s.Next() {
						c := s.Current()
						models[c.Model] = true
						rb.WriteString(c.RawJSON())
						for _, ch := range c.Choices {
							b.WriteString(ch.Delta.Content)
						}
					}
					require.NoError(t, s.Err())
					require.NoError(t, s.Close())
					require.Len(t, models, 1, "one model answered the stream")
					for m := range models {
						model = m
					}
					text, raw = b.String(), rb.String()
				} else {
					cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
					require.NoError(t, err)
					model, text, raw = cc.Model, cc.Choices[0].Message.Content, cc.RawJSON()
				}
				if tc.hold {
					require.Equal(t, "backup", model, "the refusal failed over")
					require.Equal(t, "Hi!", text)
					require.Contains(t, raw, `"reasoning_content":"The user`, "the backup's reasoning")
					requireNoneOf(t, raw, refusedAttempt)
				} else {
					require.Equal(t, "primary", model, "the default passes the refusal")
					require.Equal(t, "I'm sorry, but I can't help with that.", text)
					require.Contains(t, raw, "I must decline.")
				}
				require.Len(t, r.up["primary"].requests(), 1)
				backup := 0
				if tc.hold {
					backup = 1
				}
				require.Len(t, r.up["backup"].requests(), backup)
				r.up["primary"].reset()
				r.up["backup"].reset()
			}
		})
	}
}
