package bedrock_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/provider/bedrock"
	"github.com/retryhost/retryhost/provider/internal/conformance"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

// streamBody is an n-delta answer as ConverseStream's AWS event stream.
func streamBody(b *testing.B, n int) []byte {
	var out bytes.Buffer
	enc := eventstream.NewEncoder()
	ev := func(name, data string) {
		var msg eventstream.Message
		msg.Headers.Set(":event-type", eventstream.StringValue(name))
		msg.Headers.Set(":message-type", eventstream.StringValue("event"))
		msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
		msg.Payload = []byte(data)
		require.NoError(b, enc.Encode(&out, msg))
	}
	ev("messageStart", `{"role":"assistant"}`)
	for i := 0; i < n; i++ {
		ev("contentBlockDelta", fmt.Sprintf(`{"contentBlockIndex":0,"delta":{"text":" tok%d"}}`, i))
	}
	ev("contentBlockStop", `{"contentBlockIndex":0}`)
	ev("messageStop", `{"stopReason":"end_turn"}`)
	ev("metadata", fmt.Sprintf(`{"usage":{"inputTokens":5,"outputTokens":%d,"totalTokens":%d},"metrics":{"latencyMs":100}}`, n, n+5))
	return out.Bytes()
}

// BenchmarkStream1000 compares reading a 1,000-delta stream through the raw
// SDK (the baseline: decode only) with reading it through the adapter
// (decode plus mapping to parts).
func BenchmarkStream1000(b *testing.B) {
	const n = 1000
	hc := &http.Client{Transport: wiretest.MemTransport{Body: streamBody(b, n)}}
	ctx := context.Background()

	b.Run("sdk", func(b *testing.B) {
		client := bedrockruntime.New(bedrockruntime.Options{Region: "us-east-1", Credentials: creds,
			BaseEndpoint: aws.String("http://mem"), HTTPClient: hc, Retryer: aws.NopRetryer{}})
		in := &bedrockruntime.ConverseStreamInput{ModelId: aws.String("amazon.nova-lite-v1:0"),
			Messages: []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "hi"}}}}}
		b.ReportAllocs()
		for b.Loop() {
			out, err := client.ConverseStream(ctx, in)
			require.NoError(b, err)
			st := out.GetStream()
			deltas := 0
			for ev := range st.Events() {
				if d, ok := ev.(*types.ConverseStreamOutputMemberContentBlockDelta); ok {
					if _, ok := d.Value.Delta.(*types.ContentBlockDeltaMemberText); ok {
						deltas++
					}
				}
			}
			require.NoError(b, st.Close())
			require.Equal(b, n, deltas)
		}
	})
	b.Run("adapter", func(b *testing.B) {
		m, err := bedrock.New("amazon.nova-lite-v1:0", bedrock.WithBaseURL("http://mem"), bedrock.WithRegion("us-east-1"),
			bedrock.WithCredentials(creds), bedrock.WithHTTPClient(hc))
		require.NoError(b, err)
		req := conformance.Request()
		b.ReportAllocs()
		for b.Loop() {
			st, err := m.Stream(ctx, req)
			require.NoError(b, err)
			parts, err := wiretest.Count(st)
			require.NoError(b, err)
			require.Equal(b, n+4, parts) // stream-start, text-start, n deltas, text-end, finish
		}
	})
}
