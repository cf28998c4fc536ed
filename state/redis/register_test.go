package redis

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/testkit/redistest"
	"github.com/retryhost/retryhost/policy"
)

type okModel string

func (m okModel) Key() string { return string(m) }
func (m okModel) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	return &driver.Response{}, nil
}
func (m okModel) Stream(context.Context, *driver.Request) (driver.Stream, error) { return nil, nil }

func pooledRefs() map[string]int {
	shared.Lock()
	defer shared.Unlock()
	out := map[string]int{}
	for k, p := range shared.m {
		out[k.url+" "+k.prefix] = p.refs
	}
	return out
}

// TestPolicyReloadSharesTheClient: a policy loaded again with the same
// Redis (a gateway's reload) uses the same State and client as the one
// it replaces, so the reload opens no connection and the counters go
// on; closing the old one keeps the client for the new one, and the last
// to close closes it (goleak, in TestMain, checks no pool goroutine is
// left). Another prefix or server is another State.
func TestPolicyReloadSharesTheClient(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	doc := func(prefix string) []byte {
		return fmt.Appendf(nil, `{"models": [{"name": "a", "provider": "scripted"}],
			"cooldown": {"failures": 1, "for": "1m"},
			"state": {"redis": {"url": %q, "prefix": %q, "op_timeout": "2s"}}}`, srv.URL(), prefix)
	}
	opts := policy.Options{Name: "p.json", Models: map[string]driver.Model{"a": okModel("a")}}
	p1, err := policy.Parse(ctx, doc("x:"), opts)
	require.NoError(t, err)
	p2, err := policy.Parse(ctx, doc("x:"), opts)
	require.NoError(t, err)
	p3, err := policy.Parse(ctx, doc("y:"), opts)
	require.NoError(t, err)
	require.Equal(t, map[string]int{srv.URL() + " x:": 2, srv.URL() + " y:": 1}, pooledRefs())

	shared.Lock()
	s := shared.m[poolKey{url: srv.URL(), prefix: "x:", op: 2e9}].s
	shared.Unlock()
	require.NoError(t, p1.Close(ctx))
	require.NoError(t, p1.Close(ctx), "a second Close releases nothing more")
	require.Equal(t, map[string]int{srv.URL() + " x:": 1, srv.URL() + " y:": 1}, pooledRefs())
	_, err = driver.Do(ctx, p2.Runner, func(ctx context.Context, c *driver.Call) (*driver.Response, error) {
		return c.Model.Generate(ctx, nil)
	})
	require.NoError(t, err)
	require.Equal(t, Stats{}, s.Stats(), "the reloaded policy still reaches Redis through the shared client")
	st, ok := p2.StateStats()
	require.True(t, ok)
	require.Equal(t, policy.StateStats{}, st)

	require.NoError(t, p2.Close(ctx))
	require.NoError(t, p3.Close(ctx))
	require.Empty(t, pooledRefs())
	require.True(t, s.closed.Load(), "the last policy closed the client")
}
