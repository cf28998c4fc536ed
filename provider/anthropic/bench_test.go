package anthropic_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/provider/anthropic"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

// sseBody is an n-delta answer in Messages stream events.
func sseBody(n int) []byte {
	var b strings.Builder
	ev := func(name, data string) { fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", name, data) }
	ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}}`)
	ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	for i := 0; i < n; i++ {
		ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" tok%d"}}`, i))
	}
	ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
	ev("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, n))
	ev("message_stop", `{"type":"message_stop"}`)
	return []byte(b.String())
}

// BenchmarkStream1000 compares reading a 1,000-delta stream through the raw
// SDK (the baseline: decode only) with reading it through the adapter
// (decode plus mapping to parts).
func BenchmarkStream1000(b *testing.B) {
	const n = 1000
	hc := &http.Client{Transport: wiretest.MemTransport{Body: sseBody(n)}}
	ctx := context.Background()

	b.Run("sdk", func(b *testing.B) {
		client := ant.NewClient(option.WithBaseURL("http://mem"), option.WithAPIKey("k"), option.WithHTTPClient(hc), option.WithMaxRetries(0))
		params := ant.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1024,
			Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("hi"))}}
		b.ReportAllocs()
		for b.Loop() {
			st := client.Messages.NewStreaming(ctx, params)
			deltas := 0
			for st.Next() {
				if ev := st.Current(); ev.Type == "content_block_delta" && ev.Delta.Text != "" {
					deltas++
				}
			}
			require.NoError(b, st.Err())
			require.Equal(b, n, deltas)
			_ = st.Close()
		}
	})
	b.Run("adapter", func(b *testing.B) {
		m, err := anthropic.New("claude-sonnet-4-5", anthropic.WithBaseURL("http://mem"), anthropic.WithAPIKey("k"), anthropic.WithHTTPClient(hc))
		require.NoError(b, err)
		req := request()
		b.ReportAllocs()
		for b.Loop() {
			st, err := m.Stream(ctx, req)
			require.NoError(b, err)
			parts, err := wiretest.Count(st)
			require.NoError(b, err)
			require.Equal(b, n+5, parts) // stream-start, metadata, text-start, n deltas, text-end, finish
		}
	})
}
