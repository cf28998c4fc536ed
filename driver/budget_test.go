package driver

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/retryhost/retryhost/abi"
	"github.com/stretchr/testify/require"
)

func TestWithRetryBudget_Validation(t *testing.T) {
	tests := []struct {
		name    string
		b       RetryBudget
		want    RetryBudget
		wantErr string
	}{
		{name: "zero takes the defaults", b: RetryBudget{}, want: RetryBudget{Percent: 20, MinRetries: 3}},
		{name: "explicit", b: RetryBudget{Percent: 50, MinRetries: 1}, want: RetryBudget{Percent: 50, MinRetries: 1}},
		{name: "percent 100", b: RetryBudget{Percent: 100}, want: RetryBudget{Percent: 100, MinRetries: 3}},
		{name: "percent above 100", b: RetryBudget{Percent: 101}, wantErr: "percent 101 is not in 1-100"},
		{name: "negative percent", b: RetryBudget{Percent: -1}, wantErr: "percent -1"},
		{name: "negative minimum", b: RetryBudget{MinRetries: -2}, wantErr: "negative retry budget minimum -2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(base, WithRetryBudget(tt.b))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, *r.cfg.retryBudget)
		})
	}
}

// TestRetryBudget_Storm drives 200 concurrent requests into a provider
// that fails every first attempt: with a 20 % budget, exactly
// max(3, 200×20/100) = 40 of them may retry while the others fail fast
// with ErrBudgetExhausted; once failures stop, the budget is whole again.
func TestRetryBudget_Storm(t *testing.T) {
	const n, percent, minRetries = 200, 20, 3
	wantRetries := max(minRetries, n*percent/100)

	var (
		failing  atomic.Bool
		attempts atomic.Int64
		retries  atomic.Int64
		arrived  sync.WaitGroup // every first attempt is in flight
		release  = make(chan struct{})
		// settled gets one signal per request that has either entered
		// its retry (which then waits for release) or returned.
		settled = make(chan struct{}, n)
	)
	failing.Store(true)
	fn := func(ctx context.Context, c *Call) (string, error) {
		attempts.Add(1)
		if c.Number == 1 && failing.Load() {
			arrived.Done()
			arrived.Wait()
			return "", status(503)
		}
		if c.Number > 1 {
			retries.Add(1)
			settled <- struct{}{}
			<-release // retries stay in flight until the test lets them go
		}
		return "ok", nil
	}
	r := mustNew(t, base, WithRules(OnStatus(503).Retry().Attempts(2)),
		WithRetryBudget(RetryBudget{Percent: percent, MinRetries: minRetries}))

	var wg sync.WaitGroup
	var ok, exhausted, other atomic.Int64
	arrived.Add(n)
	for range n {
		wg.Go(func() {
			_, err := Do(context.Background(), r, fn)
			var re *RetryError
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ErrBudgetExhausted) && errors.As(err, &re) && re.Cause == ErrBudgetExhausted:
				exhausted.Add(1)
				settled <- struct{}{}
			default:
				other.Add(1)
				settled <- struct{}{}
			}
		})
	}
	for range n {
		<-settled
	}
	admitted := retries.Load()
	failing.Store(false)
	close(release)
	wg.Wait()
	require.Equal(t, int64(wantRetries), admitted, "retries admitted")
	require.Equal(t, int64(n+wantRetries), attempts.Load(), "upstream attempts")
	require.Equal(t, int64(wantRetries), ok.Load())
	require.Equal(t, int64(n-wantRetries), exhausted.Load())
	require.Zero(t, other.Load())

	lb := budgetOf(r)
	require.Zero(t, lb.requests.Load(), "requests in flight after the storm")
	require.Zero(t, lb.retries.Load(), "retries in flight after the storm")

	// The failures have stopped: a lone request that fails once retries
	// again (the minimum lets low traffic retry).
	fn2, log := script(status(503))
	res, err := Do(context.Background(), r, fn2)
	require.NoError(t, err)
	require.Equal(t, "ok from test/base", res)
	require.Len(t, *log, 2)
}

// TestRetryBudget_Minimum: with two requests in flight, 20 % of them is
// no retry at all; MinRetries says how many may retry anyway.
func TestRetryBudget_Minimum(t *testing.T) {
	for _, tt := range []struct {
		name       string
		min        int
		wantSecond error // what the second request gets
	}{
		{name: "minimum 1: the second retry is refused", min: 1, wantSecond: ErrBudgetExhausted},
		{name: "minimum 2: both retry", min: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inRetry, release := make(chan struct{}), make(chan struct{})
			first := func(ctx context.Context, c *Call) (string, error) {
				if c.Number == 1 {
					return "", status(503)
				}
				close(inRetry)
				<-release
				return "ok", nil
			}
			r := mustNew(t, base, WithRules(OnStatus(503).Retry()), WithRetryBudget(RetryBudget{MinRetries: tt.min}))
			done := make(chan error, 1)
			go func() { _, err := Do(context.Background(), r, first); done <- err }()
			<-inRetry // the first request's retry holds a slot
			fn, log := script(status(503))
			_, err := Do(context.Background(), r, fn)
			if tt.wantSecond != nil {
				require.ErrorIs(t, err, tt.wantSecond)
				require.Len(t, *log, 1, "refused: no second attempt upstream")
			} else {
				require.NoError(t, err)
				require.Len(t, *log, 2)
			}
			close(release)
			require.NoError(t, <-done)
		})
	}
}

// TestRetryBudget_SpentKeepsAnswers: with no budget left, a failure fails
// fast with ErrBudgetExhausted, but a result a rule would have rejected is
// returned as the answer: the budget sheds load, it never turns an answer
// into an error.
func TestRetryBudget_SpentKeepsAnswers(t *testing.T) {
	filtered := &Response{Finish: FinishReason{Unified: abi.ReasonContentFilter}}
	a := &scriptModel{key: "p/a", genResp: []*Response{filtered}}
	b := &scriptModel{key: "p/b", genResp: []*Response{{Finish: FinishReason{Unified: abi.ReasonStop}}}}
	r := mustNew(t, a, WithRules(OnFinish(abi.ReasonContentFilter).Switch(b), AnyError().Switch(b)),
		WithRetryBudget(RetryBudget{MinRetries: 1}))
	lb := budgetOf(r)
	lb.retries.Store(1) // someone else's retry holds the only slot
	resp, err := r.Generate(context.Background(), &Request{})
	require.NoError(t, err)
	require.Same(t, filtered, resp)
	require.Zero(t, b.gens, "no second attempt")

	a.genResp, a.openErr = []*Response{nil}, []error{status(503)}
	_, err = r.Generate(context.Background(), &Request{})
	require.ErrorIs(t, err, ErrBudgetExhausted)
	require.Contains(t, err.Error(), "retry budget exhausted")
	require.Zero(t, b.gens)

	lb.retries.Store(0) // the slot is given back: the budget recovers
	_, err = r.Generate(context.Background(), &Request{})
	require.NoError(t, err)
	require.Equal(t, 1, b.gens)
	require.Zero(t, lb.retries.Load())
	require.Zero(t, lb.requests.Load())
}
