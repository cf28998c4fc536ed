package e2e_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
)

// scripted is a model whose Generate answers from a script, one entry per call.
type scripted struct {
	key    string
	mu     sync.Mutex
	script []func() (*driver.Response, error)
	calls  int
}

func (m *scripted) Key() string { return m.key }

func (m *scripted) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.script[min(m.calls, len(m.script)-1)]
	m.calls++
	return f()
}

func (m *scripted) Stream(context.Context, *driver.Request) (driver.Stream, error) {
	panic("not streamed in these tests")
}

func answer(text string, reason abi.Reason) func() (*driver.Response, error) {
	return func() (*driver.Response, error) {
		return &driver.Response{Content: []abi.Part{{Kind: abi.KindTextDelta, Delta: text}},
			Finish: abi.FinishReason{Unified: reason}}, nil
	}
}

// TestRateLimitRetriedAfterRetryAfter: a 429 carrying Retry-After is
// retried after what the server asked, decided by the Wasm errmatch plugin
// and, separately, by the C status plugin.
func TestRateLimitRetriedAfterRetryAfter(t *testing.T) {
	ctx := context.Background()
	rt := runtimes(t)["guarded"]
	for _, tc := range []struct {
		name   string
		wasm   []byte
		config string
	}{
		{"errmatch", plugins.ErrMatch, `{"rules":[{"status":[429],"retry":{"delay":"1s","max_attempts":3,"retry_after":true}}]}`},
		{"c-status", plugins.CStatus, "status=429\naction=retry\ndelay_ms=1000\nmax_attempts=3\nretry_after=true\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule, err := rt.Load(ctx, tc.name, tc.wasm, host.WithConfig([]byte(tc.config)))
			require.NoError(t, err)
			defer rule.Close(ctx)
			limited := func() (*driver.Response, error) {
				return nil, &driver.ProviderError{Provider: "p", Status: 429, Message: "slow down", Retryable: true,
					Header: http.Header{"Retry-After-Ms": {"30"}}}
			}
			m := &scripted{key: "p/a", script: []func() (*driver.Response, error){limited, answer("hello", abi.ReasonStop)}}
			var delays []time.Duration
			r, err := driver.New(m, driver.WithRules(rule), driver.WithOnRetry(func(_ context.Context, info driver.RetryInfo) *driver.Overrides {
				delays = append(delays, info.Delay)
				return nil
			}))
			require.NoError(t, err)
			resp, err := r.Generate(ctx, &driver.Request{})
			require.NoError(t, err)
			require.Equal(t, "hello", resp.Text())
			require.Equal(t, 2, m.calls)
			require.Equal(t, []time.Duration{30 * time.Millisecond}, delays, "the server's Retry-After, not the rule's 1 s delay")
		})
	}
}

// TestContentFilterFinishSwitchesModel: a result that stopped on the
// content filter is rejected by the Wasm finish plugin and the request
// switches to the configured model, whose answer reaches the caller.
func TestContentFilterFinishSwitchesModel(t *testing.T) {
	ctx := context.Background()
	rt := runtimes(t)["guarded"]
	rule, err := rt.Load(ctx, "finish", plugins.Finish, host.WithConfig([]byte(`{"switch":{"content-filter":"q/b"}}`)))
	require.NoError(t, err)
	defer rule.Close(ctx)
	a := &scripted{key: "p/a", script: []func() (*driver.Response, error){answer("[filtered]", abi.ReasonContentFilter)}}
	b := &scripted{key: "q/b", script: []func() (*driver.Response, error){answer("the answer", abi.ReasonStop)}}
	var answered string
	r, err := driver.New(a, driver.WithModels(b), driver.WithRules(rule),
		driver.WithOnSuccess(func(_ context.Context, o driver.Outcome) { answered = o.Model.Key() }))
	require.NoError(t, err)
	resp, err := r.Generate(ctx, &driver.Request{})
	require.NoError(t, err)
	require.Equal(t, "the answer", resp.Text())
	require.Equal(t, "q/b", answered)
	require.Equal(t, 1, a.calls)
	require.Equal(t, 1, b.calls)
}
