package openai_test

import (
	"context"
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
