package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"
)

// fakeProvider is one loopback server speaking the OpenAI Chat Completions
// wire format: a JSON error with the real headers, or a stream of
// "data: {chunk}" server-sent events ending with "data: [DONE]".
type fakeProvider struct {
	name, model string
	// status, when not 0, answers every request with this HTTP error.
	status  int
	header  http.Header
	message string
	// chunks are streamed one per event, gap apart, when status is 0.
	chunks []string
	gap    time.Duration
}

func (p *fakeProvider) start() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(p.serve))
}

func (p *fakeProvider) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.NotFound(w, r)
		return
	}
	if p.status != 0 {
		for k, vs := range p.header {
			w.Header()[k] = vs
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(p.status)
		body, _ := json.Marshal(map[string]any{"error": map[string]any{
			"message": p.message, "type": "requests", "param": nil, "code": "rate_limit_exceeded"}})
		_, _ = w.Write(body)
		return
	}
	const id = "chatcmpl-demo"
	var body struct {
		Stream bool `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err == nil && !body.Stream {
		// A non-streaming call: the whole answer as one chat.completion.
		text := strings.Join(p.chunks, "")
		words := len(strings.Fields(text))
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion", "created": 1764374400, "model": p.model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": text}}},
			"usage": map[string]any{"prompt_tokens": 14, "completion_tokens": words, "total_tokens": 14 + words}})
		_, _ = w.Write(b)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	send := func(delta map[string]any, finish any, extra map[string]any) bool {
		chunk := map[string]any{"id": id, "object": "chat.completion.chunk", "created": 1764374400, "model": p.model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		for k, v := range extra {
			chunk[k] = v
		}
		b, _ := json.Marshal(chunk)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	for i, c := range p.chunks {
		delta := map[string]any{"content": c}
		if i == 0 {
			delta["role"] = "assistant"
		}
		if !send(delta, nil, nil) {
			return
		}
		if p.gap > 0 && i < len(p.chunks)-1 {
			select {
			case <-r.Context().Done(): // the client closed the stream
				return
			case <-time.After(p.gap):
			}
		}
	}
	if !send(map[string]any{}, "stop", nil) {
		return
	}
	words := len(strings.Fields(strings.Join(p.chunks, "")))
	usage := map[string]any{"prompt_tokens": 14, "completion_tokens": words, "total_tokens": 14 + words}
	b, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "created": 1764374400,
		"model": p.model, "choices": []any{}, "usage": usage})
	fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
}
