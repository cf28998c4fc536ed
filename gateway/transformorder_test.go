package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A transform that lets the finish go and adds text at the end of the
// stream (endreplace.wasm: REPLACE from retryhost_end) gets its text out
// before the finish: no content follows the chunk with finish_reason, nor
// a Messages stream's message_delta, streamed and not.
func TestTextAddedAtTheEndGoesBeforeTheFinish(t *testing.T) {
	const policy = `"rules": [], "transforms": [{"plugin": {"path": "../host/testdata/endreplace.wasm"}}]`
	r := newRig(t, policy)
	r.up["primary"].play(act{preamble: true, chunks: []string{"Par", "is"}})
	s := r.client.Chat.Completions.NewStreaming(context.Background(), params("primary"))
	var text strings.Builder
	finished := false
	for s.Next() {
		for _, ch := range s.Current().Choices {
			require.False(t, finished && ch.Delta.Content != "", "content after the finish: %s", s.Current().RawJSON())
			text.WriteString(ch.Delta.Content)
			if ch.FinishReason != "" {
				finished = true
			}
		}
	}
	require.NoError(t, s.Err())
	require.NoError(t, s.Close())
	require.True(t, finished)
	require.Equal(t, "ParisLATE", text.String())

	r.up["primary"].play(act{chunks: []string{"Par", "is"}})
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "ParisLATE", cc.Choices[0].Message.Content)
	require.EqualValues(t, "stop", cc.Choices[0].FinishReason)

	a := newRigOf(t, policy, allAnthropic)
	a.up["primary"].play(act{chunks: []string{"Par", "is"}})
	got := a.anthStream(msgParams("primary"))
	require.NoError(t, got.err)
	require.NoError(t, got.accumErr)
	var all strings.Builder
	for _, b := range got.msg.Content {
		all.WriteString(b.Text)
	}
	require.Equal(t, "ParisLATE", all.String(), "every text block, the late one in the message")
}

// A transform that redacts a server tool's result (redacttool.wasm
// REPLACEs every tool-result part with the result "[]") leaves nothing of
// the upstream's result to the client: the gateway writes the block from
// the part, never from the upstream's raw event of the result it replaced.
func TestRedactedToolResultNeverRelayedRaw(t *testing.T) {
	r := newRigOf(t, `"rules": [], "transforms": [{"plugin": {"path": "../host/testdata/redacttool.wasm"}}]`, allAnthropic)
	const original = "world-weather.info"
	r.up["primary"].play(act{transcript: "anthropic/web_search.json"})
	got := r.anthStream(msgParams("primary"))
	require.NoError(t, got.err)
	require.NoError(t, got.accumErr)
	require.Len(t, got.msg.Content, 4)
	require.Equal(t, "web_search_tool_result", got.msg.Content[2].Type)
	require.NotContains(t, got.msg.RawJSON(), original, "the redacted result reached the client")
	require.JSONEq(t, `[]`, got.msg.Content[2].Content.RawJSON())

	r.up["primary"].play(act{transcript: "anthropic/web_search.json"})
	m, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
	require.NoError(t, err)
	require.NotContains(t, m.RawJSON(), original, "the redacted result reached the client")
	require.Len(t, m.Content, 4)
}
