package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/openai"
)

// A streaming call against a local OpenAI-compatible server.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, data := range []string{
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}]}`,
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":", world"},"finish_reason":null}]}`,
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`,
			`[DONE]`,
		} {
			fmt.Fprintf(w, "data: %s\n\n", data)
		}
	}))
	defer srv.Close()

	m, err := openai.New("gpt-4o-mini",
		openai.WithBaseURL(srv.URL+"/v1"),
		openai.WithAPIKey("sk-test"),
		openai.WithHTTPClient(srv.Client()))
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
			fmt.Printf("\nfinish: %s, %d tokens out\n", p.Finish.Reason.Unified, p.Finish.Usage.OutputTokens)
		default:
			fmt.Printf("[%s]", p.Kind)
		}
	}
	// Output:
	// [stream-start][response-metadata][text-start]Hello, world[text-end]
	// finish: stop, 3 tokens out
}

// An HTTP error arrives as a *driver.ProviderError that conditions can match
// without knowing the SDK.
func ExampleModel_Stream_rateLimit() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
	}))
	defer srv.Close()

	m, _ := openai.New("gpt-4o-mini", openai.WithBaseURL(srv.URL+"/v1"), openai.WithAPIKey("sk-test"), openai.WithHTTPClient(srv.Client()))
	_, err := m.Stream(context.Background(), &driver.Request{
		Messages: []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: "Hi"}}}},
	})
	var pe *driver.ProviderError
	if errors.As(err, &pe) {
		fmt.Println(pe.Status, pe.Class, pe.Retryable, pe.Header.Get("Retry-After"))
	}
	// Output:
	// 429 rate-limit true 2
}

// The Responses API, with WithResponsesAPI: the same parts as Chat
// Completions, and the response headers for the request id.
func ExampleWithResponsesAPI() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Request-Id", "req_123")
		for _, ev := range []string{
			`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1756315696,"status":"in_progress","model":"gpt-4.1-mini","output":[]}}`,
			`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}`,
			`{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hello"}`,
			`{"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"delta":", world"}`,
			`{"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello, world","annotations":[]}]}}`,
			`{"type":"response.completed","sequence_number":5,"response":{"id":"resp_1","object":"response","created_at":1756315696,"status":"completed","model":"gpt-4.1-mini","output":[],"usage":{"input_tokens":9,"output_tokens":3,"total_tokens":12}}}`,
		} {
			var typ struct{ Type string }
			_ = json.Unmarshal([]byte(ev), &typ)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ.Type, ev)
		}
	}))
	defer srv.Close()

	m, err := openai.New("gpt-4.1-mini", openai.WithResponsesAPI(),
		openai.WithBaseURL(srv.URL+"/v1"), openai.WithAPIKey("sk-test"), openai.WithHTTPClient(srv.Client()))
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
	if h, ok := st.(interface{ Header() http.Header }); ok {
		fmt.Println("request id:", h.Header().Get("X-Request-Id"))
	}
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
			fmt.Printf("\nfinish: %s, %d tokens out\n", p.Finish.Reason.Unified, p.Finish.Usage.OutputTokens)
		}
	}
	// Output:
	// request id: req_123
	// Hello, world
	// finish: stop, 3 tokens out
}
