package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// traceFlushTimeout bounds the export of the spans still queued when
// serve stops: a collector that does not answer in time loses them, and
// the export under way is cut. Tests shorten it.
var traceFlushTimeout = 5 * time.Second

// traceQueueDefault is the batch span processor's queue, in spans, when
// OTEL_BSP_MAX_QUEUE_SIZE does not say another: the SDK's own default.
// Spans ended while it is full are dropped, never waited for.
const traceQueueDefault = 2048

// traces is serve's OpenTelemetry trace export, from the standard OTEL_*
// variables. A nil *traces is tracing off.
type traces struct {
	tp       *sdktrace.TracerProvider
	exp      *otlptrace.Exporter
	endpoint string // for the start line
}

// tracesFromEnv reads whether and where serve exports traces, as the
// OpenTelemetry SDK's environment variables say:
//
//   - OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none: off;
//   - OTEL_TRACES_EXPORTER=otlp: on, to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
//     or OTEL_EXPORTER_OTLP_ENDPOINT (the SDK's default,
//     http://localhost:4318, when neither is set);
//   - OTEL_TRACES_EXPORTER unset: on when one of the two endpoints is set,
//     else off;
//   - an endpoint that is not an http(s) URL, any other exporter, or a
//     protocol (OTEL_EXPORTER_OTLP_PROTOCOL,
//     OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) other than http/protobuf: an
//     error, so that a setting serve does not honour is not silently
//     dropped.
//
// The exporter reads its headers, timeout, compression and TLS files
// (OTEL_EXPORTER_OTLP_*); the SDK its sampler (OTEL_TRACES_SAMPLER,
// OTEL_TRACES_SAMPLER_ARG; default parentbased_always_on), its batching
// (OTEL_BSP_*) and the resource (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES; service.name defaults to retryhost).
func tracesFromEnv(ctx context.Context, getenv func(string) string) (*traces, error) {
	if b, _ := strconv.ParseBool(strings.TrimSpace(getenv("OTEL_SDK_DISABLED"))); b {
		return nil, nil
	}
	key := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	endpoint := strings.TrimSpace(getenv(key))
	if endpoint == "" {
		key = "OTEL_EXPORTER_OTLP_ENDPOINT"
		endpoint = strings.TrimSpace(getenv(key))
	}
	if endpoint != "" {
		// The exporter would ignore an endpoint it cannot parse and send
		// to localhost instead.
		if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%s=%q: want an http:// or https:// URL", key, endpoint)
		}
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "none":
		return nil, nil
	case "":
		if endpoint == "" {
			return nil, nil
		}
	case "otlp":
		if endpoint == "" {
			endpoint = "http://localhost:4318"
		}
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: serve exports traces over OTLP only (otlp, or none)", exp)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(k)); p != "" {
			if p != "http/protobuf" {
				return nil, fmt.Errorf("%s=%q: serve exports traces over OTLP/HTTP with protobuf only (http/protobuf)", k, p)
			}
			break // the per-signal variable wins
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry trace exporter: %w", err)
	}
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	// Later detectors win: the variables name the service over the default.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "retryhost"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	// The batch processor's queue bounds what waits for the collector; a
	// span ended while it is full is dropped, so that a collector down or
	// slow never holds a request.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &traces{tp: tp, exp: exp, endpoint: endpoint}, nil
}

// shutdown exports the spans still queued, for up to traceFlushTimeout,
// and stops the exporter.
func (t *traces) shutdown(log *slog.Logger) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	if err := t.tp.Shutdown(ctx); err != nil {
		log.Warn("traces not all exported at stop", slog.Duration("flush_timeout", traceFlushTimeout), slog.String("error", err.Error()))
		// The processor waits on an export under way (retries included)
		// past its context: stopping the exporter cuts it.
		_ = t.exp.Shutdown(context.Background())
	}
}

// traceErrLog is where the OpenTelemetry SDK's errors (an export that
// failed, spans dropped) go: the running serve's log; nil: nowhere.
var (
	traceErrLog     atomic.Pointer[slog.Logger]
	traceErrHandler sync.Once
)

// logTraceErrors sends the SDK's errors to log until the returned func is
// called. The SDK would print them to stderr, outside the JSON log.
func logTraceErrors(log *slog.Logger) func() {
	traceErrHandler.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			if l := traceErrLog.Load(); l != nil && err != nil {
				l.Warn("trace export", slog.String("error", err.Error()))
			}
		}))
	})
	traceErrLog.Store(log)
	return func() { traceErrLog.CompareAndSwap(log, nil) }
}
