package gateway

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/policy"
)

// acctAttempt is one attempt of a request's trail, as its request log line
// and its accounting see it (no prompt or output text).
type acctAttempt struct {
	model        string // the model's key
	respModel    string // the model id the upstream said answered
	number       int
	outcome      driver.AttemptOutcome
	ended        bool
	class        string        // the error class of a failed or truncated attempt
	status       int           // the HTTP status of an upstream's error; 0 otherwise
	start        time.Duration // from the request's start
	duration     time.Duration
	ttfc         time.Duration // from the attempt's start to its commit; 0: not committed
	usage        abi.Usage
	cost         float64
	failOver     bool
	continuation bool // started after the request committed: it continues the answer
}

// trail is a request's attempts, filled by the gateway's observer. Its
// events come on the request's goroutines, a hedge's beside it: mu orders
// them.
type acctTrail struct {
	mu        sync.Mutex
	start     time.Time
	prices    map[string]policy.Price // the policy's (nil: none priced)
	attempts  []acctAttempt
	first     [2]acctAttempt // attempts' array for the usual one or two
	committed bool
	plugins   []pluginRec
}

// pluginRec counts a request's calls into one plugin operation.
type pluginRec struct {
	plugin, op string
	calls      int
	failures   int
	failure    string // the last failure's kind
	duration   time.Duration
}

// maxTrailPlugins bounds the plugin operations a request's trail keeps
// apart (a transform's part op is one entry however many parts it sees).
const maxTrailPlugins = 16

func (t *acctTrail) attemptStart(e driver.AttemptEvent) {
	t.mu.Lock()
	if t.attempts == nil {
		t.attempts = t.first[:0]
	}
	t.attempts = append(t.attempts, acctAttempt{model: e.Model.Key(), number: e.Number, start: time.Since(t.start),
		failOver: e.FailOver, continuation: t.committed})
	t.mu.Unlock()
}

// find is the open attempt number n on model key (under mu).
func (t *acctTrail) find(key string, n int) *acctAttempt {
	for i := len(t.attempts) - 1; i >= 0; i-- {
		if a := &t.attempts[i]; a.number == n && a.model == key && !a.ended {
			return a
		}
	}
	return nil
}

func (t *acctTrail) attemptEnd(e driver.AttemptEndEvent) {
	key := e.Model.Key()
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.find(key, e.Number)
	if a == nil {
		return
	}
	a.ended, a.outcome, a.status, a.duration = true, e.Outcome, e.Status, e.Duration
	if e.Outcome == driver.AttemptFailed || e.Outcome == driver.AttemptTruncated {
		a.class = e.Class.String()
	}
	a.respModel, a.usage = e.ResponseModel, e.Usage
	if p, ok := t.prices[key]; ok {
		a.cost = p.Cost(e.Usage)
	}
}

func (t *acctTrail) commit(e driver.CommitEvent) {
	t.mu.Lock()
	if a := t.find(e.Model.Key(), e.Number); a != nil {
		a.ttfc = e.Latency
	}
	t.committed = true
	t.mu.Unlock()
}

func (t *acctTrail) pluginCall(plugin, op, failure string, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var p *pluginRec
	for i := range t.plugins {
		if t.plugins[i].plugin == plugin && t.plugins[i].op == op {
			p = &t.plugins[i]
			break
		}
	}
	if p == nil {
		if len(t.plugins) == maxTrailPlugins {
			return
		}
		t.plugins = append(t.plugins, pluginRec{plugin: plugin, op: op})
		p = &t.plugins[len(t.plugins)-1]
	}
	p.calls++
	p.duration += d
	if failure != "" {
		p.failures++
		p.failure = failure
	}
}

// pluginCall puts the plugin calls a request makes into its trail.
func pluginCall(ctx context.Context, c policy.PluginCall) {
	if t := acctTrailOf(ctx); t != nil {
		t.pluginCall(c.Plugin, c.Op, c.Failure, c.Duration)
	}
}

// totals are what a request's attempts add up to.
type totals struct {
	usage         abi.Usage
	cost          float64
	failOvers     int
	continuations int
}

// sum adds up the trail (under mu: a hedge's loser may still end).
func (t *acctTrail) sum() totals {
	t.mu.Lock()
	defer t.mu.Unlock()
	var s totals
	for i := range t.attempts {
		a := &t.attempts[i]
		s.usage.InputTokens += a.usage.InputTokens
		s.usage.OutputTokens += a.usage.OutputTokens
		s.usage.CacheReadTokens += a.usage.CacheReadTokens
		s.usage.CacheWriteTokens += a.usage.CacheWriteTokens
		s.usage.ReasoningTokens += a.usage.ReasoningTokens
		s.cost += a.cost
		if a.failOver {
			s.failOvers++
		}
		if a.continuation {
			s.continuations++
		}
	}
	return s
}

// acctTrailOf is the trail in a request's context, nil outside a chat request.
func acctTrailOf(ctx context.Context) *acctTrail {
	if st, ok := ctx.Value(stateKey{}).(*reqState); ok {
		return &st.acct
	}
	return nil
}

// otherKeys is the key label of the keys past WithKeyLabel's cap, and
// anonymousKey that of a request with no virtual key.
const (
	otherKeys    = "_other"
	anonymousKey = "anonymous"
)

// keyLabels hands out the key label values: each key's id, up to max
// distinct ids, then otherKeys, so that a fleet of keys cannot grow the
// series without bound.
type keyLabels struct {
	max  int
	n    atomic.Int64
	seen sync.Map // id → struct{}
	mu   sync.Mutex
}

func (k *keyLabels) label(id string) string {
	if id == "" {
		return anonymousKey
	}
	if _, ok := k.seen.Load(id); ok {
		return id
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.seen.Load(id); ok {
		return id
	}
	if int(k.n.Load()) >= k.max {
		return otherKeys
	}
	k.seen.Store(id, struct{}{})
	k.n.Add(1)
	return id
}

// accounting are the metrics of what requests used: requests, attempts,
// fail-overs, continuations, tokens and cost, by route, the model that
// answered and outcome, and by key when WithKeyLabel asks for it.
type accounting struct {
	keys                                                *keyLabels // nil: no key label
	requests, attempts, failovers, continuations, costs *prometheus.CounterVec
	tokens                                              *prometheus.CounterVec // …, type
}

func newAccounting(reg *prometheus.Registry, maxKeys int) *accounting {
	const ns = "retryhost_gateway"
	labels := []string{"route", "model", "outcome"}
	a := &accounting{}
	if maxKeys > 0 {
		a.keys = &keyLabels{max: maxKeys}
		labels = append(labels, "key")
	}
	vec := func(name, help string, extra ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, append(labels[:len(labels):len(labels)], extra...))
	}
	a.requests = vec("served_requests_total", "Chat requests answered, by route, the model that answered (\"\" when none did) and outcome.")
	a.attempts = vec("served_attempts_total", "Upstream attempts of the requests answered, by the request's route, model that answered and outcome.")
	a.failovers = vec("served_failovers_total", "Attempts that moved a request to another model, by the request's route, model that answered and outcome.")
	a.continuations = vec("served_continuations_total", "Attempts that continued an answer cut after commit (after_commit: continue), by the request's route, model that answered and outcome.")
	a.tokens = vec("tokens_total", "Tokens the upstreams reported for every attempt of the requests answered (failed attempts too), by the request's route, model that answered, outcome and type: input (the whole prompt), output, cached_input (read from the provider's cache, part of input), cache_write (part of input).", "type")
	a.costs = vec("cost_total", "What the upstreams billed for every attempt of the requests answered (failed attempts that reported tokens too), at the policy's prices, in their currency, by the request's route, model that answered and outcome.")
	reg.MustRegister(a.requests, a.attempts, a.failovers, a.continuations, a.tokens, a.costs)
	return a
}

// request counts one request's accounting.
func (a *accounting) request(route string, l *accessLog, keyID string, t *totals) {
	var lv [5]string
	lv[0], lv[1], lv[2] = route, l.model, l.outcome
	n := 3
	if a.keys != nil {
		lv[3] = a.keys.label(keyID)
		n = 4
	}
	vals := lv[:n]
	a.requests.WithLabelValues(vals...).Inc()
	if l.attempts > 0 {
		a.attempts.WithLabelValues(vals...).Add(float64(l.attempts))
	}
	if t.failOvers > 0 {
		a.failovers.WithLabelValues(vals...).Add(float64(t.failOvers))
	}
	if t.continuations > 0 {
		a.continuations.WithLabelValues(vals...).Add(float64(t.continuations))
	}
	u := &t.usage
	if u.InputTokens == 0 && u.OutputTokens == 0 {
		return
	}
	typed := lv[:n+1]
	for _, x := range [...]struct {
		typ string
		n   int64
	}{{"input", u.InputTokens}, {"output", u.OutputTokens}, {"cached_input", u.CacheReadTokens}, {"cache_write", u.CacheWriteTokens}} {
		if x.n > 0 {
			typed[n] = x.typ
			a.tokens.WithLabelValues(typed...).Add(float64(x.n))
		}
	}
	if t.cost > 0 {
		a.costs.WithLabelValues(vals...).Add(t.cost)
	}
}

// WithKeyLabel adds a "key" label, the virtual key's id ("anonymous" for a
// request without one), to the accounting metrics (served_requests_total,
// tokens_total, cost_total …), for up to maxKeys distinct keys: the
// requests of keys seen after that are counted under "_other", so that the
// series stay bounded. Default: no key label. maxKeys must be 1 to 100000.
func WithKeyLabel(maxKeys int) Option {
	return func(c *config) error {
		if maxKeys < 1 || maxKeys > maxKeyLabels {
			return fmt.Errorf("gateway: key label cap %d out of range (1 to %d)", maxKeys, maxKeyLabels)
		}
		c.keyLabels = maxKeys
		return nil
	}
}

// maxKeyLabels bounds WithKeyLabel: each key is a few series per route,
// model and outcome.
const maxKeyLabels = 100_000

var errNilWriter = errors.New("gateway: nil request log writer")

// appendCost appends a cost, in the fewest digits that read back as it.
func appendCost(b []byte, c float64) []byte { return strconv.AppendFloat(b, c, 'g', -1, 64) }
