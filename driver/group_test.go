package driver

import (
	"context"
	"errors"
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
