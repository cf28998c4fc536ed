package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/retryhost/retryhost/policy"
	rhotel "github.com/retryhost/retryhost/provider/otel"
)

// TracerScope is the instrumentation scope of the gateway's server spans.
const TracerScope = "github.com/retryhost/retryhost/gateway"

// The server span's attributes beside the HTTP and GenAI conventions'.
const (
	attrRoute     = attribute.Key("retryhost.route")      // the route the client named
	attrModel     = attribute.Key("retryhost.model")      // the policy's model that answered
	attrOutcome   = attribute.Key("retryhost.outcome")    // what the client got, as the access log says it
	attrAttempts  = attribute.Key("retryhost.attempts")   // over every link of the chain
	attrFallbacks = attribute.Key("retryhost.fallbacks")  // links of the request's own fallbacks moved on to
	attrRequestID = attribute.Key("retryhost.request.id") // X-Request-Id
	attrKeyID     = attribute.Key("retryhost.key.id")     // the virtual key's id
	attrStream    = attribute.Key("retryhost.stream")
	attrMethod    = attribute.Key("http.request.method")
	attrHTTPRoute = attribute.Key("http.route")
	attrStatus    = attribute.Key("http.response.status_code")
)

// WithTracerProvider makes the gateway trace its requests on tp, after the
// OpenTelemetry conventions for HTTP servers and GenAI clients:
//
//   - a server span per request to a front door (POST /v1/chat/completions,
//     /v1/messages, /v1/responses, /v1/embeddings,
//     /v1/messages/count_tokens), named "POST <path>", with the status, the
//     outcome, the route asked for (gen_ai.request.model), the model that
//     answered, the attempts and the answer's usage; its status is Error
//     for a 5xx answer and for a stream cut after commit;
//   - under it, per link of the request's chain, provider/otel's request
//     span ("retryhost stream") and its client span per attempt ("chat
//     <model id>", with gen_ai.* attributes, the attempt's number, outcome
//     and error class, the commit as an event); calls into the policy's
//     Wasm plugins are events on the span they ran under.
//
// A request that carries a W3C traceparent continues the client's trace;
// each upstream request carries a traceparent naming the span it was made
// under (the attempt's), replacing any the request had. Sampling is tp's
// (a parent-based sampler follows the client's sampled flag).
//
// Install no other provider/otel observer through the Source's
// RunnerOptions: the gateway installs one. Default: no tracing, and no
// cost on the request path.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return errors.New("gateway: nil tracer provider")
		}
		c.tracerProvider = tp
		return nil
	}
}

// tracing is the gateway's tracing state, nil without WithTracerProvider.
type tracing struct {
	tracer    trace.Tracer
	telemetry *rhotel.Telemetry
	prop      propagation.TraceContext
}

func newTracing(tp trace.TracerProvider) (*tracing, error) {
	// The metrics provider/otel also records are the gateway's own on
	// /metrics already: none go to OpenTelemetry.
	tel, err := rhotel.New(rhotel.WithTracerProvider(tp), rhotel.WithMeterProvider(noop.NewMeterProvider()))
	if err != nil {
		return nil, err
	}
	return &tracing{tracer: tp.Tracer(TracerScope), telemetry: tel}, nil
}

// traced wraps a front door's handler in the request's server span.
func (t *tracing) traced(route string, h http.HandlerFunc) http.HandlerFunc {
	name, op := http.MethodPost+" "+route, operation(route)
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		name := name
		if r.Method != http.MethodPost { // a call on a stored response (GET, DELETE), or one answered 405
			name = r.Method + " " + route
		}
		ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attrMethod.String(r.Method), attrHTTPRoute.String(route), rhotel.AttrOperation.String(op)))
		defer span.End()
		h(w, r.WithContext(ctx))
		if span.IsRecording() {
			if m := w.Header().Get("X-Retryhost-Upstream-Model"); m != "" {
				span.SetAttributes(rhotel.AttrResponseModel.String(m))
			}
		}
	}
}

// operation is the GenAI operation a front door's route serves.
func operation(route string) string {
	switch route {
	case "/v1/embeddings":
		return "embeddings"
	case "/v1/messages/count_tokens":
		return "count_tokens"
	}
	return "chat"
}

// endSpan records what the access log says of a request on its server
// span, if it has one that records.
func endSpan(ctx context.Context, l *accessLog, keyID string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 14)
	attrs = append(attrs, attrStatus.Int(l.status), attrOutcome.String(l.outcome), attrStream.Bool(l.stream))
	if l.requestID != "" {
		attrs = append(attrs, attrRequestID.String(l.requestID))
	}
	if l.route != "" {
		attrs = append(attrs, attrRoute.String(l.route), rhotel.AttrRequestModel.String(l.route))
	}
	if l.model != "" {
		attrs = append(attrs, attrModel.String(l.model))
	}
	if l.attempts > 0 {
		attrs = append(attrs, attrAttempts.Int(l.attempts), attrFallbacks.Int(l.fallbacks))
	}
	if l.inputToks != 0 || l.outputToks != 0 {
		attrs = append(attrs, rhotel.AttrInputTokens.Int64(l.inputToks), rhotel.AttrOutputTokens.Int64(l.outputToks))
	}
	if keyID != "" {
		attrs = append(attrs, attrKeyID.String(keyID))
	}
	failed := l.status >= http.StatusInternalServerError || l.outcome == "truncated" || l.outcome == "plugin_failed"
	if failed {
		typ := l.errClass
		if typ == "" {
			typ = strconv.Itoa(l.status)
		}
		attrs = append(attrs, rhotel.AttrErrorType.String(typ))
		span.SetStatus(codes.Error, l.outcome)
	}
	span.SetAttributes(attrs...)
}

// pluginEvent marks a finished plugin call on the span it ran under: the
// attempt's for a transform or a condition on an attempt.
func pluginEvent(ctx context.Context, c policy.PluginCall) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{rhotel.AttrPlugin.String(c.Plugin), rhotel.AttrPluginOp.String(c.Op),
		attribute.Float64("retryhost.plugin.duration", c.Duration.Seconds())}
	if c.Failure != "" {
		attrs = append(attrs, rhotel.AttrPluginFailure.String(c.Failure))
	}
	span.AddEvent("retryhost.plugin.call", trace.WithAttributes(attrs...))
}

// traceparentTransport sends, with each upstream request, a W3C
// traceparent naming the span the request was made under.
type traceparentTransport struct {
	next http.RoundTripper
	prop propagation.TraceContext
}

func (t traceparentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !trace.SpanContextFromContext(r.Context()).IsValid() {
		return t.next.RoundTrip(r)
	}
	r = r.Clone(r.Context()) // a RoundTripper does not change its caller's request
	r.Header.Del("Tracestate")
	t.prop.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	return t.next.RoundTrip(r)
}

// CloseIdleConnections passes on to the transport below.
func (t traceparentTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// withTraceparent returns a copy of c whose requests carry a traceparent.
func withTraceparent(c *http.Client) *http.Client {
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	cc := *c
	cc.Transport = traceparentTransport{next: next}
	return &cc
}
