package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/anthropic"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
	rotel "github.com/retryhost/retryhost/provider/otel"
)

// A fail-over over the real SDK clients, traced: one request span with two
// attempt spans under it, the first failed (503 from OpenAI), the second
// answered (Anthropic), with the GenAI and retry attributes and no text.
func TestOtelFailOverSpanTree(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	tel, err := rotel.New(rotel.WithTracerProvider(tp))
	require.NoError(t, err)

	first := wiretest.Serve(t, transcript(t, "openai", "overloaded_503"))
	second := wiretest.Serve(t, transcript(t, "anthropic", "text"))
	rm := retryable(t, openaiModel(t, first.URL, first.Client()), anthropicModel(t, second),
		[]driver.Option{driver.WithObserver(tel)})
	const prompt = "PROMPT-e2e-3f9a"
	req := request()
	req.Messages[0].Content[0].Text = prompt
	text, _ := streamText(t, rm, req)
	require.Equal(t, anthropicAnswer, text)

	spans := exp.GetSpans()
	require.Len(t, spans, 3)
	a1, a2, root := spans[0], spans[1], spans[2]
	require.False(t, root.Parent.IsValid())
	require.Equal(t, root.SpanContext.SpanID(), a1.Parent.SpanID())
	require.Equal(t, root.SpanContext.SpanID(), a2.Parent.SpanID())

	at := func(s tracetest.SpanStub) map[string]string {
		m := map[string]string{}
		for _, a := range s.Attributes {
			m[string(a.Key)] = a.Value.Emit()
		}
		return m
	}
	r, f, ok := at(root), at(a1), at(a2)
	require.Equal(t, "retryhost stream", root.Name)
	require.Equal(t, "chat gpt-4o-mini", a1.Name)
	require.Equal(t, "chat claude-sonnet-4-5", a2.Name)
	// The request span ends describing the model that answered.
	require.Equal(t, "anthropic", r["gen_ai.provider.name"])
	require.Equal(t, "claude-sonnet-4-5", r["gen_ai.request.model"])
	require.Equal(t, "claude-sonnet-4-5-20250929", r["gen_ai.response.model"], "the model the provider says answered")
	require.Equal(t, "openai/gpt-4o-mini", r["retryhost.request.first_model"])
	require.Equal(t, "anthropic/claude-sonnet-4-5", r["retryhost.model"])
	require.Equal(t, "127.0.0.1", r["server.address"])
	require.Equal(t, second.URL[strings.LastIndex(second.URL, ":")+1:], r["server.port"])
	require.Equal(t, "127.0.0.1", f["server.address"])
	require.Equal(t, first.URL[strings.LastIndex(first.URL, ":")+1:], f["server.port"])
	require.Equal(t, "1", r["retryhost.failovers"])
	require.Equal(t, `["end_turn"]`, r["gen_ai.response.finish_reasons"])
	require.Equal(t, "12", r["gen_ai.usage.output_tokens"])

	require.Equal(t, "1", f["retryhost.attempt.number"])
	require.Equal(t, "error", f["retryhost.attempt.outcome"])
	require.Equal(t, "overloaded", f["retryhost.error.class"])
	require.Equal(t, "503", f["retryhost.http.status"])
	require.Equal(t, "anthropic/claude-sonnet-4-5", f["retryhost.retry.next_model"])
	require.Equal(t, codes.Error, a1.Status.Code)

	require.Equal(t, "2", ok["retryhost.attempt.number"])
	require.Equal(t, "anthropic", ok["gen_ai.provider.name"])
	require.Equal(t, "claude-sonnet-4-5", ok["gen_ai.request.model"])
	require.Equal(t, "success", ok["retryhost.attempt.outcome"])
	require.Equal(t, "true", ok["retryhost.attempt.failover"])
	require.Contains(t, ok, "retryhost.commit.latency")

	var all strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&all, "%s %s %v %v\n", s.Name, s.Status.Description, s.Attributes, s.Events)
	}
	require.NotContains(t, all.String(), prompt)
	for _, word := range []string{"Hello", "help you today"} {
		require.NotContains(t, all.String(), word, "no output text")
	}
}

// anthropic-sdk-go emits its own GenAI span per API call through the global
// TracerProvider, and with ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE=content
// puts the prompt and the output in it. The adapter turns that off unless
// asked (WithSDKTracing): a traced request has retryhost's spans only, one
// client span per attempt, and no text.
func TestOtelAnthropicSDKSpansOffByDefault(t *testing.T) {
	t.Setenv("ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE", "content")
	t.Setenv("ANTHROPIC_OPEN_TELEMETRY", "")
	const prompt = "PROMPT-sdk-span-51d0"
	run := func(t *testing.T, opts ...anthropic.Option) tracetest.SpanStubs {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		prev := otel.GetTracerProvider()
		otel.SetTracerProvider(tp)
		t.Cleanup(func() {
			otel.SetTracerProvider(prev)
			require.NoError(t, tp.Shutdown(context.Background()))
		})
		tel, err := rotel.New() // the global provider, as most services set it up
		require.NoError(t, err)
		srv := wiretest.Serve(t, transcript(t, "anthropic", "text"))
		m, err := anthropic.New("claude-sonnet-4-5", append([]anthropic.Option{anthropic.WithBaseURL(srv.URL),
			anthropic.WithAPIKey("sk-ant-test"), anthropic.WithHTTPClient(srv.Client())}, opts...)...)
		require.NoError(t, err)
		r, err := driver.New(m, driver.WithObserver(tel))
		require.NoError(t, err)
		rm, err := driver.NewRetryableModel(r)
		require.NoError(t, err)
		req := request()
		req.Messages[0].Content[0].Text = prompt
		text, _ := streamText(t, rm, req)
		require.Equal(t, anthropicAnswer, text)
		return exp.GetSpans()
	}
	dump := func(spans tracetest.SpanStubs) string {
		var all strings.Builder
		for _, s := range spans {
			fmt.Fprintf(&all, "%s [%s] %v %v\n", s.Name, s.InstrumentationScope.Name, s.Attributes, s.Events)
		}
		return all.String()
	}

	t.Run("default", func(t *testing.T) {
		spans := run(t)
		require.Len(t, spans, 2, "the request span and one attempt span:\n%s", dump(spans))
		clients := 0
		for _, s := range spans {
			require.Equal(t, rotel.ScopeName, s.InstrumentationScope.Name, "no span of the SDK's own")
			if s.SpanKind == trace.SpanKindClient {
				clients++
			}
		}
		require.Equal(t, 1, clients, "one client span per attempt")
		all := dump(spans)
		require.NotContains(t, all, prompt)
		for _, word := range []string{"Hello", "help you today"} {
			require.NotContains(t, all, word, "no output text")
		}
	})

	// What the default prevents: the SDK's span, with the content.
	t.Run("WithSDKTracing", func(t *testing.T) {
		spans := run(t, anthropic.WithSDKTracing())
		require.Len(t, spans, 3, dump(spans))
		require.Contains(t, dump(spans), prompt, "the SDK records content when the environment asks")
	})
}
