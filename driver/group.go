package driver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Strategy is how a [DeploymentGroup] chooses a deployment for an attempt.
type Strategy uint8

const (
	// WeightedRandom picks at random in proportion to the weights
	// ([DeploymentGroup.WithWeights]; default all 1). The default.
	WeightedRandom Strategy = iota
	// LeastInFlight picks the deployment with the fewest of the Runner's
	// attempts in flight, at random among ties.
	LeastInFlight
	// LatencyAware picks the deployment with the lowest exponentially
	// weighted time to first content (a stream's commit, a call's
	// response), divided by its weighted success rate so that a fast
	// deployment that fails is not preferred; a deployment with no sample
	// yet goes first. With probability 1/20 it explores another
	// deployment instead, so a recovered one gets traffic, and samples,
	// again.
	LatencyAware
)

// String returns the strategy's name in a policy file: "weighted",
// "least-in-flight" or "latency".
func (s Strategy) String() string {
	switch s {
	case WeightedRandom:
		return "weighted"
	case LeastInFlight:
		return "least-in-flight"
	case LatencyAware:
		return "latency"
	}
	return fmt.Sprintf("Strategy(%d)", uint8(s))
}

// ParseStrategy reads a strategy's name (see [Strategy.String]).
func ParseStrategy(s string) (Strategy, error) {
	for _, st := range [...]Strategy{WeightedRandom, LeastInFlight, LatencyAware} {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("retryhost: unknown strategy %q (want weighted, least-in-flight or latency)", s)
}

// MaxGroupSize is the most deployments a group may have.
const MaxGroupSize = 64

// The latency strategy's tuning: each sample weighs ewmaAlpha in the
// averages, a pick explores another deployment than the
// best (1 in exploreIn), and a success rate never counts below minSuccess (so a deployment
// that failed a lot scores at most 20× its latency, not infinity).
const (
	ewmaAlpha  = 0.3
	exploreIn  = 20 // one pick in exploreIn explores
	minSuccess = 0.05
)

// DeploymentGroup is several deployments of one logical model (gpt-4o in
// two regions, on Azure and on OpenAI) behind one key, the group's name.
// A [Runner] whose request or rule targets the group runs each attempt on
// one deployment chosen by the group's [Strategy], skipping deployments
// that cool down ([WithCooldown]) and, within a request, those it already
// tried. When an attempt on a deployment fails with a health failure (a
// timeout, rate limit, overload, server or network error, the failures a
// [Cooldown] counts by default), the request fails over to a deployment
// of the group it has not tried yet, before any rule is asked; once every
// deployment was tried, or for any other failure, the rules decide (a
// Retry of the group picks a deployment again, a Switch moves on to
// another model or group). Each such attempt counts against the group's
// key in the rules' attempt budgets, against [WithMaxAttempts] and
// against the retry budget.
//
// Attempt records, errors, callbacks and telemetry name the deployment;
// stickiness names the group. Each deployment is also known to the Runner
// by its own key, so a condition can name one.
//
// A DeploymentGroup implements [Model]: called directly (outside a
// Runner), Generate and Stream pick a deployment by the strategy and
// delegate, without fail-over. Its methods that configure it return a
// copy with fresh balancing state, and are meant to be used before the
// group is in use. A DeploymentGroup is safe for concurrent use; its
// balancing state is shared by every Runner that uses it.
type DeploymentGroup struct {
	name     string
	strategy Strategy
	deps     []Model
	weights  []uint64 // nil: all 1
	stats    []depStat
	rngMu    *sync.Mutex
	rng      *rand.Rand // nil: the global source
	err      error
}

// depStat is a deployment's balancing state.
type depStat struct {
	inflight atomic.Int64
	latency  atomic.Uint64 // float64 bits: EWMA of time to first content, ns; 0 before the first sample
	fail     atomic.Uint64 // float64 bits: EWMA of the failure rate, 0 to 1
	_        [40]byte      // one cache line each: in-flight counters are written on every attempt
}

// Group returns a group named name (its key) of the deployments models,
// balanced by strategy. A mistake (an empty name, no model, a nil or
// duplicate one, more than [MaxGroupSize], a group inside a group, an
// unknown strategy) is kept and reported by [New].
func Group(name string, strategy Strategy, models ...Model) *DeploymentGroup {
	g := &DeploymentGroup{name: name, strategy: strategy, deps: append([]Model(nil), models...)}
	g.stats = make([]depStat, len(g.deps))
	switch {
	case name == "":
		g.err = errors.New("retryhost: a deployment group needs a name")
	case len(models) == 0:
		g.err = fmt.Errorf("retryhost: group %q has no deployment", name)
	case len(models) > MaxGroupSize:
		g.err = fmt.Errorf("retryhost: group %q has %d deployments (at most %d)", name, len(models), MaxGroupSize)
	case strategy > LatencyAware:
		g.err = fmt.Errorf("retryhost: group %q: unknown strategy %d", name, strategy)
	}
	seen := map[string]bool{}
	for i, m := range models {
		if g.err != nil {
			break
		}
		switch {
		case m == nil:
			g.err = fmt.Errorf("retryhost: group %q: deployment %d is nil", name, i)
		case isGroup(m):
			g.err = fmt.Errorf("retryhost: group %q: deployment %q is itself a group", name, m.Key())
		case m.Key() == name:
			g.err = fmt.Errorf("retryhost: group %q: a deployment has the group's own key", name)
		case seen[m.Key()]:
			g.err = fmt.Errorf("retryhost: group %q lists %q twice", name, m.Key())
		}
		if m != nil {
			seen[m.Key()] = true
		}
	}
	return g
}

func isGroup(m Model) bool { _, ok := m.(*DeploymentGroup); return ok }

func (g *DeploymentGroup) clone() *DeploymentGroup {
	c := *g
	c.stats = make([]depStat, len(g.deps))
	return &c
}

// WithWeights returns a copy of g whose weighted-random choice is in
// proportion to w, one positive weight per deployment in order. Other
// strategies ignore weights. Default: all 1.
func (g *DeploymentGroup) WithWeights(w ...int) *DeploymentGroup {
	c := g.clone()
	if c.err != nil {
		return c
	}
	if len(w) != len(g.deps) {
		c.err = fmt.Errorf("retryhost: group %q: %d weights for %d deployments", g.name, len(w), len(g.deps))
		return c
	}
	c.weights = make([]uint64, len(w))
	for i, x := range w {
		if x < 1 || x > math.MaxInt32 {
			c.err = fmt.Errorf("retryhost: group %q: weight %d of %q is not in 1-%d", g.name, x, g.deps[i].Key(), math.MaxInt32)
			return c
		}
		c.weights[i] = uint64(x)
	}
	return c
}

// WithSeed returns a copy of g whose random choices come from a source
// seeded with seed: reproducible simulations and tests. Default: the
// runtime's random source.
func (g *DeploymentGroup) WithSeed(seed uint64) *DeploymentGroup {
	c := g.clone()
	c.rngMu = new(sync.Mutex)
	c.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return c
}

// Key returns the group's name.
func (g *DeploymentGroup) Key() string { return g.name }

// Strategy returns the group's strategy.
func (g *DeploymentGroup) Strategy() Strategy { return g.strategy }

// Deployments returns a copy of the group's deployments, in order.
func (g *DeploymentGroup) Deployments() []Model { return append([]Model(nil), g.deps...) }

// Err reports the builder mistake g carries, or nil. [New] returns it.
func (g *DeploymentGroup) Err() error { return g.err }

// Generate calls one deployment chosen by the strategy, without
// fail-over (use a [Runner] for that), and feeds its latency to the
// balancing state.
func (g *DeploymentGroup) Generate(ctx context.Context, req *Request) (*Response, error) {
	if g.err != nil {
		return nil, g.err
	}
	i := g.pick(0, 0, false)
	s := &g.stats[i]
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	start := time.Now()
	resp, err := g.deps[i].Generate(ctx, req)
	g.observe(i, err == nil, time.Since(start))
	return resp, err
}

// Stream opens a stream on one deployment chosen by the strategy, without
// fail-over (use a [RetryableModel] for that).
func (g *DeploymentGroup) Stream(ctx context.Context, req *Request) (Stream, error) {
	if g.err != nil {
		return nil, g.err
	}
	return g.deps[g.pick(0, 0, false)].Stream(ctx, req)
}

// index returns the position of the deployment with key, or -1.
func (g *DeploymentGroup) index(key string) int {
	for i, m := range g.deps {
		if m.Key() == key {
			return i
		}
	}
	return -1
}

func (g *DeploymentGroup) rand(n uint64) uint64 {
	if g.rng == nil {
		return rand.Uint64N(n)
	}
	g.rngMu.Lock()
	defer g.rngMu.Unlock()
	return g.rng.Uint64N(n)
}

// pick chooses a deployment, avoiding those in tried (this request's) and
// cooling. When every deployment is tried or cooling it relaxes: first
// the tried, then the cooling (a cooldown never refuses by itself); with
// strict it returns -1 instead.
func (g *DeploymentGroup) pick(tried, cooling uint64, strict bool) int {
	all := uint64(1)<<len(g.deps) - 1
	if len(g.deps) == 64 {
		all = math.MaxUint64
	}
	cand := all &^ (tried | cooling)
	if cand == 0 {
		if strict {
			return -1
		}
		if cand = all &^ cooling; cand == 0 {
			cand = all
		}
	}
	if cand&(cand-1) == 0 {
		return bits.TrailingZeros64(cand)
	}
	switch g.strategy {
	case LeastInFlight:
		return g.pickLeast(cand)
	case LatencyAware:
		return g.pickLatency(cand)
	}
	return g.pickWeighted(cand)
}

func (g *DeploymentGroup) weight(i int) uint64 {
	if g.weights == nil {
		return 1
	}
	return g.weights[i]
}

func (g *DeploymentGroup) pickWeighted(cand uint64) int {
	var total uint64
	for m := cand; m != 0; m &= m - 1 {
		total += g.weight(bits.TrailingZeros64(m))
	}
	x := g.rand(total)
	for m := cand; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		if w := g.weight(i); x < w {
			return i
		} else {
			x -= w
		}
	}
	return bits.TrailingZeros64(cand) // unreachable
}

func (g *DeploymentGroup) pickLeast(cand uint64) int {
	least, ties := int64(math.MaxInt64), uint64(0)
	for m := cand; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		switch n := g.stats[i].inflight.Load(); {
		case n < least:
			least, ties = n, 1<<i
		case n == least:
			ties |= 1 << i
		}
	}
	return nth(ties, g.rand(uint64(bits.OnesCount64(ties))))
}

// nth returns the position of the k-th (0-based) set bit of m.
func nth(m, k uint64) int {
	for ; k > 0; k-- {
		m &= m - 1
	}
	return bits.TrailingZeros64(m)
}

// score is deployment i's expected cost: its latency EWMA over its
// success rate; 0 before the first sample.
func (g *DeploymentGroup) score(i int) float64 {
	s := &g.stats[i]
	lat := math.Float64frombits(s.latency.Load())
	return lat / max(1-math.Float64frombits(s.fail.Load()), minSuccess)
}

func (g *DeploymentGroup) pickLatency(cand uint64) int {
	best, bestScore := -1, math.Inf(1)
	for m := cand; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		if sc := g.score(i); sc < bestScore {
			best, bestScore = i, sc
		}
	}
	if bestScore > 0 && g.rand(exploreIn) == 0 {
		others := cand &^ (1 << best)
		return nth(others, g.rand(uint64(bits.OnesCount64(others))))
	}
	return best
}

// observe feeds one attempt's outcome on deployment i to the averages: a
// success's time to first content, or a failure (whose duration also
// counts as a latency sample when it is longer than the average, so a
// deployment that times out is slow, not fast).
func (g *DeploymentGroup) observe(i int, ok bool, d time.Duration) {
	s := &g.stats[i]
	f := 0.0
	if !ok {
		f = 1
	}
	ewma(&s.fail, f, false)
	if ok {
		ewma(&s.latency, float64(max(d, 1)), true)
	} else if cur := math.Float64frombits(s.latency.Load()); float64(d) > cur {
		ewma(&s.latency, float64(d), true)
	}
}

// ewma folds x into the average held in v; with first, the first sample
// (v is 0) is taken as is.
func ewma(v *atomic.Uint64, x float64, first bool) {
	for {
		old := v.Load()
		cur := math.Float64frombits(old)
		next := cur + ewmaAlpha*(x-cur)
		if first && old == 0 {
			next = x
		}
		if v.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}
