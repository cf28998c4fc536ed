package gateway

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
)

// An upstream gets stream_options only when the client sent it: a
// compatible server that refuses the field (with a 400, the client's
// answer, never a fail-over) serves every client that does not send it.
func TestStreamOptionsUpstreamOnlyWhenClientSent(t *testing.T) {
	r := newPassRig(t, "", nil)
	for range 2 {
		r.up["primary"].play(act{preamble: true, chunks: []string{"Paris."}})
		got := r.chatSaw("any-model")
		require.NoError(t, got.err)
		require.Equal(t, "Paris.", got.text)
	}
	for _, h := range r.up["primary"].requests() {
		require.NotContains(t, h.body, "stream_options")
	}

	// A client that asks for usage gets its usage chunk, and the upstream
	// the request for it.
	r.up["primary"].play(act{preamble: true, chunks: []string{"Paris."}})
	s := r.client.Chat.Completions.NewStreaming(context.Background(), params("any-model"),
		option.WithJSONSet("stream_options", map[string]any{"include_usage": true}))
	sawUsage := false
	for s.Next() {
		sawUsage = sawUsage || s.Current().JSON.Usage.Valid()
	}
	require.NoError(t, s.Err())
	require.NoError(t, s.Close())
	require.True(t, sawUsage)
	reqs := r.up["primary"].requests()
	require.JSONEq(t, `{"include_usage":true}`, string(reqs[len(reqs)-1].body["stream_options"]))
}
