package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retryhost/retryhost/internal/testkit"
)

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// With a tracer provider, the calls into a transform plugin are events on
// the attempt's span, and a request refused before any attempt still has
// its server span, with its status and no error.
func TestTracingPluginEventsAndRefusals(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	r := newRig(t, defaultRules+`, "transforms": [{"plugin": {"builtin": "refusal", "fail": "open"}}]`, WithTracerProvider(tp))
	r.up["primary"].play(act{chunks: []string{"Paris", " is", " the capital."}})
	require.NoError(t, r.stream("primary").err)

	resp, body := r.rawStream(streamBody("no-such-route"))
	require.Equal(t, http.StatusNotFound, resp.StatusCode, body)

	var servers, attempts []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.SpanKind() {
		case trace.SpanKindServer:
			servers = append(servers, s)
		case trace.SpanKindClient:
			attempts = append(attempts, s)
		}
	}
	require.Len(t, attempts, 1)
	plugin := 0
	for _, ev := range attempts[0].Events() {
		if ev.Name == "retryhost.plugin.call" {
			plugin++
			a := map[attribute.Key]string{}
			for _, kv := range ev.Attributes {
				a[kv.Key] = kv.Value.Emit()
			}
			require.Equal(t, "refusal", a["retryhost.plugin"])
			require.NotEmpty(t, a["retryhost.plugin.op"])
		}
	}
	require.Positive(t, plugin, "the transform's calls are events of the attempt")

	require.Len(t, servers, 2)
	ok, refused := servers[0], servers[1]
	require.Equal(t, "POST /v1/chat/completions", ok.Name())
	require.Equal(t, ok.SpanContext().TraceID(), attempts[0].SpanContext().TraceID())
	require.EqualValues(t, 200, spanAttrs(ok)["http.response.status_code"].AsInt64())
	require.EqualValues(t, 404, spanAttrs(refused)["http.response.status_code"].AsInt64())
	require.Equal(t, "client_error", spanAttrs(refused)["retryhost.outcome"].AsString())
	require.Equal(t, codes.Unset, refused.Status().Code, "a client's mistake is no server error")
	require.False(t, refused.Parent().IsValid(), "no traceparent: a trace of its own")
}

// A 5xx answer marks its server span as an error, with the error's class.
func TestTracingUpstreamFailureIsAnError(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	r := newRig(t, `"rules": []`, WithTracerProvider(tp))
	r.up["primary"].play(act{status: http.StatusBadGateway})
	resp, body := r.rawPost("/v1/chat/completions", `{"model":"primary","messages":[{"role":"user","content":"hi"}]}`)
	require.GreaterOrEqual(t, resp.StatusCode, 500, body)
	var server sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindServer {
			server = s
		}
	}
	require.NotNil(t, server)
	require.Equal(t, codes.Error, server.Status().Code)
	require.NotEmpty(t, spanAttrs(server)["error.type"].AsString())
	require.Equal(t, "upstream_error", spanAttrs(server)["retryhost.outcome"].AsString())
}

// A client's traceparent with its sampled flag off is followed (the
// default sampler is parent-based): nothing is recorded, and the upstream
// still gets the client's trace id, unsampled. A forwarded door's upstream
// request names the server span: it has no attempt span.
func TestTracingTraceparentOnEveryUpstreamRequest(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	r := newRig(t, "", WithTracerProvider(tp))

	const traceID = "0af7651916cd43dd8448eb211c80319c"
	resp, body := r.rawStream(streamBody("primary"), "Traceparent", "00-"+traceID+"-b7ad6b7169203331-00")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Empty(t, rec.Ended(), "an unsampled client's request records nothing")
	hits := r.up["primary"].requests()
	require.Len(t, hits, 1)
	tp0 := hits[0].header.Get("Traceparent")
	require.Regexp(t, `^00-`+traceID+`-[0-9a-f]{16}-00$`, tp0)
	require.NotContains(t, tp0, "b7ad6b7169203331", "the upstream's parent is the gateway's span, not the client's")

	var (
		mu      sync.Mutex
		parents []string
	)
	count := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		parents = append(parents, req.Header.Get("Traceparent"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"input_tokens": 3}`)
	}))
	t.Cleanup(count.Close)
	ar := &rig{t: t, up: map[string]*upstream{}, logs: &testkit.LogBuffer{}}
	ar.serve(`{"models": [{"name": "claude", "provider": "anthropic", "model": "claude-x", "base_url": "`+count.URL+`", "api_key_env": "K"}]}`,
		WithTracerProvider(tp))
	resp, body = ar.rawPost("/v1/messages/count_tokens", `{"model":"claude","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, parents, 1)
	var server sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindServer {
			server = s
		}
	}
	require.NotNil(t, server)
	require.Equal(t, "POST /v1/messages/count_tokens", server.Name())
	require.Equal(t, "count_tokens", spanAttrs(server)["gen_ai.operation.name"].AsString())
	require.Equal(t, "00-"+server.SpanContext().TraceID().String()+"-"+server.SpanContext().SpanID().String()+"-01",
		parents[0])
}
