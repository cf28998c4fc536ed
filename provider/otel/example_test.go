package otel_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	rotel "github.com/retryhost/retryhost/provider/otel"
)

// Tracing a request that fails over once. In a service, pass your own
// tracer and meter providers (or none, for the global ones) and add the
// same Telemetry to host.WithObserver to count plugin calls.
func Example() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tel, err := rotel.New(rotel.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}

	primary := &textModel{key: "openai/gpt-4o", err: &driver.ProviderError{Provider: "openai", Status: 503}}
	fallback := &textModel{key: "anthropic/claude-sonnet-4", text: "Paris.",
		finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop, Raw: "end_turn"}}}
	r, err := driver.New(primary, driver.WithRules(driver.Fallback(fallback)), driver.WithObserver(tel))
	if err != nil {
		panic(err)
	}
	if _, err := r.Generate(context.Background(), &driver.Request{}); err != nil {
		panic(err)
	}
	for _, s := range exp.GetSpans() {
		kv := map[string]string{}
		for _, a := range s.Attributes {
			kv[string(a.Key)] = a.Value.Emit()
		}
		fmt.Printf("%-22s attempt=%s outcome=%s class=%s\n", s.Name,
			kv["retryhost.attempt.number"], kv["retryhost.attempt.outcome"]+kv["retryhost.outcome"], kv["retryhost.error.class"])
	}
	// Output:
	// chat gpt-4o            attempt=1 outcome=error class=overloaded
	// chat claude-sonnet-4   attempt=2 outcome=success class=
	// retryhost generate     attempt= outcome=success class=
}
