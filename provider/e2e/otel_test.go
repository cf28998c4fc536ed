package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retryhost/retryhost/driver"
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
	s, err := rm.Stream(t.Context(), req)
	require.NoError(t, err)
	text, _, err := read(t, s)
	require.NoError(t, err)
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
	require.Equal(t, "openai", r["gen_ai.provider.name"])
	require.Equal(t, "gpt-4o-mini", r["gen_ai.request.model"])
	require.Equal(t, "anthropic/claude-sonnet-4-5", r["retryhost.model"])
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
