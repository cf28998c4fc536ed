package openai_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
	"github.com/retryhost/retryhost/provider/openai"
)

// sseBody is a 1,000-delta answer in chat.completion.chunk events.
func sseBody(n int) []byte {
	var b strings.Builder
	head := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o-mini","system_fingerprint":"fp_1",`
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "data: %s\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok%d\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n", head, i)
	}
	fmt.Fprintf(&b, "data: %s\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n", head)
	fmt.Fprintf(&b, "data: %s\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", head, n, n+5)
	b.WriteString("data: [DONE]\n\n")
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
		client := oai.NewClient(option.WithBaseURL("http://mem/v1"), option.WithAPIKey("k"), option.WithHTTPClient(hc), option.WithMaxRetries(0))
		params := oai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}}
		b.ReportAllocs()
		for b.Loop() {
			st := client.Chat.Completions.NewStreaming(ctx, params)
			deltas := 0
			for st.Next() {
				c := st.Current()
				if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
					deltas++
				}
			}
			require.NoError(b, st.Err())
			require.Equal(b, n, deltas)
			_ = st.Close()
		}
	})
	b.Run("adapter", func(b *testing.B) {
		m, err := openai.New("gpt-4o-mini", openai.WithBaseURL("http://mem/v1"), openai.WithAPIKey("k"), openai.WithHTTPClient(hc))
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

// responsesBody is a 1,000-delta answer in Responses API events.
func responsesBody(n int) []byte {
	var b strings.Builder
	ev := func(typ, data string) { fmt.Fprintf(&b, "event: %s\ndata: {\"type\":%q,%s}\n\n", typ, typ, data) }
	resp := `"response":{"id":"resp_1","object":"response","created_at":1756315696,"status":"%s","model":"gpt-4.1-mini","output":[]%s}`
	ev("response.created", fmt.Sprintf(resp, "in_progress", ""))
	ev("response.output_item.added", `"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}`)
	for i := 0; i < n; i++ {
		ev("response.output_text.delta", fmt.Sprintf(`"sequence_number":%d,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" tok%d","logprobs":[]`, i+2, i))
	}
	ev("response.output_item.done", `"output_index":0,"item":{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[]}`)
	ev("response.completed", fmt.Sprintf(resp, "completed", fmt.Sprintf(`,"usage":{"input_tokens":5,"output_tokens":%d,"total_tokens":%d}`, n, n+5)))
	return []byte(b.String())
}

// BenchmarkResponsesStream1000 is BenchmarkStream1000 for the Responses
// API.
func BenchmarkResponsesStream1000(b *testing.B) {
	const n = 1000
	hc := &http.Client{Transport: wiretest.MemTransport{Body: responsesBody(n)}}
	ctx := context.Background()
	b.Run("sdk", func(b *testing.B) {
		client := oai.NewClient(option.WithBaseURL("http://mem/v1"), option.WithAPIKey("k"), option.WithHTTPClient(hc), option.WithMaxRetries(0))
		params := responses.ResponseNewParams{Model: "gpt-4.1-mini"}
		b.ReportAllocs()
		for b.Loop() {
			st := client.Responses.NewStreaming(ctx, params)
			deltas := 0
			for st.Next() {
				if st.Current().Type == "response.output_text.delta" {
					deltas++
				}
			}
			require.NoError(b, st.Err())
			require.Equal(b, n, deltas)
			_ = st.Close()
		}
	})
	b.Run("adapter", func(b *testing.B) {
		m, err := openai.New("gpt-4.1-mini", openai.WithResponsesAPI(), openai.WithBaseURL("http://mem/v1"), openai.WithAPIKey("k"), openai.WithHTTPClient(hc))
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

// BenchmarkUpstreamJSON20 compares an answer of 20 deltas (the gateway
// harness's) read as a stream with the same answer read as one
// non-streamed chat.completion (WithUpstreamJSON, a request that commits at
// its end), both with WithChunkFields as a gateway has it.
// go test ./provider/openai -run '^$' -bench UpstreamJSON20 -benchmem
func BenchmarkUpstreamJSON20(b *testing.B) {
	const n = 20
	var text strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&text, " tok%d", i)
	}
	completion := fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","created":1741569952,"model":"gpt-4o-mini","system_fingerprint":"fp_1","choices":[{"index":0,"message":{"role":"assistant","content":%q,"refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}`,
		text.String(), n, n+5)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		body []byte
		ctx  context.Context
	}{
		{"stream", sseBody(n), ctx},
		{"json", []byte(completion), driver.CommitAtEnd(ctx)},
	} {
		b.Run(c.name, func(b *testing.B) {
			hc := &http.Client{Transport: wiretest.MemTransport{Body: c.body}}
			m, err := openai.New("gpt-4o-mini", openai.WithBaseURL("http://mem/v1"), openai.WithAPIKey("k"), openai.WithHTTPClient(hc),
				openai.WithChunkFields(), openai.WithUpstreamJSON())
			require.NoError(b, err)
			req := request()
			b.ReportAllocs()
			for b.Loop() {
				st, err := m.Stream(c.ctx, req)
				require.NoError(b, err)
				_, err = wiretest.Count(st)
				require.NoError(b, err)
			}
		})
	}
}
