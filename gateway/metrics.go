package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/retryhost/retryhost/driver"
)

// metrics are the gateway's Prometheus metrics, in a registry of its own
// (two gateways in one process never collide). Labels come from bounded
// sets: route and model names of the policy, HTTP status codes, outcomes
// and error classes.
type metrics struct {
	reg *prometheus.Registry

	requests  *prometheus.CounterVec   // route, code, outcome
	attempts  *prometheus.CounterVec   // model, outcome, class
	failovers *prometheus.CounterVec   // to
	commits   *prometheus.CounterVec   // model
	ttfc      *prometheus.HistogramVec // model: request start → first content (streams only)
	dropped   *prometheus.CounterVec   // model, param
	inflight  prometheus.Gauge         // chat requests being served
	streams   prometheus.Gauge         // committed streams being relayed
}

func newMetrics(st *stats, budget *bodyBudget) *metrics {
	const ns = "retryhost_gateway"
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "requests_total",
		Help: "Chat requests answered, by route asked for, HTTP status and outcome."}, []string{"route", "code", "outcome"})
	m.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "attempts_total",
		Help: "Upstream attempts, by model, outcome (success, error, rejected, truncated) and error class."}, []string{"model", "outcome", "class"})
	m.failovers = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "failovers_total",
		Help: "Attempts that moved a request to another model (a rule's switch, or on to the request's own fallbacks), by the model moved to."}, []string{"to"})
	m.commits = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "commits_total",
		Help: "Answers committed (first content reached the client side of the gate), by model."}, []string{"model"})
	m.ttfc = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "time_to_first_content_seconds",
		Help:    "From a streaming request's start to its commit (retries and fail-overs included), by the model that answered.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"model"})
	m.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "params_dropped_total",
		Help: "Request parameters not sent to a fall-back model whose provider cannot honour them (docs/gateway.md, Parameters across a fall-back), by model and parameter."}, []string{"model", "param"})
	m.inflight = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "inflight_requests",
		Help: "Chat requests being served."})
	m.streams = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "inflight_streams",
		Help: "Committed streams being relayed to clients."})
	counter := func(name, help string, f func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help},
			func() float64 { return float64(f()) })
	}
	m.reg.MustRegister(m.requests, m.attempts, m.failovers, m.commits, m.ttfc, m.dropped, m.inflight, m.streams,
		counter("upstream_malformed_events_total", "Upstream SSE events skipped: not JSON objects, or too large.", st.malformed.Load),
		counter("unauthorized_total", "Requests refused for a missing or wrong API key.", st.unauthorized.Load),
		counter("client_busy_rejections_total", "Chat requests refused with 429 because their client had its most requests in flight (WithMaxConcurrentPerClient, serve's --max-per-client).", st.rejectedClient.Load),
		counter("busy_rejections_total", "Chat requests refused with 429 because the gateway was full.", st.rejectedBusy.Load),
		counter("body_budget_rejections_total", "Chat requests refused with 429 because the request bodies in flight filled the body budget (WithBodyBudget, serve's --body-budget).", st.rejectedBudget.Load),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "body_budget_used_bytes",
			Help: "Bytes of the body budget that the requests in flight are charged (WithBodyBudget, serve's --body-budget)."},
			func() float64 { return float64(budget.used.Load()) }),
		counter("reloads_total", "Policy reloads that took effect.", st.reloads.Load),
		counter("reload_failures_total", "Policy reloads rejected (the old policy was kept).", st.reloadFailures.Load),
		counter("reloads_abandoned_total", "Policy reloads abandoned before they took effect: past their budget (retryhost serve's --reload-budget), overtaken by a newer reload, or stopped (the old policy was kept).", st.reloadsAbandoned.Load),
		counter("state_errors_total", "Operations on the shared state's store (Redis) that failed or timed out.", func() int64 { return st.state().Errors }),
		counter("state_outages_total", "Times the shared state's store was unreachable and this process fell back to its local copy.", func() int64 { return st.state().Outages }),
		counter("state_local_ops_total", "Shared-state operations answered by the local copy during outages.", func() int64 { return st.state().LocalOps }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "state_down",
			Help: "1 while the shared state's store is unreachable (this process uses its local copy), else 0."},
			func() float64 {
				if st.state().Down {
					return 1
				}
				return 0
			}),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *metrics) request(l *accessLog) {
	m.requests.WithLabelValues(m.route(l), strconv.Itoa(l.status), l.outcome).Inc()
}

// route is a request's route label.
func (m *metrics) route(l *accessLog) string {
	if l.implicit {
		return "*" // the client's name: its values are the clients' to choose
	}
	return l.route
}

// observer is the driver.Observer the gateway adds to every policy it
// loads: attempts, fail-overs and commits by model, and the parameters an
// attempt's model is not sent.
type observer struct {
	m   *metrics
	log *slog.Logger
}

func (o observer) RequestStart(ctx context.Context, _ driver.RequestEvent) context.Context {
	return ctx
}

func (o observer) AttemptStart(ctx context.Context, e driver.AttemptEvent) context.Context {
	if t := acctTrailOf(ctx); t != nil {
		t.attemptStart(e)
	}
	if e.FailOver {
		o.m.failovers.WithLabelValues(e.Model.Key()).Inc()
	}
	if c, ok := ctx.Value(callKey{}).(*call); ok && c.unhonoured != nil {
		name := e.Model.Key()
		for _, p := range c.unhonoured[c.gen.provOf[name]] {
			o.log.LogAttrs(ctx, slog.LevelWarn, "gateway: a parameter the model cannot honour was not sent",
				slog.String("model", name), slog.String("param", p), slog.Int("attempt", e.Number))
			o.m.dropped.WithLabelValues(name, p).Inc()
		}
	}
	return ctx
}

func (o observer) AttemptEnd(ctx context.Context, e driver.AttemptEndEvent) {
	recordAttempt(ctx, &e)
	if t := acctTrailOf(ctx); t != nil {
		t.attemptEnd(e)
	}
	class := ""
	if e.Outcome == driver.AttemptFailed || e.Outcome == driver.AttemptTruncated {
		class = e.Class.String()
	}
	o.m.attempts.WithLabelValues(e.Model.Key(), e.Outcome.String(), class).Inc()
}

// Commit counts the commit; the time to first content is a stream's only:
// a non-streaming request commits at the end of its answer.
func (o observer) Commit(ctx context.Context, e driver.CommitEvent) {
	o.m.commits.WithLabelValues(e.Model.Key()).Inc()
	if t := acctTrailOf(ctx); t != nil {
		t.commit(e)
	}
	elapsed := e.Elapsed
	if st, ok := ctx.Value(stateKey{}).(*reqState); ok {
		if st.atEnd {
			return
		}
		elapsed = time.Since(st.start) // the whole request's, over its fallbacks
	}
	o.m.ttfc.WithLabelValues(e.Model.Key()).Observe(elapsed.Seconds())
}

func (o observer) RequestEnd(context.Context, driver.RequestEndEvent) {}
