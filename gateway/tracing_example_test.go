package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retryhost/retryhost/gateway"
	"github.com/retryhost/retryhost/policy"
)

// Trace the gateway's requests on a tracer provider of your own: a server
// span per request, and under it the policy request's span and one span
// per attempt. Here the first upstream fails and the second answers.
func ExampleWithTracerProvider() {
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":{"message":"overloaded","type":"server_error"}}`, http.StatusServiceUnavailable)
	}))
	defer down.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Paris\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	pol := fmt.Sprintf(`{"models": [
		{"name": "primary", "provider": "openai", "model": "gpt-4o", "base_url": %q, "api_key_env": "KEY"},
		{"name": "backup", "provider": "openai", "model": "gpt-4o", "base_url": %q, "api_key_env": "KEY"}],
		"rules": [{"when": {"status": [503]}, "action": "switch", "model": "backup"}]}`, down.URL+"/v1", up.URL+"/v1")

	// An exporter of your own goes here (sdktrace.WithBatcher(exp)).
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx := context.Background()
	defer func() { _ = tp.Shutdown(ctx) }()
	gw, err := gateway.New(ctx, gateway.Bytes("policy.json", []byte(pol), policy.Options{Getenv: func(string) string { return "sk" }}),
		gateway.WithTracerProvider(tp))
	if err != nil {
		log.Fatal(err)
	}
	defer gw.Close(ctx)
	srv := httptest.NewServer(gw)
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model": "primary", "messages": [{"role": "user", "content": "capital of France?"}]}`))
	if err != nil {
		log.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	for _, s := range rec.Ended() { // in the order they ended
		fmt.Println(s.SpanKind(), s.Name(), s.Status().Code)
	}
	// Output:
	// client chat gpt-4o Error
	// client chat gpt-4o Unset
	// internal retryhost stream Unset
	// server POST /v1/chat/completions Unset
}
