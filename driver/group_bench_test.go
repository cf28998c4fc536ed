package driver

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkGroupPick measures the selection cost per request for a group of
// 8 deployments, per strategy: what a request on a group pays before its
// attempt (the target: ≤ 1 µs, 0 allocations). "engine" includes the
// request-side bookkeeping (tried set, cooldown mask) the Runner adds.
//
//	go test -run '^$' -bench GroupPick -benchmem ./driver
func BenchmarkGroupPick(b *testing.B) {
	deps := make([]Model, 8)
	for i := range deps {
		deps[i] = &fakeModel{fmt.Sprintf("dep-%d", i)}
	}
	for _, s := range []Strategy{WeightedRandom, LeastInFlight, LatencyAware} {
		g := Group("g", s, deps...)
		for i := range g.deps {
			g.observe(i, true, time.Duration(i+1)*time.Millisecond)
		}
		b.Run(s.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = g.pick(0, 0, false)
			}
		})
		r, err := New(g, WithCooldown(Cooldown{Failures: 3, For: time.Minute}))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(s.String()+"/engine", func(b *testing.B) {
			b.ReportAllocs()
			q := request{r: r}
			q.loadView(&Snapshot{}, time.Now()) // as a request with a cooldown has
			var st step
			for b.Loop() {
				q.aim(&st, g, false)
			}
		})
		b.Run(s.String()+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_ = g.pick(0, 0, false)
				}
			})
		})
	}
}
