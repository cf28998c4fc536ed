package driver

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/stretchr/testify/require"
)

// fakeDeployment answers after latency on a fake clock, and fails with 503
// while down or on every failEvery-th call.
type fakeDeployment struct {
	key       string
	clock     *fakeClock
	latency   time.Duration
	failEvery int64
	down      atomic.Bool
	calls     atomic.Int64
}

func (d *fakeDeployment) Key() string { return d.key }
func (d *fakeDeployment) Generate(ctx context.Context, _ *Request) (*Response, error) {
	n := d.calls.Add(1)
	d.clock.advance(d.latency)
	if d.down.Load() || (d.failEvery > 0 && n%d.failEvery == 0) {
		return nil, status(503)
	}
	return &Response{Content: []Part{{Kind: abi.KindTextDelta, Delta: d.key}}}, nil
}
func (d *fakeDeployment) Stream(context.Context, *Request) (Stream, error) {
	return nil, errors.New("not used")
}

// TestGroup_LatencyMovesTrafficAndComesBack: three deployments, fast (but
// then down for a while), medium with a 20 % error rate, and slow. The
// latency strategy sends most traffic to the fast one, moves it away while
// that one fails (every request still succeeds, failing over inside the
// group), and moves it back once it recovers.
func TestGroup_LatencyMovesTrafficAndComesBack(t *testing.T) {
	clock := newClock()
	fast := &fakeDeployment{key: "east", clock: clock, latency: 50 * time.Millisecond}
	medium := &fakeDeployment{key: "west", clock: clock, latency: 200 * time.Millisecond, failEvery: 5}
	slow := &fakeDeployment{key: "far", clock: clock, latency: 800 * time.Millisecond}
	g := Group("gpt-4o", LatencyAware, fast, medium, slow).WithSeed(7)
	r := mustNew(t, g, clock.option())
	req := &Request{Messages: []Message{{Role: RoleUser, Content: []Content{{Text: "hi"}}}}}

	// phase runs n requests and returns how many of the last 200 the
	// fast deployment answered, and how many first attempts went to it.
	phase := func(n int) (answered, firstOnFast int) {
		for i := range n {
			before := fast.calls.Load()
			resp, err := r.Generate(context.Background(), req)
			require.NoError(t, err, "request %d", i)
			if i >= n-200 {
				if resp.Text() == "east" {
					answered++
				}
				if fast.calls.Load() > before {
					firstOnFast++
				}
			}
		}
		return answered, firstOnFast
	}
	answered, _ := phase(400)
	t.Logf("healthy: fast answered %d of the last 200", answered)
	require.Greater(t, answered, 180, "healthy: the fast deployment takes most traffic")

	fast.down.Store(true)
	answered, tried := phase(400)
	t.Logf("down: %d of the last 200 first attempts on fast", tried)
	require.Zero(t, answered)
	require.Less(t, tried, 20, "down: the fast deployment gets only exploration traffic")

	fast.down.Store(false)
	answered, _ = phase(400)
	t.Logf("recovered: fast answered %d of the last 200", answered)
	require.Greater(t, answered, 180, "recovered: the traffic comes back")
}

// TestGroup_FailOverInsideThenNextGroup: a health failure moves to the
// group's other deployment first, then the rules switch to the next group
// (where the same happens); the final error names every deployment tried.
func TestGroup_FailOverInsideThenNextGroup(t *testing.T) {
	clock := newClock()
	d := func(key string) *fakeDeployment {
		x := &fakeDeployment{key: key, clock: clock}
		x.down.Store(true)
		return x
	}
	east, west, claudeA, claudeB := d("gpt-east"), d("gpt-west"), d("claude-a"), d("claude-b")
	gpt := Group("gpt-4o", WeightedRandom, east, west).WithSeed(1)
	claude := Group("claude", LeastInFlight, claudeA, claudeB).WithSeed(1)
	r := mustNew(t, gpt, clock.option(), WithRules(OnStatus(503).Switch(claude)))
	_, err := r.Generate(context.Background(), &Request{})
	var re *RetryError
	require.ErrorAs(t, err, &re)
	var keys []string
	for _, a := range re.Attempts {
		keys = append(keys, a.Model.Key())
	}
	require.Len(t, keys, 4, "both gpt deployments, then both claude ones")
	require.ElementsMatch(t, []string{"gpt-east", "gpt-west"}, keys[:2])
	require.ElementsMatch(t, []string{"claude-a", "claude-b"}, keys[2:])
	for _, k := range keys {
		require.Contains(t, err.Error(), k, "the error names the deployment")
	}

	// A non-health failure (a 400) does not try the other deployment: it
	// would say the same.
	fn, log := script(status(400))
	r2 := mustNew(t, gpt)
	_, err = Do(context.Background(), r2, fn)
	require.Error(t, err)
	require.Len(t, *log, 1)
}

// TestGroup_SkipsCooledDeployment: once a deployment cools down, requests
// on the group never start on it.
func TestGroup_SkipsCooledDeployment(t *testing.T) {
	clock := newClock()
	east := &fakeDeployment{key: "east", clock: clock}
	west := &fakeDeployment{key: "west", clock: clock}
	east.down.Store(true)
	g := Group("gpt-4o", WeightedRandom, east, west).WithSeed(3)
	r := mustNew(t, g, clock.option(), WithCooldown(Cooldown{Failures: 1, For: time.Hour}))
	for range 50 {
		resp, err := r.Generate(context.Background(), &Request{})
		require.NoError(t, err)
		require.Equal(t, "west", resp.Text())
	}
	require.Equal(t, int64(1), east.calls.Load(), "one failure, then cooled down and skipped")
}

// TestGroup_Weighted: a 3:1 weighting shows in the choices.
func TestGroup_Weighted(t *testing.T) {
	a, b := &fakeModel{"a"}, &fakeModel{"b"}
	g := Group("g", WeightedRandom, a, b).WithWeights(3, 1).WithSeed(11)
	r := mustNew(t, g)
	counts := map[string]int{}
	for range 4000 {
		_, err := Do(context.Background(), r, func(_ context.Context, c *Call) (int, error) {
			counts[c.Model.Key()]++
			return 0, nil
		})
		require.NoError(t, err)
	}
	require.InDelta(t, 3000, counts["a"], 150)
	require.InDelta(t, 1000, counts["b"], 150)
}

// TestGroup_LeastInFlight: with attempts held in flight, new requests go
// to the deployment with the fewest.
func TestGroup_LeastInFlight(t *testing.T) {
	a, b, c := &fakeModel{"a"}, &fakeModel{"b"}, &fakeModel{"c"}
	g := Group("g", LeastInFlight, a, b, c).WithSeed(5)
	r := mustNew(t, g)
	release := make(chan struct{})
	started := make(chan string)
	var wg sync.WaitGroup
	counts := map[string]int{}
	for range 6 {
		wg.Go(func() {
			_, _ = Do(context.Background(), r, func(_ context.Context, call *Call) (int, error) {
				started <- call.Model.Key()
				<-release
				return 0, nil
			})
		})
		counts[<-started]++ // one at a time: each sees the earlier ones in flight
	}
	close(release)
	wg.Wait()
	require.Equal(t, map[string]int{"a": 2, "b": 2, "c": 2}, counts)
	for i := range g.stats {
		require.Zero(t, g.stats[i].inflight.Load())
	}
}

func TestGroup_Validation(t *testing.T) {
	a, b := &fakeModel{"a"}, &fakeModel{"b"}
	tests := []struct {
		name    string
		g       *DeploymentGroup
		wantErr string
	}{
		{"no name", Group("", WeightedRandom, a), "needs a name"},
		{"no deployment", Group("g", WeightedRandom), `group "g" has no deployment`},
		{"nil deployment", Group("g", WeightedRandom, a, nil), "deployment 1 is nil"},
		{"duplicate", Group("g", WeightedRandom, a, a), `lists "a" twice`},
		{"nested", Group("g", WeightedRandom, Group("h", WeightedRandom, a)), "is itself a group"},
		{"own key", Group("a", WeightedRandom, a), "the group's own key"},
		{"strategy", Group("g", Strategy(9), a), "unknown strategy 9"},
		{"weights count", Group("g", WeightedRandom, a, b).WithWeights(1), "1 weights for 2 deployments"},
		{"weight zero", Group("g", WeightedRandom, a, b).WithWeights(1, 0), `weight 0 of "b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.g)
			require.ErrorContains(t, err, tt.wantErr)
			_, err = New(a, WithRules(AnyError().Switch(tt.g)))
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// TestGroup_Stream: a stream on a group fails over inside it before commit
// (the caller sees one preamble, from the deployment that answered), feeds
// the answering deployment's time to first content at commit, and leaves
// nothing in flight once read to its end.
func TestGroup_Stream(t *testing.T) {
	clk := newManualClock()
	ok := sscript(preamble(), pText("hello"), pFinish(abi.ReasonStop))
	bad := &scriptModel{key: "east", clock: clk, openErr: []error{status(503)}, scripts: [][]sstep{ok}}
	good := &scriptModel{key: "west", clock: clk, scripts: [][]sstep{ok}}
	g := Group("gpt-4o", LatencyAware, bad, good).WithSeed(1) // east first: no sample yet
	r := mustNew(t, g)
	m, err := NewRetryableModel(r)
	require.NoError(t, err)
	s, err := m.Stream(context.Background(), &Request{})
	require.NoError(t, err)
	parts, err := drain(s)
	require.NoError(t, err)
	require.Equal(t, 1, countKind(parts, abi.KindStreamStart))
	require.Equal(t, 1, bad.opened())
	require.Equal(t, 1, good.opened())
	require.NotZero(t, g.stats[1].latency.Load(), "west's time to first content was fed")
	require.NotZero(t, g.stats[0].fail.Load(), "east's failure was fed")
	for i := range g.stats {
		require.Zero(t, g.stats[i].inflight.Load())
	}
}

func countKind(ps []Part, k PartKind) int {
	n := 0
	for _, p := range ps {
		if p.Kind == k {
			n++
		}
	}
	return n
}

// TestGroup_AllCooledStartsOnNext: when every deployment of the start group
// cools down, requests start on the next model in the Runner's order.
func TestGroup_AllCooledStartsOnNext(t *testing.T) {
	clock := newClock()
	east := &fakeDeployment{key: "east", clock: clock}
	west := &fakeDeployment{key: "west", clock: clock}
	backup := &fakeDeployment{key: "backup", clock: clock}
	east.down.Store(true)
	west.down.Store(true)
	g := Group("gpt-4o", LeastInFlight, east, west).WithSeed(2)
	r := mustNew(t, g, clock.option(), WithRules(AnyError().Switch(backup)),
		WithCooldown(Cooldown{Failures: 1, For: time.Hour}))
	resp, err := r.Generate(context.Background(), &Request{})
	require.NoError(t, err)
	require.Equal(t, "backup", resp.Text())
	require.Equal(t, int64(1), east.calls.Load())
	require.Equal(t, int64(1), west.calls.Load())
	resp, err = r.Generate(context.Background(), &Request{})
	require.NoError(t, err)
	require.Equal(t, "backup", resp.Text())
	require.Equal(t, int64(2), backup.calls.Load())
	require.Equal(t, int64(2), east.calls.Load()+west.calls.Load(), "the group was skipped entirely")
}

// TestGroup_TelemetryNamesTheDeployment: the observer's events name the
// deployment each attempt ran on, not only the group.
func TestGroup_TelemetryNamesTheDeployment(t *testing.T) {
	east, west := &fakeModel{"east"}, &fakeModel{"west"}
	g := Group("gpt-4o", LatencyAware, east, west) // no sample yet: east first
	o := &recObserver{}
	r := mustNew(t, g, WithObserver(o))
	fn, _ := script(status(503))
	_, err := Do(context.Background(), r, fn)
	require.NoError(t, err)
	require.Equal(t, []string{
		"request-start do east",
		"attempt-start #1 east delay=0s failover=false",
		"attempt-end #1 east error class=overloaded next=west delay=0s",
		"attempt-start #2 west delay=0s failover=true",
		"commit #2 west",
	}, o.events[:5])
}
