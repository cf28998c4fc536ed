package driver

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// Heavy-tailed first content, scaled down 10× from a 50 ms / 5 s provider
// so that the benchmark runs in seconds: 95 % of first tokens after 5 ms,
// 5 % after 500 ms, drawn independently per upstream request.
const (
	tailFast = 5 * time.Millisecond
	tailSlow = 500 * time.Millisecond
	tailP    = 0.05
)

type tailDraw struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func (d *tailDraw) delay(int) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.rng.Float64() < tailP {
		return tailSlow
	}
	return tailFast
}

// BenchmarkHedge reports the time to first content (p50, p99) of b.N
// streams, 32 at a time, on two replicas of a heavy-tailed provider (a
// first-content timeout fails over to the other), without and with
// WithHedge(15ms, 1), and the extra upstream requests per request.
//
//	go test -run '^$' -bench BenchmarkHedge -benchtime 2000x ./driver/
func BenchmarkHedge(b *testing.B) {
	for _, hedge := range []bool{false, true} {
		name := "off"
		if hedge {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			d := &tailDraw{rng: rand.New(rand.NewPCG(1, 2))}
			a := &hedgeModel{key: "a", delay: d.delay}
			c := &hedgeModel{key: "b", delay: d.delay}
			r, err := New(a, WithRules(Timeout().Switch(c)))
			if err != nil {
				b.Fatal(err)
			}
			var sopts []StreamOption
			if hedge {
				sopts = append(sopts, WithHedge(3*tailFast, 1))
			}
			m, err := NewRetryableModel(r, sopts...)
			if err != nil {
				b.Fatal(err)
			}
			ttfc := make([]time.Duration, b.N)
			sem := make(chan struct{}, 32)
			var wg sync.WaitGroup
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sem <- struct{}{}
				wg.Add(1)
				go func(i int) {
					defer func() { <-sem; wg.Done() }()
					t0 := time.Now()
					s, err := m.Stream(context.Background(), &Request{})
					if err != nil {
						b.Error(err)
						return
					}
					ttfc[i] = time.Since(t0)
					if _, err := drain(s); err != nil {
						b.Error(err)
					}
				}(i)
			}
			wg.Wait()
			b.StopTimer()
			slices.Sort(ttfc)
			pct := func(p float64) float64 { return float64(ttfc[int(p*float64(len(ttfc)-1))]) / 1e6 }
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			extra := float64(a.opens.Load()+c.opens.Load()-int32(b.N)) / float64(b.N)
			b.ReportMetric(100*extra, "extra-req-%")
			b.ReportMetric(0, "ns/op")
		})
	}
}
