package anthropic_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/anthropic"
)

// A streaming call against a local server speaking the Messages API.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range [][2]string{
			{"message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"usage":{"input_tokens":9,"output_tokens":1}}}`},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			{"ping", `{"type":"ping"}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":", world"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}`},
			{"message_stop", `{"type":"message_stop"}`},
		} {
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev[0], ev[1])
		}
	}))
	defer srv.Close()

	m, err := anthropic.New("claude-sonnet-4-5",
		anthropic.WithBaseURL(srv.URL),
		anthropic.WithAPIKey("sk-ant-test"),
		anthropic.WithHTTPClient(srv.Client()))
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
			fmt.Printf("\nfinish: %s (%s), %d tokens out\n", p.Finish.Reason.Unified, p.Finish.Reason.Raw, p.Finish.Usage.OutputTokens)
		default:
			fmt.Printf("[%s]", p.Kind)
		}
	}
	// Output:
	// [stream-start][response-metadata][text-start]Hello, world[text-end]
	// finish: stop (end_turn), 3 tokens out
}

// Anthropic may report an overload after the 200 status, as an error event
// inside the stream: it surfaces from Recv with Status 0.
func ExampleModel_Stream_overloaded() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\n"+
			`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","usage":{"input_tokens":9,"output_tokens":1}}}`+"\n\n"+
			"event: error\n"+
			`data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`+"\n\n")
	}))
	defer srv.Close()

	m, _ := anthropic.New("claude-sonnet-4-5", anthropic.WithBaseURL(srv.URL), anthropic.WithAPIKey("sk-ant-test"), anthropic.WithHTTPClient(srv.Client()))
	st, err := m.Stream(context.Background(), &driver.Request{
		Messages: []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: "Hi"}}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	for {
		_, err := st.Recv()
		var pe *driver.ProviderError
		if errors.As(err, &pe) {
			fmt.Println(pe.Status, pe.Type, pe.Class, pe.Retryable)
			return
		}
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	// Output:
	// 0 overloaded_error overloaded true
}
