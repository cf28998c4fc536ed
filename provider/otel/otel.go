// Package otel records retryhost's requests, attempts, commits and plugin
// calls as OpenTelemetry spans and metrics.
//
// A [Telemetry] is a [driver.Observer] (install it with driver.WithObserver)
// and a [host.Observer] (install it with host.WithObserver). Each request
// gets an internal span named "retryhost <op>" ("retryhost stream",
// "retryhost generate", "retryhost do"), and each attempt a child client
// span named as the GenAI semantic conventions name an inference span,
// "chat <model id>". Both carry the conventions' attributes
// (gen_ai.operation.name, gen_ai.provider.name, gen_ai.request.model,
// gen_ai.response.model, gen_ai.response.finish_reasons,
// gen_ai.usage.input_tokens / output_tokens, server.address / server.port
// for a model that says which server it calls) and retryhost's own under
// the "retryhost." prefix. The request span starts with the first model's
// attributes and ends with those of the model that answered (or was tried
// last); retryhost.request.first_model keeps the first. The attempt span
// is the parent of the provider's HTTP spans when the provider client is
// instrumented, because the model is called with a context derived from
// it.
//
// A model says which server it calls by implementing
//
//	ServerAddress() (host string, port int)
//
// as the adapters in provider/openai and provider/anthropic do.
//
// No prompt or output text is ever recorded, nor error messages (which may
// quote either): failures are described by their class, status code and
// deadline only.
//
// # Metrics
//
//	retryhost.requests          counter    requests by retryhost.outcome (success, error)
//	retryhost.attempts          counter    attempts by retryhost.model, retryhost.attempt.outcome, error.type
//	retryhost.failovers         counter    attempts on another model than the one before, by retryhost.model (the new one)
//	retryhost.commits           counter    commits by retryhost.model
//	retryhost.commit.latency    histogram  seconds from the committed attempt's start to commit, by retryhost.model
//	gen_ai.client.operation.duration  histogram  seconds per request, by gen_ai.* and error.type
//	gen_ai.client.token.usage         histogram  tokens per attempt that reported usage, by gen_ai.token.type (input, output), gen_ai.*, server.*
//	retryhost.plugin.calls      counter    plugin calls by retryhost.plugin, retryhost.plugin.op
//	retryhost.plugin.failures   counter    failed plugin calls by retryhost.plugin, retryhost.plugin.op, retryhost.plugin.failure
//
// # Stability
//
// Experimental: the OpenTelemetry GenAI semantic conventions are still in
// development, and the span names, attributes and metrics here follow them
// as they change (each change is listed in CHANGELOG.md). The Telemetry
// type and its options are not expected to change.
package otel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/retryhost/retryhost/provider/otel"

// The attribute keys this package records.
const (
	AttrOperation     = attribute.Key("gen_ai.operation.name")
	AttrProvider      = attribute.Key("gen_ai.provider.name")
	AttrSystem        = attribute.Key("gen_ai.system") // the older name of gen_ai.provider.name, recorded too
	AttrRequestModel  = attribute.Key("gen_ai.request.model")
	AttrResponseModel = attribute.Key("gen_ai.response.model")
	AttrTokenType     = attribute.Key("gen_ai.token.type") // input, output
	AttrServerAddress = attribute.Key("server.address")
	AttrServerPort    = attribute.Key("server.port")
	AttrFinishReasons = attribute.Key("gen_ai.response.finish_reasons")
	AttrInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	AttrOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	AttrErrorType     = attribute.Key("error.type")

	AttrOp             = attribute.Key("retryhost.op") // do, generate, stream
	AttrModel          = attribute.Key("retryhost.model")
	AttrFirstModel     = attribute.Key("retryhost.request.first_model") // the request span's first model key
	AttrAttempt        = attribute.Key("retryhost.attempt.number")
	AttrAttemptOutcome = attribute.Key("retryhost.attempt.outcome") // success, error, rejected, truncated
	AttrFailOver       = attribute.Key("retryhost.attempt.failover")
	AttrDelayBefore    = attribute.Key("retryhost.attempt.delay_before") // seconds waited before the attempt
	AttrErrorClass     = attribute.Key("retryhost.error.class")
	AttrDeadline       = attribute.Key("retryhost.deadline")
	AttrStatus         = attribute.Key("retryhost.http.status")
	AttrNextModel      = attribute.Key("retryhost.retry.next_model")
	AttrRetryDelay     = attribute.Key("retryhost.retry.delay") // seconds scheduled before the next attempt
	AttrCommitLatency  = attribute.Key("retryhost.commit.latency")
	AttrAttempts       = attribute.Key("retryhost.attempts")
	AttrFailOvers      = attribute.Key("retryhost.failovers")
	AttrOutcome        = attribute.Key("retryhost.outcome") // success, error
	AttrPlugin         = attribute.Key("retryhost.plugin")
	AttrPluginOp       = attribute.Key("retryhost.plugin.op")
	AttrPluginFailure  = attribute.Key("retryhost.plugin.failure")
)

// Option configures [New].
type Option func(*config)

type config struct {
	tp trace.TracerProvider
	mp metric.MeterProvider
}

// WithTracerProvider sets where spans go. Default: otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider sets where metrics go. Default: otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// Telemetry turns retryhost's events into spans and metrics. It is safe
// for concurrent use; share one per process.
type Telemetry struct {
	tracer trace.Tracer

	requests, attempts, failovers, commits metric.Int64Counter
	pluginCalls, pluginFailures            metric.Int64Counter
	commitLatency, opDuration              metric.Float64Histogram
	tokenUsage                             metric.Int64Histogram
}

var (
	_ driver.Observer = (*Telemetry)(nil)
	_ host.Observer   = (*Telemetry)(nil)
)

// New builds a Telemetry on the given (or global) providers. It fails only
// when an instrument cannot be created.
func New(opts ...Option) (*Telemetry, error) {
	c := config{}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	m := c.mp.Meter(ScopeName)
	t := &Telemetry{tracer: c.tp.Tracer(ScopeName)}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		x, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return x
	}
	t.requests = counter("retryhost.requests", "{request}", "Requests run by the retry driver.")
	t.attempts = counter("retryhost.attempts", "{attempt}", "Attempts run by the retry driver.")
	t.failovers = counter("retryhost.failovers", "{attempt}", "Attempts on another model than the attempt before.")
	t.commits = counter("retryhost.commits", "{commit}", "Attempts whose answer reached the caller.")
	t.pluginCalls = counter("retryhost.plugin.calls", "{call}", "Calls into Wasm plugins.")
	t.pluginFailures = counter("retryhost.plugin.failures", "{call}", "Failed calls into Wasm plugins, by kind.")
	var err error
	t.commitLatency, err = m.Float64Histogram("retryhost.commit.latency", metric.WithUnit("s"),
		metric.WithDescription("Time from the committed attempt's start to commit."))
	errs = append(errs, err)
	t.opDuration, err = m.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of a GenAI request, retries and fail-overs included."),
		metric.WithExplicitBucketBoundaries(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92))
	errs = append(errs, err)
	t.tokenUsage, err = m.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens used per attempt, by input and output."),
		metric.WithExplicitBucketBoundaries(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return t, nil
}

// split returns a model's key (its identity, retryhost.model) and its
// provider and model id (the GenAI attributes), which with a key the user
// chose ("gpt-4o-eu") are attributes of the model, not parts of the key.
func split(m driver.Model) (key, provider, model string) {
	if m == nil {
		return "", "", ""
	}
	provider, model = driver.Describe(m)
	return m.Key(), provider, model
}

func modelAttrs(m driver.Model) []attribute.KeyValue {
	key, provider, model := split(m)
	return []attribute.KeyValue{
		AttrOperation.String("chat"),
		AttrProvider.String(provider),
		AttrSystem.String(provider),
		AttrRequestModel.String(model),
		AttrModel.String(key),
	}
}

// serverAddresser is a model that says which server it calls.
type serverAddresser interface {
	ServerAddress() (host string, port int)
}

// serverAttrs are server.address and server.port, when m says them.
func serverAttrs(m driver.Model) []attribute.KeyValue {
	sa, ok := m.(serverAddresser)
	if !ok {
		return nil
	}
	host, port := sa.ServerAddress()
	if host == "" {
		return nil
	}
	attrs := []attribute.KeyValue{AttrServerAddress.String(host)}
	if port > 0 {
		attrs = append(attrs, AttrServerPort.Int(port))
	}
	return attrs
}

// attemptSpanName is the GenAI conventions' name of an inference span.
func attemptSpanName(m driver.Model) string {
	_, _, model := split(m)
	return "chat " + model
}

// requestSpanName names the span around a request's attempts: one name
// per operation, so that it never reads as one more attempt.
func requestSpanName(op string) string { return "retryhost " + op }

// requestState rides in the request's context so that RequestEnd can
// report the operation's duration with its start attributes.
type requestKey struct{}

type requestState struct {
	op    string
	model driver.Model
}

// RequestStart starts the request's span.
func (t *Telemetry) RequestStart(ctx context.Context, e driver.RequestEvent) context.Context {
	key, _, _ := split(e.Model)
	attrs := append(modelAttrs(e.Model), AttrOp.String(e.Op), AttrFirstModel.String(key))
	ctx, _ = t.tracer.Start(ctx, requestSpanName(e.Op), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, requestKey{}, &requestState{op: e.Op, model: e.Model})
}

// AttemptStart starts the attempt's span, a child of the request's.
func (t *Telemetry) AttemptStart(ctx context.Context, e driver.AttemptEvent) context.Context {
	attrs := append(modelAttrs(e.Model),
		AttrAttempt.Int(e.Number), AttrFailOver.Bool(e.FailOver), AttrDelayBefore.Float64(e.Delay.Seconds()))
	attrs = append(attrs, serverAttrs(e.Model)...)
	ctx, _ = t.tracer.Start(ctx, attemptSpanName(e.Model), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	if e.FailOver {
		key, _, _ := split(e.Model)
		t.failovers.Add(ctx, 1, metric.WithAttributes(AttrModel.String(key)))
	}
	return ctx
}

// AttemptEnd ends the attempt's span.
func (t *Telemetry) AttemptEnd(ctx context.Context, e driver.AttemptEndEvent) {
	span := trace.SpanFromContext(ctx)
	key, _, _ := split(e.Model)
	attrs := []attribute.KeyValue{AttrAttemptOutcome.String(e.Outcome.String())}
	if e.Err != nil || e.Class != abi.ClassNone {
		attrs = append(attrs, AttrErrorClass.String(e.Class.String()), AttrErrorType.String(e.Class.String()))
	}
	if e.Deadline != abi.DeadlineNone {
		attrs = append(attrs, AttrDeadline.String(e.Deadline.String()))
	}
	if e.Status != 0 {
		attrs = append(attrs, AttrStatus.Int(e.Status))
	}
	attrs = append(attrs, finishAttrs(e.Finish, e.Usage)...)
	if e.ResponseModel != "" {
		attrs = append(attrs, AttrResponseModel.String(e.ResponseModel))
	}
	if e.Next != nil {
		next, _, _ := split(e.Next)
		attrs = append(attrs, AttrNextModel.String(next), AttrRetryDelay.Float64(e.Delay.Seconds()))
	}
	span.SetAttributes(attrs...)
	if e.Outcome != driver.AttemptSucceeded {
		span.SetStatus(codes.Error, e.Outcome.String()+": "+e.Class.String())
	}
	span.End()

	mattrs := []attribute.KeyValue{AttrModel.String(key), AttrAttemptOutcome.String(e.Outcome.String())}
	if e.Err != nil {
		mattrs = append(mattrs, AttrErrorType.String(e.Class.String()))
	}
	t.attempts.Add(ctx, 1, metric.WithAttributes(mattrs...))
	t.recordTokens(ctx, e)
}

// recordTokens records an attempt's token usage, input and output, with
// the conventions' attributes: every attempt that reported usage, failed
// ones too (their tokens were spent).
func (t *Telemetry) recordTokens(ctx context.Context, e driver.AttemptEndEvent) {
	if e.Usage.InputTokens == 0 && e.Usage.OutputTokens == 0 {
		return
	}
	_, provider, model := split(e.Model)
	attrs := []attribute.KeyValue{AttrOperation.String("chat"), AttrProvider.String(provider), AttrRequestModel.String(model)}
	if e.ResponseModel != "" {
		attrs = append(attrs, AttrResponseModel.String(e.ResponseModel))
	}
	attrs = append(attrs, serverAttrs(e.Model)...)
	n := len(attrs)
	t.tokenUsage.Record(ctx, e.Usage.InputTokens, metric.WithAttributes(append(attrs[:n:n], AttrTokenType.String("input"))...))
	t.tokenUsage.Record(ctx, e.Usage.OutputTokens, metric.WithAttributes(append(attrs[:n:n], AttrTokenType.String("output"))...))
}

// finishAttrs records a finish reason and usage, when the model reported them.
func finishAttrs(f driver.FinishReason, u driver.Usage) []attribute.KeyValue {
	var attrs []attribute.KeyValue
	if reason := finishName(f); reason != "" {
		attrs = append(attrs, AttrFinishReasons.StringSlice([]string{reason}))
	}
	if u.InputTokens != 0 || u.OutputTokens != 0 {
		attrs = append(attrs, AttrInputTokens.Int64(u.InputTokens), AttrOutputTokens.Int64(u.OutputTokens))
	}
	return attrs
}

func finishName(f driver.FinishReason) string {
	if f.Raw != "" {
		return f.Raw
	}
	if f.Unified == abi.ReasonUnknown {
		return ""
	}
	return f.Unified.String()
}

// Commit marks the commit on the attempt's span and records its latency.
func (t *Telemetry) Commit(ctx context.Context, e driver.CommitEvent) {
	span := trace.SpanFromContext(ctx)
	lat := e.Latency.Seconds()
	span.SetAttributes(AttrCommitLatency.Float64(lat))
	span.AddEvent("retryhost.commit", trace.WithAttributes(AttrCommitLatency.Float64(lat)))
	key, _, _ := split(e.Model)
	ma := metric.WithAttributes(AttrModel.String(key))
	t.commits.Add(ctx, 1, ma)
	t.commitLatency.Record(ctx, lat, ma)
}

// RequestEnd ends the request's span.
func (t *Telemetry) RequestEnd(ctx context.Context, e driver.RequestEndEvent) {
	span := trace.SpanFromContext(ctx)
	// The model that answered (or was tried last) replaces the first
	// model's gen_ai.* attributes: the span describes the request's outcome.
	attrs := append(modelAttrs(e.Model), AttrAttempts.Int(e.Attempts), AttrFailOvers.Int(e.FailOvers))
	attrs = append(attrs, finishAttrs(e.Finish, e.Usage)...)
	attrs = append(attrs, serverAttrs(e.Model)...)
	if e.ResponseModel != "" {
		attrs = append(attrs, AttrResponseModel.String(e.ResponseModel))
	}
	outcome := "success"
	var class string
	if e.Err != nil {
		outcome = "error"
		class = driver.ErrorName(e.Err, e.Class)
		attrs = append(attrs, AttrErrorType.String(class))
		span.SetStatus(codes.Error, class)
	}
	attrs = append(attrs, AttrOutcome.String(outcome))
	span.SetAttributes(attrs...)
	span.End()

	t.requests.Add(ctx, 1, metric.WithAttributes(AttrOutcome.String(outcome)))
	dattrs := []attribute.KeyValue{AttrOperation.String("chat")}
	if st, ok := ctx.Value(requestKey{}).(*requestState); ok {
		_, provider, model := split(st.model)
		dattrs = append(dattrs, AttrProvider.String(provider), AttrRequestModel.String(model), AttrOp.String(st.op))
	}
	if class != "" {
		dattrs = append(dattrs, AttrErrorType.String(class))
	}
	if e.ResponseModel != "" {
		dattrs = append(dattrs, AttrResponseModel.String(e.ResponseModel))
	}
	t.opDuration.Record(ctx, e.Elapsed.Seconds(), metric.WithAttributes(dattrs...))
}

// PluginCall counts a plugin call, and its failure by kind.
func (t *Telemetry) PluginCall(ctx context.Context, c host.PluginCall) {
	attrs := []attribute.KeyValue{AttrPlugin.String(c.Plugin), AttrPluginOp.String(c.Op)}
	t.pluginCalls.Add(ctx, 1, metric.WithAttributes(attrs...))
	if c.Failure != "" {
		t.pluginFailures.Add(ctx, 1, metric.WithAttributes(append(attrs, AttrPluginFailure.String(c.Failure))...))
	}
}
