package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// continueRules is defaultRules with continuation after commit on.
const continueRules = defaultRules + `, "after_commit": "continue"`

// With after_commit: continue, a stream that fails after its first
// content (cut, stalled past the gap deadline, or an error event) ends in
// one complete answer for an openai-go client: the backup continues it,
// its repeat of the seam trimmed, one role chunk, one finish, one [DONE].
func TestContinueAfterCommitChat(t *testing.T) {
	r := newRig(t, continueRules)
	for _, c := range []struct {
		name string
		a    act
	}{
		{"connection reset", act{preamble: true, chunks: []string{"The capital ", "of Fra"}, cut: true}},
		{"in-stream error event", act{preamble: true, chunks: []string{"The capital ", "of Fra"}, errorEvent: "overloaded"}},
		{"stream idle past the gap deadline", act{preamble: true, chunks: []string{"The capital ", "of Fra"}, afterText: make(chan struct{})}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r.up["primary"].reset()
			r.up["backup"].reset()
			r.up["primary"].play(c.a)
			r.up["backup"].play(act{preamble: true, chunks: []string{"of France", " is Paris."}})
			got := r.stream("primary")
			require.NoError(t, got.err)
			require.Equal(t, "The capital of France is Paris.", got.text, "nothing duplicated or missing at the seam")
			require.Equal(t, "stop", got.finish)
			require.NotNil(t, got.usage)
			require.Equal(t, int64(11), got.usage.PromptTokens)
			require.Equal(t, int64(2), got.usage.CompletionTokens)

			hits := r.up["backup"].requests()
			require.Len(t, hits, 1)
			var msgs []struct{ Role, Content string }
			require.NoError(t, json.Unmarshal(hits[0].body["messages"], &msgs))
			require.Len(t, msgs, 3)
			require.Equal(t, "assistant", msgs[1].Role)
			require.Equal(t, "The capital of Fra", msgs[1].Content, "the continuation carries what the client has")
			require.Equal(t, "user", msgs[2].Role)

			r.up["primary"].play(c.a)
			r.up["backup"].play(act{preamble: true, chunks: []string{"of France", " is Paris."}})
			resp, body := r.rawStream(`{"model":"primary","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			ev := events(body)
			require.Equal(t, "[DONE]", ev[len(ev)-1])
			require.Equal(t, 1, strings.Count(body, `"role":"assistant"`), body)
			require.Equal(t, 1, strings.Count(body, "[DONE]"))
			require.Equal(t, 1, strings.Count(body, `"finish_reason":"stop"`), body)
			require.NotContains(t, body, `"error"`)
			r.healthy()
		})
	}
}

// With the default after_commit (error), the same faults end in the
// in-band error of TestFailureAfterCommitIsInBand, and the backup is not
// asked.
func TestAfterCommitErrorIsTheDefault(t *testing.T) {
	r := newRig(t, "")
	r.up["primary"].play(act{preamble: true, chunks: []string{"The capital ", "of Fra"}, cut: true})
	got := r.stream("primary")
	require.Error(t, got.err)
	require.Equal(t, "The capital of Fra", got.text)
	require.Empty(t, r.up["backup"].requests())
}

// The limit of continuations ends the stream with the in-band error.
func TestContinueLimitReached(t *testing.T) {
	r := newRig(t, continueRules+`, "max_continuations": 1`)
	r.up["primary"].play(act{preamble: true, chunks: []string{"The capital "}, cut: true})
	r.up["backup"].play(act{preamble: true, chunks: []string{"of Fra"}, cut: true})
	got := r.stream("primary")
	require.Error(t, got.err, "a truncated answer must not read as complete")
	require.Equal(t, "The capital of Fra", got.text)
	require.Len(t, r.up["backup"].requests(), 1)
	r.healthy()
}

// An Anthropic client through the Messages door, over Anthropic
// upstreams: the backup continues from an assistant prefill, the client
// reads one message (one message_start, one message_stop) whose usage
// counts both attempts.
func TestContinueAfterCommitMessages(t *testing.T) {
	r := newRigOf(t, continueRules, []string{"primary", "backup", "third"})
	for _, c := range []struct {
		name string
		a    act
	}{
		{"connection reset", act{chunks: []string{"The capital ", "of Fra"}, cut: true}},
		{"error event", act{chunks: []string{"The capital ", "of Fra"}, errorEvent: "Overloaded"}},
		{"stream idle past the gap deadline", act{chunks: []string{"The capital ", "of Fra"}, afterText: make(chan struct{})}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r.up["primary"].reset()
			r.up["backup"].reset()
			r.up["primary"].play(c.a)
			r.up["backup"].play(act{chunks: []string{"of France", " is Paris."}})
			got := r.anthStream(msgParams("primary"))
			require.NoError(t, got.err)
			require.NoError(t, got.accumErr)
			require.True(t, got.sawStop)
			require.Equal(t, "The capital of France is Paris.", got.text)
			n := map[string]int{}
			for _, e := range got.events {
				n[e]++
			}
			require.Equal(t, 1, n["message_start"], got.events)
			require.Equal(t, 1, n["message_stop"], got.events)
			require.Equal(t, 1, n["content_block_start"], got.events)
			require.Equal(t, 1, n["message_delta"], got.events)
			require.Equal(t, "end_turn", string(got.msg.StopReason))
			require.Len(t, got.msg.Content, 1)
			require.Equal(t, "The capital of France is Paris.", got.msg.Content[0].Text)
			// Each upstream reported 25 input tokens: the answer cost both.
			require.Equal(t, int64(50), got.msg.Usage.InputTokens)

			hits := r.up["backup"].requests()
			require.Len(t, hits, 1)
			var msgs []struct {
				Role    string
				Content []struct{ Type, Text string }
			}
			require.NoError(t, json.Unmarshal(hits[0].body["messages"], &msgs))
			require.Len(t, msgs, 2)
			require.Equal(t, "assistant", msgs[1].Role, "an assistant prefill")
			require.Equal(t, "The capital of Fra", msgs[1].Content[0].Text)
			r.anthHealthy()
		})
	}
}
