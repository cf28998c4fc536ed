package main

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver, as a collector serves it on
// /v1/traces: it decodes each ExportTraceServiceRequest (protobuf,
// gzipped or not) and keeps its spans with their resource's attributes.
// With hold set, each export waits until release is closed or the
// exporter gives up on it.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource map[string]string
	exports  int
	hold     bool
	release  chan struct{}
}

func newOTLPReceiver(t *testing.T, hold bool) *otlpReceiver {
	rc := &otlpReceiver{hold: hold, release: make(chan struct{}), resource: map[string]string{}}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want a protobuf POST to /v1/traces", http.StatusBadRequest)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.exports++
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				rc.resource[kv.Key] = kv.Value.GetStringValue()
			}
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		if rc.hold {
			select {
			case <-rc.release:
			case <-r.Context().Done():
				return
			}
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(func() {
		close(rc.release)
		rc.Close()
	})
	return rc
}

func (rc *otlpReceiver) got() ([]*tracepb.Span, map[string]string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	res := map[string]string{}
	for k, v := range rc.resource {
		res[k] = v
	}
	return append([]*tracepb.Span(nil), rc.spans...), res
}

// attrs is a span's attributes as strings.
func attrs(s *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes {
		m[kv.Key] = anyString(kv.Value)
	}
	return m
}

func anyString(v *commonpb.AnyValue) string {
	switch x := v.Value.(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	}
	return v.String()
}

// tracedUpstream is an OpenAI-compatible upstream that answers status
// (an OpenAI error) or, at 200, streams an answer from model
// "gpt-test-2025" with its usage, and records the traceparent of each
// request.
type tracedUpstream struct {
	*httptest.Server
	mu      sync.Mutex
	parents []string
}

func newTracedUpstream(t *testing.T, status int) *tracedUpstream {
	u := &tracedUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		u.parents = append(u.parents, r.Header.Get("Traceparent"))
		u.mu.Unlock()
		if status != http.StatusOK {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprint(w, `{"error":{"message":"unavailable","type":"server_error"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-test-2025\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hello\"},\"finish_reason\":null}]}\n\n")
		fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-test-2025\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
		fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-test-2025\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *tracedUpstream) traceparents() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.parents...)
}

// clearOTELEnv unsets the OTEL_* variables the test's environment may
// hold, for the test's duration.
func clearOTELEnv(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
		"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_BSP_SCHEDULE_DELAY"} {
		t.Setenv(k, "") // restored at the end
		require.NoError(t, os.Unsetenv(k))
	}
}

// serve with OTEL_EXPORTER_OTLP_ENDPOINT exports, over OTLP/HTTP, a server
// span per request continuing the client's trace, the driver's request
// span under it and a client span per attempt under that: a fail-over is
// two attempts, the first with its error. Each upstream request carries a
// traceparent whose parent is its attempt's span.
func TestServe_TracesOverOTLP(t *testing.T) {
	clearOTELEnv(t)
	rc := newOTLPReceiver(t, false)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rc.URL)
	t.Setenv("OTEL_SERVICE_NAME", "gateway-under-test")
	up, fb := newTracedUpstream(t, http.StatusServiceUnavailable), newTracedUpstream(t, http.StatusOK)
	base, stderr, stop := startServe(t, "--upstream", up.URL+"/v1", "--fallback", fb.URL+"/v1")
	require.Contains(t, stderr.String(), "exporting traces over OTLP/HTTP to "+rc.URL)

	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"any-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-"+traceID+"-"+clientSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), "hello")
	require.Equal(t, exitOK, stop(), "the stop flushes the spans")

	spans, res := rc.got()
	require.Equal(t, "gateway-under-test", res["service.name"])
	byID := map[string]*tracepb.Span{}
	for _, s := range spans {
		require.Equal(t, traceID, hex.EncodeToString(s.TraceId), "every span continues the client's trace: %s", s.Name)
		byID[hex.EncodeToString(s.SpanId)] = s
	}
	var server *tracepb.Span
	for _, s := range spans {
		if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
			require.Nil(t, server, "one server span")
			server = s
		}
	}
	require.NotNil(t, server, "%v", spans)
	require.Equal(t, "POST /v1/chat/completions", server.Name)
	require.Equal(t, clientSpan, hex.EncodeToString(server.ParentSpanId), "the server span's parent is the client's span")
	sa := attrs(server)
	require.Equal(t, "200", sa["http.response.status_code"])
	require.Equal(t, "/v1/chat/completions", sa["http.route"])
	require.Equal(t, "chat", sa["gen_ai.operation.name"])
	require.Equal(t, "any-model", sa["gen_ai.request.model"])
	require.Equal(t, "gpt-test-2025", sa["gen_ai.response.model"])
	require.Equal(t, "ok", sa["retryhost.outcome"])
	require.Equal(t, "2", sa["retryhost.attempts"])
	require.Equal(t, "7", sa["gen_ai.usage.input_tokens"])
	require.Equal(t, "3", sa["gen_ai.usage.output_tokens"])
	require.NotEqual(t, tracepb.Status_STATUS_CODE_ERROR, server.GetStatus().GetCode())

	var request *tracepb.Span
	var attempts []*tracepb.Span
	for _, s := range spans {
		switch {
		case s.Name == "retryhost stream":
			request = s
		case s.Kind == tracepb.Span_SPAN_KIND_CLIENT:
			attempts = append(attempts, s)
		}
	}
	require.NotNil(t, request)
	require.Equal(t, hex.EncodeToString(server.SpanId), hex.EncodeToString(request.ParentSpanId), "the driver's request span is under the server span")
	require.Len(t, attempts, 2, "a fail-over is two attempts")
	first, second := attempts[0], attempts[1]
	if attrs(first)["retryhost.attempt.number"] != "1" {
		first, second = second, first
	}
	for _, a := range attempts {
		require.Equal(t, hex.EncodeToString(request.SpanId), hex.EncodeToString(a.ParentSpanId), "an attempt is under its request span")
		aa := attrs(a)
		require.NotEmpty(t, aa["gen_ai.system"]) // a bare URL is an OpenAI-compatible server
		require.Equal(t, "chat", aa["gen_ai.operation.name"])
		require.NotEmpty(t, aa["gen_ai.request.model"])
		require.Equal(t, "127.0.0.1", aa["server.address"])
	}
	fa, sa2 := attrs(first), attrs(second)
	require.Equal(t, "1", fa["retryhost.attempt.number"])
	require.Equal(t, "error", fa["retryhost.attempt.outcome"])
	require.Equal(t, "503", fa["retryhost.http.status"])
	require.NotEmpty(t, fa["error.type"])
	require.Equal(t, tracepb.Status_STATUS_CODE_ERROR, first.GetStatus().GetCode())
	require.Equal(t, "2", sa2["retryhost.attempt.number"])
	require.Equal(t, "success", sa2["retryhost.attempt.outcome"])
	require.Equal(t, "true", sa2["retryhost.attempt.failover"])
	require.Equal(t, "gpt-test-2025", sa2["gen_ai.response.model"])
	require.Equal(t, "7", sa2["gen_ai.usage.input_tokens"])
	require.Equal(t, "3", sa2["gen_ai.usage.output_tokens"])
	require.Empty(t, sa2["error.type"])
	committed := false
	for _, ev := range second.Events {
		committed = committed || ev.Name == "retryhost.commit"
	}
	require.True(t, committed, "the commit is an event of the attempt that answered")

	// Each upstream saw a traceparent naming its attempt's span, in the
	// client's trace.
	for _, c := range []struct {
		up      *tracedUpstream
		attempt *tracepb.Span
	}{{up, first}, {fb, second}} {
		tps := c.up.traceparents()
		require.Len(t, tps, 1)
		require.Equal(t, "00-"+traceID+"-"+hex.EncodeToString(c.attempt.SpanId)+"-01", tps[0])
	}
}

// A collector that takes spans and never answers holds no request: the
// batch processor's queue (OTEL_BSP_MAX_QUEUE_SIZE) fills and the spans
// past it are dropped, and the stop gives up on the export after its
// flush timeout.
func TestServe_TracesQueueFullDropsSpans(t *testing.T) {
	clearOTELEnv(t)
	old := traceFlushTimeout
	traceFlushTimeout = 100 * time.Millisecond
	t.Cleanup(func() { traceFlushTimeout = old })
	rc := newOTLPReceiver(t, true)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rc.URL+"/v1/traces")
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "2")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "1")
	fb := newTracedUpstream(t, http.StatusOK)
	base, stderr, stop := startServe(t, "--upstream", fb.URL+"/v1")
	const requests = 6 // 3 spans each
	for i := range requests {
		resp, body := post(t, base+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i, body)
	}
	require.Equal(t, exitOK, stop())
	spans, _ := rc.got()
	require.NotEmpty(t, spans, "the collector got the first export")
	require.Less(t, len(spans), 3*requests, "the spans past the queue were dropped")
	require.Contains(t, stderr.String(), "traces not all exported at stop")
}

// An unreachable collector fails no request and holds no stop.
func TestServe_TracesCollectorDown(t *testing.T) {
	clearOTELEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	fb := newTracedUpstream(t, http.StatusOK)
	base, _, stop := startServe(t, "--upstream", fb.URL+"/v1")
	resp, body := post(t, base+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, exitOK, stop())
}

// Trace settings serve does not honour are refused at start, naming the
// variable.
func TestServe_TracesSettingsRefused(t *testing.T) {
	for _, c := range []struct{ key, value, want string }{
		{"OTEL_TRACES_EXPORTER", "zipkin", `OTEL_TRACES_EXPORTER="zipkin": serve exports traces over OTLP only`},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", `OTEL_EXPORTER_OTLP_PROTOCOL="grpc": serve exports traces over OTLP/HTTP with protobuf only`},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318", `OTEL_EXPORTER_OTLP_ENDPOINT="collector:4318": want an http:// or https:// URL`},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://", `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://": want an http:// or https:// URL`},
	} {
		t.Run(c.key, func(t *testing.T) {
			clearOTELEnv(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv(c.key, c.value)
			var stderr strings.Builder
			require.Equal(t, exitInput, dispatch(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1/v1"}, io.Discard, &stderr))
			require.Contains(t, stderr.String(), c.want)
		})
	}
}

// tracesFromEnv turns tracing on and off as the OpenTelemetry variables
// say; off is the default.
func TestTracesFromEnv(t *testing.T) {
	for _, c := range []struct {
		name     string
		env      map[string]string
		endpoint string // "": off
	}{
		{name: "nothing set is off", env: nil},
		{name: "an endpoint turns it on", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, endpoint: "http://127.0.0.1:4318"},
		{name: "the traces endpoint wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/v1/traces"}, endpoint: "http://b:4318/v1/traces"},
		{name: "otlp alone goes to the default endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, endpoint: "http://localhost:4318"},
		{name: "none turns it off", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318"}},
		{name: "the SDK disabled is off", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318"}},
		{name: "http/protobuf is accepted", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318"}, endpoint: "http://a:4318"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, err := tracesFromEnv(context.Background(), func(k string) string { return c.env[k] })
			require.NoError(t, err)
			if c.endpoint == "" {
				require.Nil(t, tr)
				return
			}
			require.NotNil(t, tr)
			require.Equal(t, c.endpoint, tr.endpoint)
			require.NoError(t, tr.tp.Shutdown(context.Background()))
		})
	}
}
