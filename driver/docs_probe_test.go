package driver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// leaseState records the lease of every probe asked for.
type leaseState struct {
	*localState
	mu     sync.Mutex
	leases []time.Duration
}

func (s *leaseState) TakeProbe(ctx context.Context, m string, d time.Duration) bool {
	s.mu.Lock()
	s.leases = append(s.leases, d)
	s.mu.Unlock()
	return s.localState.TakeProbe(ctx, m, d)
}

func (s *leaseState) first() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.leases) == 0 {
		return 0, false
	}
	return s.leases[0], true
}

// The limits table in docs/security.md (fleet state on Redis): "A probe lease: the attempt timeout,
// else Cooldown.For" — what a replica that dies mid-probe holds the model
// for before another may probe it.
func TestDocsProbeLease(t *testing.T) {
	const cooldownFor = 20 * time.Millisecond
	for _, tc := range []struct {
		name string
		opts []Option
		want time.Duration
	}{
		{"no attempt timeout: Cooldown.For", nil, cooldownFor},
		{"the attempt timeout", []Option{WithAttemptTimeout(7 * time.Second)}, 7 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &leaseState{localState: newLocalState(time.Now)}
			opts := append([]Option{WithState(s), WithRules(Fallback(fb)), WithCooldown(Cooldown{Failures: 1, For: cooldownFor})}, tc.opts...)
			r := mustNew(t, base, opts...)
			require.Equal(t, []string{"test/base", "test/fb"}, run503(t, r, base))
			var lease time.Duration
			require.Eventually(t, func() bool { // once the cooldown is over, the next request probes
				run503(t, r)
				var ok bool
				lease, ok = s.first()
				return ok
			}, 10*time.Second, 5*time.Millisecond)
			require.Equal(t, tc.want, lease)
		})
	}
}
