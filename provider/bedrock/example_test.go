package bedrock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/bedrock"
)

// A streaming call against a local server speaking ConverseStream's AWS
// event stream.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		enc := eventstream.NewEncoder()
		for _, ev := range [][2]string{
			{"messageStart", `{"role":"assistant"}`},
			{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Hello"}}`},
			{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":", world"}}`},
			{"contentBlockStop", `{"contentBlockIndex":0}`},
			{"messageStop", `{"stopReason":"end_turn"}`},
			{"metadata", `{"usage":{"inputTokens":9,"outputTokens":3,"totalTokens":12},"metrics":{"latencyMs":210}}`},
		} {
			var msg eventstream.Message
			msg.Headers.Set(":event-type", eventstream.StringValue(ev[0]))
			msg.Headers.Set(":message-type", eventstream.StringValue("event"))
			msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
			msg.Payload = []byte(ev[1])
			_ = enc.Encode(w, msg)
		}
	}))
	defer srv.Close()

	m, err := bedrock.New("amazon.nova-lite-v1:0",
		bedrock.WithRegion("us-east-1"),
		bedrock.WithCredentials(credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "")),
		bedrock.WithBaseURL(srv.URL),
		bedrock.WithHTTPClient(srv.Client()))
	if err != nil {
		fmt.Println(err)
		return
	}
	st, err := m.Stream(context.Background(), &driver.Request{
		Messages: []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: "Say hello"}}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	for {
		p, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		switch p.Kind {
		case abi.KindTextDelta:
			fmt.Print(p.Delta)
		case abi.KindFinish:
			fmt.Printf("\nfinish: %s (%s), tokens in %d, out %d\n", p.Finish.Reason.Unified, p.Finish.Reason.Raw,
				p.Finish.Usage.InputTokens, p.Finish.Usage.OutputTokens)
		}
	}
	// Output:
	// Hello, world
	// finish: stop (end_turn), tokens in 9, out 3
}
