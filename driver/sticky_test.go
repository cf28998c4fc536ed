package driver

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// run makes one request whose attempts on the models in failOn fail.
func run(t *testing.T, r *Runner, failOn ...Model) []string {
	t.Helper()
	var got []string
	_, _ = Do(context.Background(), r, func(_ context.Context, c *Call) (string, error) {
		got = append(got, c.Model.Key())
		for _, m := range failOn {
			if c.Model == m {
				return "", errors.New("down")
			}
		}
		return "ok", nil
	})
	return got
}

func TestSticky(t *testing.T) {
	t.Run("after-request: every request starts on the base", func(t *testing.T) {
		r := mustNew(t, base, WithRules(Fallback(fb)))
		require.Equal(t, []string{"test/base", "test/fb"}, run(t, r, base))
		require.Equal(t, []string{"test/base"}, run(t, r))
	})
	t.Run("after-2-requests: the reference's trace", func(t *testing.T) {
		r := mustNew(t, base, WithRules(Fallback(fb)), WithSticky(StickyRequests(2)))
		require.Equal(t, []string{"test/base", "test/fb"}, run(t, r, base))
		require.Equal(t, []string{"test/fb"}, run(t, r, base))
		require.Equal(t, []string{"test/fb"}, run(t, r, base))
		require.Equal(t, []string{"test/base", "test/fb"}, run(t, r, base))
	})
	t.Run("a failing sticky model hands stickiness to the next fallback", func(t *testing.T) {
		r := mustNew(t, base, WithRules(Fallback(fb), Fallback(fb2)), WithSticky(StickyRequests(5)))
		require.Equal(t, []string{"test/base", "test/fb"}, run(t, r, base))
		require.Equal(t, []string{"test/fb", "test/fb2"}, run(t, r, fb))
		require.Equal(t, []string{"test/fb2"}, run(t, r))
	})
	t.Run("after a duration", func(t *testing.T) {
		clk := newClock()
		r := mustNew(t, base, clk.option(), WithRules(Fallback(fb)), WithSticky(StickyFor(10*time.Second)))
		require.Equal(t, []string{"test/base", "test/fb"}, run(t, r, base))
		clk.advance(5 * time.Second)
		require.Equal(t, []string{"test/fb"}, run(t, r))
		clk.advance(6 * time.Second)
		require.Equal(t, []string{"test/base"}, run(t, r))
	})
	// Defect 12.14: the reference's disabled mode still reads (and uses up)
	// sticky state.
	t.Run("defect 12.14: disabled requests leave sticky state alone", func(t *testing.T) {
		disabled := false
		r := mustNew(t, base, WithRules(Fallback(fb)), WithSticky(StickyRequests(1)),
			WithDisabled(func() bool { return disabled }))
		require.Equal(t, []string{"test/base", "test/fb"}, run(t, r, base))
		disabled = true
		require.Equal(t, []string{"test/base"}, run(t, r))
		disabled = false
		require.Equal(t, []string{"test/fb"}, run(t, r), "the sticky request was not used up")
		require.Equal(t, []string{"test/base"}, run(t, r))
	})
}

type reqID struct{}

// Defect 12.1: in the reference, the current model is state of the
// retryable instance, so request B starting while request A waits to retry
// redirects A's retry. Here A and B interleave at the worst point and each
// keeps its own route.
func TestDefect12_1_ConcurrentRequestsNeverRedirectEachOther(t *testing.T) {
	aDecided, bDecided, aDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	attempts := map[string][]string{}
	r := mustNew(t, base, WithSticky(StickyRequests(3)),
		WithRules(OnStatus(429).Switch(fb), OnStatus(500).Switch(fb2)),
		WithOnRetry(func(ctx context.Context, _ RetryInfo) *Overrides {
			switch ctx.Value(reqID{}) {
			case "A":
				close(aDecided)
				<-bDecided // B starts, fails and decides while A waits
			case "B":
				close(bDecided)
				<-aDone // A retries while B waits
			}
			return nil
		}))
	do := func(id string, first error) {
		ctx := context.WithValue(context.Background(), reqID{}, id)
		_, err := Do(ctx, r, func(ctx context.Context, c *Call) (string, error) {
			mu.Lock()
			attempts[id] = append(attempts[id], c.Model.Key())
			mu.Unlock()
			if c.Number == 1 {
				return "", first
			}
			return "ok", nil
		})
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { do("A", status(429)); close(aDone) })
	<-aDecided
	wg.Go(func() { do("B", status(500)) })
	wg.Wait()
	require.Equal(t, []string{"test/base", "test/fb"}, attempts["A"])
	require.Equal(t, []string{"test/base", "test/fb2"}, attempts["B"])
}

// TestHammer_ConcurrentRequestsShareOneRunner runs many requests with
// sticky state on one Runner and checks each request's route against the
// rules applied to its own failures only.
func TestHammer_ConcurrentRequestsShareOneRunner(t *testing.T) {
	P, N := 16, 200
	if testing.Short() {
		P, N = 8, 50
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(P/2, 2)))
	var outcomes sync.Map
	r := mustNew(t, base, WithSticky(StickyRequests(3)),
		WithRules(OnStatus(429).Switch(fb), OnStatus(500).Switch(fb2), Fallback(fb2)),
		WithOnRetry(func(context.Context, RetryInfo) *Overrides { runtime.Gosched(); return nil }),
		WithOnSuccess(func(ctx context.Context, o Outcome) { outcomes.Store(ctx.Value(reqID{}), o.Model.Key()) }),
		WithOnFailure(func(ctx context.Context, o Outcome) { outcomes.Store(ctx.Value(reqID{}), "failed") }))

	// expect is the route the rules give a request whose first attempt ran
	// on first and failed with kind (0: no failure, 1: 429, 2: 500).
	expect := func(first string, kind int) []string {
		switch {
		case kind == 0:
			return []string{first}
		case kind == 1 && first != "test/fb":
			return []string{first, "test/fb"}
		case kind == 1 && first == "test/fb":
			return []string{first, "test/fb2"} // 429 rule exhausted, the fallback fires
		case first != "test/fb2":
			return []string{first, "test/fb2"}
		default:
			return []string{first} // fb2 failed and is exhausted: the request fails
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, P*N)
	for p := range P {
		wg.Go(func() {
			<-start
			for n := range N {
				id := p*N + n
				kind := id % 3
				ctx := context.WithValue(context.Background(), reqID{}, id)
				var route []string
				got, err := Do(ctx, r, func(_ context.Context, c *Call) (string, error) {
					route = append(route, c.Model.Key())
					if c.Number == 1 && kind == 1 {
						return "", status(429)
					}
					if c.Number == 1 && kind == 2 {
						return "", status(500)
					}
					return c.Model.Key(), nil
				})
				want := expect(route[0], kind)
				if !slices.Equal(route, want) {
					errs <- fmt.Errorf("request %d took %v, want %v", id, route, want)
					continue
				}
				o, _ := outcomes.Load(id)
				if err == nil && (got != route[len(route)-1] || o != got) {
					errs <- fmt.Errorf("request %d: result or outcome from another route", id)
				}
				if err != nil && o != "failed" {
					errs <- fmt.Errorf("request %d: failure without OnFailure", id)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
