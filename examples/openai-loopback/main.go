// Command openai-loopback runs the real OpenAI adapter (over the official
// openai-go SDK) against a local OpenAI-compatible server: the same wire
// format as api.openai.com, vLLM, Ollama or any /v1/chat/completions
// endpoint, with no key and no network. The server rate-limits the first
// call (HTTP 429, retry-after-ms: 50); the driver waits what it asked and
// retries; the second call streams its answer as server-sent events.
//
//	go run ./examples/openai-loopback
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/openai"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	w := &lockedWriter{w: out} // the server's goroutines print too
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var body struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			Messages []struct {
				Role    string `json:"role"`
				Content any    `json:"content"`
			} `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		n := calls.Add(1)
		fmt.Fprintf(w, "server: call %d: %s %s model=%s stream=%v messages=%d\n", n, r.Method, r.URL.Path, body.Model, body.Stream, len(body.Messages))
		if n == 1 {
			rw.Header().Set("Content-Type", "application/json")
			rw.Header().Set("Retry-After-Ms", "50")
			rw.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(rw, `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
			return
		}
		rw.Header().Set("Content-Type", "text/event-stream")
		for _, data := range []string{
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764374400,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"Paris"},"finish_reason":null}]}`,
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764374400,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" is the capital of France."},"finish_reason":null}]}`,
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764374400,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764374400,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":14,"completion_tokens":7,"total_tokens":21}}`,
			`[DONE]`,
		} {
			fmt.Fprintf(rw, "data: %s\n\n", data)
		}
	}))
	defer srv.Close()

	// Any OpenAI-compatible endpoint: the base URL, a key, a provider name
	// for the model's key ("local/gpt-4o-mini").
	gpt, err := openai.New("gpt-4o-mini",
		openai.WithBaseURL(srv.URL+"/v1"),
		openai.WithAPIKey("sk-local"),
		openai.WithProvider("local"),
		openai.WithHTTPClient(srv.Client()))
	if err != nil {
		return err
	}
	r, err := driver.New(gpt,
		driver.WithRules(driver.OnStatus(http.StatusTooManyRequests).Retry()),
		driver.WithOnError(func(_ context.Context, a *driver.Attempt) {
			fmt.Fprintf(w, "attempt %d on %s failed: HTTP %d %s, Retry-After %v\n", a.Number, a.Model, a.Status, a.Class, a.RetryAfter)
		}))
	if err != nil {
		return err
	}
	m, err := driver.NewRetryableModel(r)
	if err != nil {
		return err
	}
	s, err := m.Stream(ctx, &driver.Request{Messages: []driver.Message{
		{Role: driver.RoleSystem, Content: []driver.Content{{Text: "Answer in one sentence."}}},
		{Role: driver.RoleUser, Content: []driver.Content{{Text: "What is the capital of France?"}}},
	}})
	if err != nil {
		return err
	}
	defer s.Close()
	for {
		p, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch p.Kind {
		case abi.KindResponseMeta:
			fmt.Fprintf(w, "[%s from %s]", p.Kind, p.Meta.ModelID)
		case abi.KindTextDelta:
			fmt.Fprint(w, p.Delta)
		case abi.KindFinish:
			fmt.Fprintf(w, "[%s]\nfinish: %s (raw %q), %d tokens in, %d out\n", p.Kind,
				p.Finish.Reason.Unified, p.Finish.Reason.Raw, p.Finish.Usage.InputTokens, p.Finish.Usage.OutputTokens)
		default:
			fmt.Fprintf(w, "[%s]", p.Kind)
		}
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
