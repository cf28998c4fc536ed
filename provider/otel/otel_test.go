package otel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
	rotel "github.com/retryhost/retryhost/provider/otel"
)

const (
	secretPrompt = "PROMPT-SECRET-8c1f"
	secretOutput = "OUTPUT-SECRET-77ad"
)

// rig is a Telemetry on an in-memory exporter and a manual reader.
type rig struct {
	tel    *rotel.Telemetry
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		require.NoError(t, tp.Shutdown(context.Background()))
		require.NoError(t, mp.Shutdown(context.Background()))
	})
	var err error
	r.tel, err = rotel.New(rotel.WithTracerProvider(tp), rotel.WithMeterProvider(mp))
	require.NoError(t, err)
	return r
}

// metrics returns every data point's value by "name{k=v,...}".
func (r *rig) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.reader.Collect(context.Background(), &rm))
	out := map[string]float64{}
	label := func(name string, set attribute.Set) string {
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.Emit()))
		}
		return name + "{" + strings.Join(kv, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[label(m.Name, p.Attributes)] += float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[label(m.Name, p.Attributes)+".count"] += float64(p.Count)
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					out[label(m.Name, p.Attributes)+".count"] += float64(p.Count)
					out[label(m.Name, p.Attributes)+".sum"] += float64(p.Sum)
				}
			}
		}
	}
	return out
}

func attrs(s tracetest.SpanStub) map[string]string {
	out := map[string]string{}
	for _, a := range s.Attributes {
		out[string(a.Key)] = a.Value.Emit()
	}
	return out
}

// textModel streams one answer, or fails to open with err.
type textModel struct {
	key    string
	err    error
	text   string
	finish *abi.Finish
	// respModel is the model id its answers report (ResponseMeta.ModelID).
	respModel string
	// host and port are the server it says it calls.
	host string
	port int
}

func (m *textModel) Key() string { return m.key }

func (m *textModel) ServerAddress() (string, int) { return m.host, m.port }

func (m *textModel) Generate(ctx context.Context, req *driver.Request) (*driver.Response, error) {
	if m.err != nil {
		return nil, m.err
	}
	return &driver.Response{
		Content: []driver.Part{{Kind: abi.KindTextDelta, Delta: m.text}},
		Finish:  m.finish.Reason, Usage: m.finish.Usage,
		Meta: abi.ResponseMeta{ModelID: m.respModel},
	}, nil
}

func (m *textModel) Stream(ctx context.Context, req *driver.Request) (driver.Stream, error) {
	if m.err != nil {
		return nil, m.err
	}
	return &sliceStream{parts: []driver.Part{
		{Kind: abi.KindStreamStart}, {Kind: abi.KindResponseMeta, Meta: &abi.ResponseMeta{ModelID: m.respModel}},
		{Kind: abi.KindTextStart, ID: "t"},
		{Kind: abi.KindTextDelta, ID: "t", Delta: m.text}, {Kind: abi.KindTextEnd, ID: "t"},
		{Kind: abi.KindFinish, Finish: m.finish},
	}}, nil
}

type sliceStream struct {
	mu    sync.Mutex
	parts []driver.Part
}

func (s *sliceStream) Recv() (driver.Part, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.parts) == 0 {
		return driver.Part{}, io.EOF
	}
	p := s.parts[0]
	s.parts = s.parts[1:]
	return p, nil
}

func (s *sliceStream) Close() error { return nil }

func overloaded() error {
	return &driver.ProviderError{Provider: "openai", Status: 503, Message: "overloaded: " + secretPrompt, Retryable: true}
}

func TestTelemetry_failOverSpanTree(t *testing.T) {
	for _, op := range []string{driver.OpGenerate, driver.OpStream} {
		t.Run(op, func(t *testing.T) {
			rg := newRig(t)
			first := &textModel{key: "openai/gpt-4o", err: overloaded(), host: "api.openai.com", port: 443}
			second := &textModel{key: "anthropic/claude-sonnet-4", text: secretOutput, respModel: "claude-sonnet-4-20250514",
				host: "gateway.internal", port: 8443,
				finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop, Raw: "end_turn"}, Usage: abi.Usage{InputTokens: 12, OutputTokens: 3}}}
			r, err := driver.New(first, driver.WithObserver(rg.tel), driver.WithRules(driver.Fallback(second)))
			require.NoError(t, err)
			req := &driver.Request{System: secretPrompt, Messages: []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: secretPrompt}}}}}
			var got string
			if op == driver.OpGenerate {
				resp, err := r.Generate(t.Context(), req)
				require.NoError(t, err)
				got = resp.Text()
			} else {
				rm, err := driver.NewRetryableModel(r)
				require.NoError(t, err)
				s, err := rm.Stream(t.Context(), req)
				require.NoError(t, err)
				for {
					p, err := s.Recv()
					if err == io.EOF {
						break
					}
					require.NoError(t, err)
					got += p.Delta
				}
			}
			require.Equal(t, secretOutput, got)

			spans := rg.spans.GetSpans()
			require.Len(t, spans, 3, "one request span, two attempt spans")
			// Ended in order: attempt 1, attempt 2, request.
			a1, a2, req0 := spans[0], spans[1], spans[2]
			require.False(t, req0.Parent.IsValid(), "the request span is the root")
			for _, a := range []tracetest.SpanStub{a1, a2} {
				require.Equal(t, req0.SpanContext.SpanID(), a.Parent.SpanID(), "attempt spans are children of the request span")
				require.Equal(t, req0.SpanContext.TraceID(), a.SpanContext.TraceID())
				require.Equal(t, trace.SpanKindClient, a.SpanKind)
			}
			// The request span never reads as one more attempt.
			require.Equal(t, "retryhost "+op, req0.Name)
			require.Equal(t, trace.SpanKindInternal, req0.SpanKind)
			require.Equal(t, "chat gpt-4o", a1.Name)
			require.Equal(t, "chat claude-sonnet-4", a2.Name)

			// The request span describes the model that answered.
			ra := attrs(req0)
			require.Equal(t, "chat", ra["gen_ai.operation.name"])
			require.Equal(t, "anthropic", ra["gen_ai.provider.name"])
			require.Equal(t, "claude-sonnet-4", ra["gen_ai.request.model"])
			require.Equal(t, "claude-sonnet-4-20250514", ra["gen_ai.response.model"])
			require.Equal(t, "gateway.internal", ra["server.address"])
			require.Equal(t, "8443", ra["server.port"])
			require.Equal(t, "openai/gpt-4o", ra["retryhost.request.first_model"])
			require.Equal(t, op, ra["retryhost.op"])
			require.Equal(t, "anthropic/claude-sonnet-4", ra["retryhost.model"], "the request's answering model")
			require.Equal(t, "2", ra["retryhost.attempts"])
			require.Equal(t, "1", ra["retryhost.failovers"])
			require.Equal(t, "success", ra["retryhost.outcome"])
			require.Equal(t, `["end_turn"]`, ra["gen_ai.response.finish_reasons"])
			require.Equal(t, "12", ra["gen_ai.usage.input_tokens"])
			require.Equal(t, "3", ra["gen_ai.usage.output_tokens"])
			require.Equal(t, codes.Unset, req0.Status.Code)

			f := attrs(a1)
			require.Equal(t, "1", f["retryhost.attempt.number"])
			require.Equal(t, "openai", f["gen_ai.provider.name"])
			require.Equal(t, "error", f["retryhost.attempt.outcome"])
			require.Equal(t, "overloaded", f["retryhost.error.class"])
			require.Equal(t, "503", f["retryhost.http.status"])
			require.Equal(t, "anthropic/claude-sonnet-4", f["retryhost.retry.next_model"])
			require.Equal(t, "api.openai.com", f["server.address"])
			require.Equal(t, "443", f["server.port"])
			require.NotContains(t, f, "gen_ai.response.model", "a failed attempt has no answering model")
			require.Equal(t, "0", f["retryhost.retry.delay"])
			require.Equal(t, codes.Error, a1.Status.Code)

			s := attrs(a2)
			require.Equal(t, "2", s["retryhost.attempt.number"])
			require.Equal(t, "anthropic", s["gen_ai.provider.name"])
			require.Equal(t, "claude-sonnet-4", s["gen_ai.request.model"])
			require.Equal(t, "true", s["retryhost.attempt.failover"])
			require.Equal(t, "success", s["retryhost.attempt.outcome"])
			require.Contains(t, s, "retryhost.commit.latency")
			require.Equal(t, `["end_turn"]`, s["gen_ai.response.finish_reasons"])
			require.Equal(t, "claude-sonnet-4-20250514", s["gen_ai.response.model"])
			require.Equal(t, "gateway.internal", s["server.address"])
			require.Equal(t, "8443", s["server.port"])
			require.Len(t, a2.Events, 1)
			require.Equal(t, "retryhost.commit", a2.Events[0].Name)

			m := rg.metrics(t)
			require.Equal(t, 1.0, m["retryhost.requests{retryhost.outcome=success}"])
			require.Equal(t, 1.0, m["retryhost.attempts{error.type=overloaded,retryhost.attempt.outcome=error,retryhost.model=openai/gpt-4o}"])
			require.Equal(t, 1.0, m["retryhost.attempts{retryhost.attempt.outcome=success,retryhost.model=anthropic/claude-sonnet-4}"])
			require.Equal(t, 1.0, m["retryhost.failovers{retryhost.model=anthropic/claude-sonnet-4}"])
			require.Equal(t, 1.0, m["retryhost.commits{retryhost.model=anthropic/claude-sonnet-4}"])
			require.Equal(t, 1.0, m["retryhost.commit.latency{retryhost.model=anthropic/claude-sonnet-4}.count"])
			require.Equal(t, 1.0, m["gen_ai.client.operation.duration{gen_ai.operation.name=chat,gen_ai.provider.name=openai,gen_ai.request.model=gpt-4o,"+
				"gen_ai.response.model=claude-sonnet-4-20250514,retryhost.op="+op+"}.count"])
			tokens := "gen_ai.client.token.usage{gen_ai.operation.name=chat,gen_ai.provider.name=anthropic,gen_ai.request.model=claude-sonnet-4," +
				"gen_ai.response.model=claude-sonnet-4-20250514,gen_ai.token.type=%s,server.address=gateway.internal,server.port=8443}"
			require.Equal(t, 1.0, m[fmt.Sprintf(tokens, "input")+".count"])
			require.Equal(t, 12.0, m[fmt.Sprintf(tokens, "input")+".sum"])
			require.Equal(t, 3.0, m[fmt.Sprintf(tokens, "output")+".sum"])

			requireNoContent(t, spans, m)
		})
	}
}

// requireNoContent asserts that neither the prompt nor the output (nor an
// error message quoting the prompt) reached any span or metric.
func requireNoContent(t *testing.T, spans tracetest.SpanStubs, m map[string]float64) {
	t.Helper()
	var all strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&all, "%s %s %s\n", s.Name, s.Status.Description, attrs(s))
		for _, e := range s.Events {
			fmt.Fprintf(&all, "%s %v\n", e.Name, e.Attributes)
		}
	}
	for k := range m {
		all.WriteString(k + "\n")
	}
	require.NotContains(t, all.String(), secretPrompt)
	require.NotContains(t, all.String(), secretOutput)
	require.NotContains(t, all.String(), "overloaded: ", "error messages are not recorded")
}

func TestTelemetry_failedRequest(t *testing.T) {
	rg := newRig(t)
	r, err := driver.New(&textModel{key: "openai/gpt-4o", err: overloaded()}, driver.WithObserver(rg.tel))
	require.NoError(t, err)
	_, err = r.Generate(t.Context(), &driver.Request{})
	require.Error(t, err)
	spans := rg.spans.GetSpans()
	require.Len(t, spans, 2)
	req := attrs(spans[1])
	require.Equal(t, "error", req["retryhost.outcome"])
	require.Equal(t, "overloaded", req["error.type"])
	require.Equal(t, codes.Error, spans[1].Status.Code)
	m := rg.metrics(t)
	require.Equal(t, 1.0, m["retryhost.requests{retryhost.outcome=error}"])
	requireNoContent(t, spans, m)
}

func TestTelemetry_pluginCalls(t *testing.T) {
	rg := newRig(t)
	ctx := t.Context()
	for _, c := range []host.PluginCall{
		{Plugin: "refusal", Op: "part"},
		{Plugin: "refusal", Op: "part"},
		{Plugin: "refusal", Op: "part", Err: errors.New("x"), Failure: "trap"},
		{Plugin: "refusal", Op: "open", Err: errors.New("x"), Failure: "disabled"},
	} {
		rg.tel.PluginCall(ctx, c)
	}
	m := rg.metrics(t)
	require.Equal(t, 3.0, m["retryhost.plugin.calls{retryhost.plugin=refusal,retryhost.plugin.op=part}"])
	require.Equal(t, 1.0, m["retryhost.plugin.calls{retryhost.plugin=refusal,retryhost.plugin.op=open}"])
	require.Equal(t, 1.0, m["retryhost.plugin.failures{retryhost.plugin=refusal,retryhost.plugin.failure=trap,retryhost.plugin.op=part}"])
	require.Equal(t, 1.0, m["retryhost.plugin.failures{retryhost.plugin=refusal,retryhost.plugin.failure=disabled,retryhost.plugin.op=open}"])
}

// The host reports its plugin calls to the same Telemetry: a trapping
// plugin counts as a call and a failure of kind "trap".
func TestTelemetry_hostPluginFailures(t *testing.T) {
	rg := newRig(t)
	ctx := context.Background()
	rt, err := host.New(ctx, host.WithObserver(rg.tel))
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.Close(ctx)) }()
	wasm, err := os.ReadFile(filepath.Join("..", "..", "host", "testdata", "trap.wasm"))
	require.NoError(t, err)
	p, err := rt.Load(ctx, "trap", wasm)
	require.NoError(t, err)
	_, err = p.Decide(ctx, &abi.Attempt{Number: 1})
	require.ErrorIs(t, err, host.ErrTrap)

	m := rg.metrics(t)
	require.Equal(t, 1.0, m["retryhost.plugin.calls{retryhost.plugin=trap,retryhost.plugin.op=decide}"])
	require.Equal(t, 1.0, m["retryhost.plugin.failures{retryhost.plugin=trap,retryhost.plugin.failure=trap,retryhost.plugin.op=decide}"])
}
