package host

import (
	"context"
	"errors"
	"time"
)

// Observer receives one event per call into a plugin, for telemetry: call
// counts, durations and failures by kind. Install one with [WithObserver];
// the OpenTelemetry adapter in provider/otel implements it.
//
// It runs synchronously on the caller's goroutine after each call (Decide,
// Open, and a transform stream's Part and End), so it must be fast and safe
// for concurrent use. The event carries no part or attempt content.
type Observer interface {
	PluginCall(ctx context.Context, c PluginCall)
}

// PluginCall describes one finished call into a plugin. It is a plain value.
type PluginCall struct {
	Plugin   string // the name the plugin was loaded under
	Op       string // "decide", "open", "part" or "end"
	Duration time.Duration
	// Err is the call's error: a *PluginError, or the ctx's error when the
	// call did not start. Nil on success.
	Err error
	// Failure names the kind of failure, "" on success: "trap",
	// "timeout", "exit", "abi-violation", "instance-lost", "disabled",
	// "plugin-failed", "wrong-kind", "closed", "no-capacity", "limit", or
	// "canceled" (ctx done).
	Failure string
}

// WithObserver installs o to receive every plugin call (see [Observer]).
// Observers compose: each WithObserver adds one, and every call reaches
// them all, in the order they were given, so a library that adds its own
// (a gateway's metrics) never displaces the caller's (OpenTelemetry).
// Default: none, which costs one nil check per call. A nil o is ignored.
func WithObserver(o Observer) Option {
	return optionFunc(func(c *config) {
		if o == nil {
			return
		}
		switch prev := c.observer.(type) {
		case nil:
			c.observer = o
		case observers:
			c.observer = append(prev[:len(prev):len(prev)], o)
		default:
			c.observer = observers{prev, o}
		}
	})
}

// observers is several observers installed with WithObserver.
type observers []Observer

func (os observers) PluginCall(ctx context.Context, c PluginCall) {
	for _, o := range os {
		o.PluginCall(ctx, c)
	}
}

var failureNames = []struct {
	kind error
	name string
}{
	{ErrTrap, "trap"}, {ErrTimeout, "timeout"}, {ErrExit, "exit"}, {ErrABIViolation, "abi-violation"},
	{ErrInstanceLost, "instance-lost"}, {ErrDisabled, "disabled"}, {ErrPluginFailed, "plugin-failed"},
	{ErrWrongKind, "wrong-kind"}, {ErrClosed, "closed"}, {ErrNoCapacity, "no-capacity"}, {ErrLimit, "limit"},
}

// FailureKind names the kind of a call's error as in [PluginCall.Failure].
func FailureKind(err error) string {
	if err == nil {
		return ""
	}
	var pe *PluginError
	if errors.As(err, &pe) {
		for _, f := range failureNames {
			if pe.Kind == f.kind {
				return f.name
			}
		}
		return "unknown"
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return "canceled"
	}
	return "unknown"
}

// observe reports one call to o; start is when it began.
func observe(ctx context.Context, o Observer, plugin, op string, start time.Time, err error) {
	o.PluginCall(ctx, PluginCall{Plugin: plugin, Op: op, Duration: time.Since(start), Err: err, Failure: FailureKind(err)})
}
