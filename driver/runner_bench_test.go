package driver

import (
	"context"
	"testing"
	"time"
)

var benchSink string

// BenchmarkDo measures the driver's own overhead: a successful call and a
// fail-over (one failed attempt, then a switch), each against calling the
// function directly the same number of times.
//
//	go test -run '^$' -bench BenchmarkDo -benchmem ./driver/
func BenchmarkDo(b *testing.B) {
	ctx := context.Background()
	rateLimited := status(429)
	ok := func(_ context.Context, c *Call) (string, error) { return "ok", nil }
	failFirst := func(_ context.Context, c *Call) (string, error) {
		if c.Model == base {
			return "", rateLimited
		}
		return "ok", nil
	}
	rules := WithRules(OnStatus(500).Retry(), OnStatus(429).Switch(fb), Fallback(fb2))

	b.Run("success/direct", func(b *testing.B) {
		c := &Call{Model: base, Number: 1}
		for b.Loop() {
			benchSink, _ = ok(ctx, c)
		}
	})
	b.Run("success/driver", func(b *testing.B) {
		r := mustNew(b, base, rules)
		for b.Loop() {
			benchSink, _ = Do(ctx, r, ok)
		}
	})
	b.Run("success/driver+attempt-timeout", func(b *testing.B) {
		r := mustNew(b, base, rules, WithAttemptTimeout(time.Minute))
		for b.Loop() {
			benchSink, _ = Do(ctx, r, ok)
		}
	})
	// The shared state on the hot path: one State.Begin per request.
	b.Run("success/driver+cooldown+sticky+budget", func(b *testing.B) {
		r := mustNew(b, base, rules, WithCooldown(Cooldown{Failures: 3, For: time.Minute}),
			WithSticky(StickyRequests(2)), WithRetryBudget(RetryBudget{}))
		for b.Loop() {
			benchSink, _ = Do(ctx, r, ok)
		}
	})
	b.Run("failover/direct", func(b *testing.B) {
		c1, c2 := &Call{Model: base, Number: 1}, &Call{Model: fb, Number: 2}
		for b.Loop() {
			if _, err := failFirst(ctx, c1); err != nil {
				benchSink, _ = failFirst(ctx, c2)
			}
		}
	})
	b.Run("failover/driver", func(b *testing.B) {
		r := mustNew(b, base, rules)
		for b.Loop() {
			benchSink, _ = Do(ctx, r, failFirst)
		}
	})
	b.Run("success/driver-parallel", func(b *testing.B) {
		r := mustNew(b, base, rules, WithSticky(StickyRequests(2)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s, _ := Do(ctx, r, ok)
				_ = s
			}
		})
	})
}
