// Package redis shares a Runner's fail-over state between replicas through
// a Redis server: a [driver.State] on go-redis v9, so that what one
// replica learns (a model is down, a 429 said wait a minute, the half-open
// probe is taken, a fallback is sticky, the retry budget is spent) holds
// for every replica within one request.
//
//	st, err := redis.Open("redis://10.0.0.5:6379/0", redis.Options{})
//	if err != nil { … }
//	defer st.Close()
//	r, err := driver.New(base, driver.WithCooldown(…), driver.WithState(st))
//
// or, in a policy file, "state": {"redis": {"url": "redis://10.0.0.5:6379/0"}}
// in a program that imports this package (retryhost serve does).
//
// # Topologies
//
// The URL's scheme picks go-redis's client (see [Open]): one server
// (redis://, rediss://, unix://), a primary watched by Sentinels
// (redis+sentinel://…?master_name=NAME, go-redis's failover client, which
// asks the Sentinels for the primary and follows their +switch-master), or
// a Redis Cluster (redis+cluster://, go-redis's cluster client, which
// follows MOVED and ASK). The rest of the URL is go-redis's own form.
//
// Every key starts with the prefix in a hash tag ("{retryhost:}c:model"),
// so all of a State's keys are in one Redis Cluster slot and every script
// (which reads and writes several models' keys in one round trip, atomic)
// runs on one node: no CROSSSLOT. The price on a cluster is that one
// fleet's state lives on one primary; fleets with different prefixes
// spread over the cluster. The layout is the same on every topology.
//
// # Semantics
//
// Every operation is one Lua script (EVALSHA), so a request's start costs
// one round trip, and every time is Redis's: cooldowns, leases and sticky
// periods are keys with a TTL (SET PX, PEXPIRE) read back with PTTL, so a
// replica whose clock is off can neither lengthen nor shorten a cooldown,
// and every key expires on its own (no clean-up job). The half-open probe
// is a SET NX PX lease: one replica takes it. The retry budget counts the
// requests and retries started over a window (Options.BudgetWindow)
// rather than those in flight, since a replica that dies cannot give back
// what it holds.
//
// # When Redis is slow or down
//
// A store's outage is never a request's. Every operation has a short
// deadline (Options.OpTimeout); when one fails, the State answers from its
// local copy (a [driver.NewLocalState], kept up to date with this
// replica's own failures, successes and sticky fallbacks while Redis
// works), logs the outage once, counts it ([State.Stats]) and, while it
// lasts, lets one request per Options.RetryInterval try Redis again;
// the first that succeeds ends the fallback (logged once too). go-redis
// reconnects by itself.
//
// When a Sentinel primary dies, its operations fail at once (a refused
// connection) or at OpTimeout (a silent one); the State serves from its
// local copy while the Sentinels elect a replica (their
// down-after-milliseconds plus an election: about 2 s with 500 ms in this
// package's test), and the first retry after the promotion (within
// RetryInterval) reaches the new primary, since go-redis asks the
// Sentinels again on every new connection. Shared state is back within
// RetryInterval + OpTimeout of the promotion (TestSentinelFailover
// measures it). Redis replicates asynchronously: a cooldown written in the
// last moment before the primary died may be lost, and is then learned
// again from the next failure.
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retryhost/retryhost/driver"
)

// Defaults of [Options] whose fields are zero.
const (
	DefaultPrefix         = "retryhost:"
	DefaultOpTimeout      = 50 * time.Millisecond
	DefaultRetryInterval  = time.Second
	DefaultBudgetWindow   = 10 * time.Second
	DefaultStickyCountTTL = time.Hour
)

// halfOpenFloor is how long at least a model stays half-open after its
// cooldown when no probe's outcome comes (no traffic): then its keys
// expire and it is back in rotation, clean. A half-open state lasts
// max(For, halfOpenFloor).
const halfOpenFloor = 10 * time.Minute

// Options configure a [State]. The zero Options are the defaults.
type Options struct {
	// Prefix starts every key, so that fleets (or policies) sharing a
	// server do not share state. Default "retryhost:". A prefix without a
	// Redis Cluster hash tag is put in braces ("retryhost:" makes keys
	// "{retryhost:}c:model"), so that every key of a State is in one slot;
	// a prefix with one ("fleet-{a}:") is used as it is.
	Prefix string
	// OpTimeout bounds one operation, from the call to the reply; past it
	// the State answers from its local copy. Default 50ms.
	OpTimeout time.Duration
	// RetryInterval is, while Redis is unreachable, how often one
	// operation tries it again (the others use the local copy without
	// waiting). Default 1s.
	RetryInterval time.Duration
	// BudgetWindow is how long the retry budget's counters run before
	// they start again from zero. Default 10s.
	BudgetWindow time.Duration
	// StickyCountTTL bounds how long a sticky fallback counted in
	// requests (after-N-requests) waits for them. Default 1h.
	StickyCountTTL time.Duration
	// Logger receives one warning when Redis becomes unreachable and one
	// note when it is back. Default: discard.
	Logger *slog.Logger
}

// Stats are a State's counters since it was made.
type Stats struct {
	// Errors counts operations that failed or timed out against Redis
	// (not those whose caller gave up first).
	Errors int64
	// Outages counts the times the State fell back to its local copy.
	Outages int64
	// LocalOps counts the operations the local copy answered during
	// outages.
	LocalOps int64
	// Down reports that the State is on its local copy now.
	Down bool
}

// State is a [driver.State] on Redis. Build it with [New] or [Open]; it is
// safe for concurrent use, by any number of Runners and processes.
type State struct {
	c     goredis.Scripter
	own   goredis.UniversalClient // closed by Close when Open made it
	o     Options
	tag   string // every key's start: the prefix, hash-tagged
	local driver.State
	lb    localBudget
	keys  sync.Map // model → *modelKeys

	epoch    atomic.Int64 // outages and recoveries so far: odd while on the local copy (see done)
	retryAt  atomic.Int64 // while down: when (unix ns) the next operation may try Redis
	errs     atomic.Int64
	outages  atomic.Int64
	localOps atomic.Int64
	closed   atomic.Bool
	mu       sync.Mutex // orders the epoch's changes and their log lines
	since    time.Time  // the outage's start
}

var _ driver.State = (*State)(nil)

// New returns a State on client (a [goredis.Client], a Sentinel-backed
// [goredis.NewFailoverClient] or a [goredis.NewClusterClient]), which the
// caller keeps and closes (after the State's last use). Give the client no
// retries of its own beyond what fits in Options.OpTimeout; [Open] sets it
// up that way.
func New(client goredis.UniversalClient, o Options) (*State, error) {
	if client == nil {
		return nil, errors.New("redis: nil client")
	}
	return newState(client, o)
}

// Open connects to the Redis at url and returns a State that owns the
// client: Close closes it. The URL's scheme picks go-redis's client, and
// the rest of it is go-redis's own URL form for that client:
//
//   - redis://[user:password@]host:port/db, rediss:// for TLS, or
//     unix:///path: one server ([goredis.ParseURL]).
//   - redis+sentinel://[user:password@]sentinel:port/db?master_name=NAME&addr=sentinel2:port…,
//     rediss+sentinel:// for TLS: the primary that the Sentinels name
//     NAME, followed through failovers ([goredis.ParseFailoverURL]; the
//     user and password are the Sentinels', a password=… parameter the
//     primary's). master_name is required.
//   - redis+cluster://[user:password@]node:port?addr=node2:port…,
//     rediss+cluster:// for TLS: a Redis Cluster, from these seed nodes
//     ([goredis.ParseClusterURL]).
//
// go-redis's query parameters (dial_timeout, pool_size, …) are accepted;
// the timeouts and retries are then set from Options.OpTimeout. Open does
// not wait for the server: a server that is down is an outage like any
// other, served locally until it answers.
func Open(url string, o Options) (*State, error) {
	t, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	return openOwned(t, o)
}

// target is a parsed URL: the options of exactly one of go-redis's
// clients.
type target struct {
	single   *goredis.Options
	failover *goredis.FailoverOptions
	cluster  *goredis.ClusterOptions
}

// ErrURL is the error of a URL that names no Redis: the scheme is
// unknown, go-redis cannot parse it, or a Sentinel URL has no master_name.
var ErrURL = errors.New("redis: not a Redis URL")

// schemes are the URL schemes [Open] accepts.
var schemes = []string{"redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster"}

func parseURL(raw string) (target, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return target{}, fmt.Errorf("%w: no scheme (%s://…)", ErrURL, strings.Join(schemes, "://, "))
	}
	base, topo, _ := strings.Cut(strings.ToLower(scheme), "+")
	if base != "redis" && base != "rediss" && !(base == "unix" && topo == "") {
		return target{}, fmt.Errorf("%w: scheme %q is none of %s", ErrURL, scheme, strings.Join(schemes, ", "))
	}
	raw = base + "://" + rest
	var t target
	var err error
	switch topo {
	case "":
		t.single, err = goredis.ParseURL(raw)
	case "sentinel":
		if t.failover, err = goredis.ParseFailoverURL(raw); err == nil && t.failover.MasterName == "" {
			err = errors.New("a Sentinel URL needs the primary's name: ?master_name=NAME")
		}
	case "cluster":
		t.cluster, err = goredis.ParseClusterURL(raw)
	default:
		return target{}, fmt.Errorf("%w: scheme %q is none of %s", ErrURL, scheme, strings.Join(schemes, ", "))
	}
	if err != nil {
		return target{}, fmt.Errorf("%w: %w", ErrURL, err)
	}
	return t, nil
}

// resp2 sets t's protocol to RESP2.
func (t target) resp2() target {
	switch {
	case t.failover != nil:
		t.failover.Protocol = 2
	case t.cluster != nil:
		t.cluster.Protocol = 2
	default:
		t.single.Protocol = 2
	}
	return t
}

// client configures t's options for op (see configure) and makes the
// client.
func (t target) client(op time.Duration) goredis.UniversalClient {
	dial, pool := max(4*op, 200*time.Millisecond), op
	switch {
	case t.failover != nil:
		o := t.failover
		o.MaxRetries, o.ContextTimeoutEnabled, o.DisableIdentity = -1, true, true
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = dial, op, op, pool
		return goredis.NewFailoverClient(o)
	case t.cluster != nil:
		o := t.cluster
		o.MaxRetries, o.ContextTimeoutEnabled, o.DisableIdentity = -1, true, true
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = dial, op, op, pool
		return goredis.NewClusterClient(o)
	default:
		o := t.single
		o.MaxRetries, o.ContextTimeoutEnabled, o.DisableIdentity = -1, true, true
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = dial, op, op, pool
		return goredis.NewClient(o)
	}
}

// openOwned returns a State on a client of its own made from t, warmed:
// the one way Open and a policy's shared pool make a State that owns its
// connections, so both configure and close them alike.
//
// The client's waits are bounded by the operation's deadline: an
// operation is never retried, and a dial, a read, a write or a wait for a
// pooled connection gives up when the State would. (A cluster client
// still follows up to three MOVED or ASK redirections, within the
// deadline.)
func openOwned(t target, o Options) (*State, error) {
	s, err := newState(nil, o)
	if err != nil {
		return nil, err
	}
	s.own = t.client(s.o.OpTimeout)
	s.c = s.own
	s.warm()
	return s, nil
}

// warmTimeout bounds Open's first contact with the server.
const warmTimeout = time.Second

// warm opens a first connection and loads the scripts (on every primary
// of a cluster), so that the first requests do not pay for a dial and a
// NOSCRIPT within OpTimeout. A server that does not answer starts the
// State on its local copy (an outage).
func (s *State) warm() {
	ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
	defer cancel()
	var err error
	for _, sc := range scripts { // not pipelined: Load keeps the server's hash only once it has the reply
		if err = sc.Load(ctx, s.own).Err(); err != nil {
			break
		}
	}
	s.done(ctx, s.epoch.Load(), err)
}

func newState(c goredis.UniversalClient, o Options) (*State, error) {
	switch {
	case o.OpTimeout < 0, o.RetryInterval < 0, o.BudgetWindow < 0, o.StickyCountTTL < 0:
		return nil, errors.New("redis: negative duration in Options")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.OpTimeout == 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.BudgetWindow == 0 {
		o.BudgetWindow = DefaultBudgetWindow
	}
	if o.StickyCountTTL == 0 {
		o.StickyCountTTL = DefaultStickyCountTTL
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &State{o: o, tag: hashTagged(o.Prefix), local: driver.NewLocalState()}
	s.lb.window = o.BudgetWindow
	if c != nil {
		s.c = c
	}
	return s, nil
}

// Close closes the client if [Open] made it. The State answers from its
// local copy after Close.
func (s *State) Close() error {
	if s.closed.Swap(true) || s.own == nil {
		return nil
	}
	return s.own.Close()
}

// Stats returns the State's counters.
func (s *State) Stats() Stats {
	return Stats{Errors: s.errs.Load(), Outages: s.outages.Load(), LocalOps: s.localOps.Load(), Down: down(s.epoch.Load())}
}

// modelKeys are a model's keys: cooling, half-open, failures, probe.
type modelKeys struct{ c, h, f, p string }

func (s *State) keysOf(model string) *modelKeys {
	if k, ok := s.keys.Load(model); ok {
		return k.(*modelKeys)
	}
	p := s.tag
	k, _ := s.keys.LoadOrStore(model, &modelKeys{c: p + "c:" + model, h: p + "h:" + model, f: p + "f:" + model, p: p + "p:" + model})
	return k.(*modelKeys)
}

func (s *State) scopeKey(scope string) string { return s.tag + "s:" + scope }
func (s *State) stickyKey(key string) string  { return s.tag + "k:" + key }
func (s *State) budgetKey(key string) string  { return s.tag + "b:" + key }

// hashTagged returns prefix as the start of keys that all hash to one
// Redis Cluster slot: prefix itself when it holds a hash tag (a non-empty
// {…}, the first '{' to the next '}'), else prefix in braces. Since the
// tag comes first, no model name, scope or key id after it can change
// the slot.
func hashTagged(prefix string) string {
	if i := strings.IndexByte(prefix, '{'); i >= 0 {
		if j := strings.IndexByte(prefix[i+1:], '}'); j > 0 {
			return prefix
		}
	}
	return "{" + prefix + "}"
}
func ms(d time.Duration) int64    { return max(int64((d+time.Millisecond-1)/time.Millisecond), 1) }
func msDur(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
func (s *State) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.o.OpTimeout)
}

// down reports whether epoch is an outage's.
func down(epoch int64) bool { return epoch&1 == 1 }

// tryStore reports whether an operation should go to Redis: always while
// it is up; while it is down, one operation per RetryInterval. It returns
// the epoch the operation starts in, for done.
func (s *State) tryStore() (epoch int64, ok bool) {
	epoch = s.epoch.Load()
	if s.closed.Load() {
		return epoch, false
	}
	if !down(epoch) {
		return epoch, true
	}
	now := time.Now().UnixNano()
	at := s.retryAt.Load()
	return epoch, now >= at && s.retryAt.CompareAndSwap(at, now+int64(s.o.RetryInterval))
}

// done records the outcome of an operation that started in epoch against
// Redis and reports whether its answer stands (otherwise the caller
// answers locally). Only an operation that started in the current epoch
// moves the State: a failure while Redis is up starts an outage, a success
// during an outage (one of its retries) ends it. One that started in an
// earlier epoch is old news and moves nothing: a reply Redis sent before
// it was killed, read after another operation found it gone, does not end
// that outage (its answer stands all the same), and an outage's retry
// that fails after another found Redis back does not start a new one (its
// error is counted).
func (s *State) done(ctx context.Context, epoch int64, err error) bool {
	ok := err == nil || errors.Is(err, goredis.Nil)
	if !ok {
		if ctx.Err() != nil {
			return false // the caller gave up: not Redis's fault
		}
		s.errs.Add(1)
	}
	if down(epoch) != ok || epoch != s.epoch.Load() {
		return ok
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch != s.epoch.Load() {
		return ok
	}
	now := time.Now()
	if ok {
		s.o.Logger.LogAttrs(ctx, slog.LevelInfo, "retryhost: shared state reachable again; leaving the local copy",
			slog.String("store", "redis"), slog.Duration("outage", now.Sub(s.since)))
	} else {
		s.since = now
		s.retryAt.Store(now.Add(s.o.RetryInterval).UnixNano()) // before the epoch says down: tryStore reads it then
		s.outages.Add(1)
		s.o.Logger.LogAttrs(ctx, slog.LevelWarn, "retryhost: shared state unreachable; using this process's local copy until it answers",
			slog.String("store", "redis"), slog.String("error", err.Error()), slog.Duration("op_timeout", s.o.OpTimeout))
	}
	s.epoch.Store(epoch + 1)
	return ok
}

// fallback counts an operation answered locally.
func (s *State) fallback() { s.localOps.Add(1) }

// Begin implements [driver.State]: one script reads the models' and
// scopes' state, uses the sticky fallback and counts the request in the
// budget.
func (s *State) Begin(ctx context.Context, b driver.BeginRequest) driver.Snapshot {
	epoch, ok := s.tryStore()
	if !ok {
		s.fallback()
		return s.localBegin(ctx, b)
	}
	n := 4*len(b.Models) + len(b.Scopes) + 2
	keys := make([]string, 0, n)
	for _, m := range b.Models {
		k := s.keysOf(m)
		keys = append(keys, k.c, k.h, k.f, k.p)
	}
	for _, sc := range b.Scopes {
		keys = append(keys, s.scopeKey(sc))
	}
	if b.Sticky {
		keys = append(keys, s.stickyKey(b.Key))
	}
	if b.Budget {
		keys = append(keys, s.budgetKey(b.Key))
	}
	octx, cancel := s.opCtx(ctx)
	res, err := beginScript.Run(octx, s.c, keys, len(b.Models), len(b.Scopes), flag(b.Sticky), flag(b.Budget), ms(s.o.BudgetWindow)).Slice()
	cancel()
	if err == nil && len(res) != 4*len(b.Models)+len(b.Scopes)+1 {
		err = fmt.Errorf("redis: begin script returned %d values", len(res))
	}
	if !s.done(ctx, epoch, err) {
		s.fallback()
		return s.localBegin(ctx, b)
	}
	var snap driver.Snapshot
	if len(b.Models) > 0 {
		snap.Models = make([]driver.ModelState, len(b.Models))
		for i := range b.Models {
			v := res[4*i : 4*i+4]
			snap.Models[i] = driver.ModelState{Failures: int(num(v[0])), Cooling: msDur(num(v[1])), HalfOpen: num(v[2]) == 1, Probing: num(v[3]) == 1}
		}
	}
	res = res[4*len(b.Models):]
	if len(b.Scopes) > 0 {
		snap.Scopes = make([]time.Duration, len(b.Scopes))
		for i := range b.Scopes {
			snap.Scopes[i] = msDur(num(res[i]))
		}
	}
	snap.Sticky, _ = res[len(b.Scopes)].(string)
	return snap
}

func num(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case string:
		i, _ := strconv.ParseInt(n, 10, 64)
		return i
	}
	return 0
}

// localBegin is Begin on the local copy, with the budget windowed as on Redis.
func (s *State) localBegin(ctx context.Context, b driver.BeginRequest) driver.Snapshot {
	if b.Budget {
		s.lb.request(b.Key)
	}
	b.Budget = false
	return s.local.Begin(ctx, b)
}

// End implements [driver.State]: the budget is windowed, so nothing is
// given back.
func (s *State) End(context.Context, string) {}

// RetryEnded implements [driver.State]: nothing is given back (see End).
func (s *State) RetryEnded(context.Context, string) {}

// TryRetry implements [driver.State]: a retry is allowed while the
// retries started in the window are fewer than max(MinRetries, Percent %
// of the requests started in it).
func (s *State) TryRetry(ctx context.Context, key string, budget driver.RetryBudget) bool {
	if epoch, ok := s.tryStore(); ok {
		octx, cancel := s.opCtx(ctx)
		v, err := retryScript.Run(octx, s.c, []string{s.budgetKey(key)}, budget.Percent, budget.MinRetries, ms(s.o.BudgetWindow)).Int64()
		cancel()
		if s.done(ctx, epoch, err) {
			return v == 1
		}
	}
	s.fallback()
	return s.lb.tryRetry(key, budget)
}

// Failed implements [driver.State]. The local copy learns the failure
// too, so that it knows this replica's view if Redis goes away.
func (s *State) Failed(ctx context.Context, f driver.Failure) (driver.ModelState, bool) {
	ls, lcooled := s.local.Failed(ctx, f)
	epoch, ok := s.tryStore()
	if !ok {
		s.fallback()
		return ls, lcooled
	}
	k := s.keysOf(f.Model)
	scope := k.c // an unused key when there is no scope
	if f.Scope != "" {
		scope = s.scopeKey(f.Scope)
	}
	var ra int64
	if f.RetryAfter > 0 {
		ra = ms(f.RetryAfter)
	}
	octx, cancel := s.opCtx(ctx)
	res, err := failedScript.Run(octx, s.c, []string{k.c, k.h, k.f, k.p, scope},
		f.Failures, ms(f.For), ra, flag(f.Scope != ""), ms(max(f.For, f.Max, halfOpenFloor)), ms(f.Max)).Int64Slice()
	cancel()
	if err == nil && len(res) != 3 {
		err = fmt.Errorf("redis: failed script returned %d values", len(res))
	}
	if !s.done(ctx, epoch, err) {
		s.fallback()
		return ls, lcooled
	}
	return driver.ModelState{Failures: int(res[0]), Cooling: msDur(res[1])}, res[2] == 1
}

// Succeeded implements [driver.State].
func (s *State) Succeeded(ctx context.Context, model string) bool {
	lended := s.local.Succeeded(ctx, model)
	epoch, ok := s.tryStore()
	if !ok {
		s.fallback()
		return lended
	}
	k := s.keysOf(model)
	octx, cancel := s.opCtx(ctx)
	v, err := succeededScript.Run(octx, s.c, []string{k.c, k.h, k.f, k.p}).Int64()
	cancel()
	if !s.done(ctx, epoch, err) {
		s.fallback()
		return lended
	}
	return v == 1
}

// TakeProbe implements [driver.State]: SET NX PX, so one caller across
// the fleet holds the lease.
func (s *State) TakeProbe(ctx context.Context, model string, lease time.Duration) bool {
	if epoch, ok := s.tryStore(); ok {
		k := s.keysOf(model)
		octx, cancel := s.opCtx(ctx)
		v, err := probeScript.Run(octx, s.c, []string{k.c, k.h, k.p}, ms(lease)).Int64()
		cancel()
		if s.done(ctx, epoch, err) {
			return v == 1
		}
	}
	s.fallback()
	return s.local.TakeProbe(ctx, model, lease)
}

// SetSticky implements [driver.State]. The local copy learns it too.
func (s *State) SetSticky(ctx context.Context, key, model string, requests int, period time.Duration) {
	s.local.SetSticky(ctx, key, model, requests, period)
	epoch, ok := s.tryStore()
	if !ok {
		s.fallback()
		return
	}
	ttl := period
	if requests > 0 {
		ttl = s.o.StickyCountTTL
	} else {
		requests = 0
	}
	octx, cancel := s.opCtx(ctx)
	err := stickyScript.Run(octx, s.c, []string{s.stickyKey(key)}, model, requests, ms(ttl)).Err()
	cancel()
	if !s.done(ctx, epoch, err) {
		s.fallback()
	}
}

// localBudget is the retry budget's local copy during outages: windowed,
// as on Redis, so that End and RetryEnded (no-ops) mean the same in both.
type localBudget struct {
	window time.Duration
	mu     sync.Mutex
	keys   map[string]*windowCount
}

type windowCount struct {
	start             time.Time
	requests, retries int64
}

// get returns key's counters, started again if their window has passed.
// The caller holds mu.
func (l *localBudget) get(key string) *windowCount {
	if l.keys == nil {
		l.keys = map[string]*windowCount{}
	}
	now := time.Now()
	w := l.keys[key]
	if w == nil || now.Sub(w.start) >= l.window {
		w = &windowCount{start: now}
		l.keys[key] = w
	}
	return w
}

func (l *localBudget) request(key string) {
	l.mu.Lock()
	l.get(key).requests++
	l.mu.Unlock()
}

func (l *localBudget) tryRetry(key string, b driver.RetryBudget) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.get(key)
	if w.retries >= max(int64(b.MinRetries), w.requests*int64(b.Percent)/100) {
		return false
	}
	w.retries++
	return true
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// QuietClientLogs stops go-redis's own process-wide logger, which prints a
// line to stderr for every failed dial: during an outage, one per
// RetryInterval per State, where the State logs the outage once through
// Options.Logger. It affects every go-redis client in the process, so only
// a program whose go-redis clients are its States should call it (retryhost
// serve does).
func QuietClientLogs() { goredis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
