package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retryhost/retryhost/host"
)

// pluginMetrics is the host.Observer that serve installs beside any other:
// the calls into the policy's Wasm plugins, their failures by kind, and
// each plugin's breaker as its calls last saw it, as series of the
// gateway's /metrics (gateway.WithMetrics). Labels come from bounded sets:
// the policy's plugin names, four operations, host.FailureKind's names.
type pluginMetrics struct {
	calls    *prometheus.CounterVec // plugin, op
	failures *prometheus.CounterVec // plugin, op, kind
	breaker  *prometheus.GaugeVec   // plugin
}

func newPluginMetrics() *pluginMetrics {
	const ns = "retryhost_gateway"
	return &pluginMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "plugin_calls_total",
			Help: "Calls into the policy's Wasm plugins (decide, open, part, end), refused ones included, by plugin and operation."},
			[]string{"plugin", "op"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "plugin_failures_total",
			Help: "Plugin calls that failed, by plugin, operation and kind (trap, timeout, exit, abi-violation, instance-lost, disabled, limit, no-capacity, canceled, ...)."},
			[]string{"plugin", "op", "kind"}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "plugin_breaker_open",
			Help: "1 while a plugin's crash-loop breaker refuses its calls, 0 once a call runs again, as the plugin's latest call saw it."},
			[]string{"plugin"}),
	}
}

func (m *pluginMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.calls, m.failures, m.breaker}
}

// PluginCall implements host.Observer.
func (m *pluginMetrics) PluginCall(_ context.Context, c host.PluginCall) {
	m.calls.WithLabelValues(c.Plugin, c.Op).Inc()
	if c.Failure != "" {
		m.failures.WithLabelValues(c.Plugin, c.Op, c.Failure).Inc()
	}
	switch c.Failure {
	case "disabled":
		m.breaker.WithLabelValues(c.Plugin).Set(1)
	case "canceled", "no-capacity", "closed", "wrong-kind":
		// The call never reached the plugin: it says nothing of the breaker.
	default:
		m.breaker.WithLabelValues(c.Plugin).Set(0) // the call ran
	}
}
