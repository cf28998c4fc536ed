package redis

import (
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/stateplug"
)

// Importing this package lets policy files name a Redis state:
// "state": {"redis": {"url": …}}.
func init() { stateplug.Register("redis", fromPolicy) }

// shared are the States policies built, by what they were built from, so
// that a policy loaded again (a gateway's reload) uses the same client,
// local copy and counters, and the last policy to close one closes its
// connections.
var shared = struct {
	sync.Mutex
	m map[poolKey]*pooled
}{m: map[poolKey]*pooled{}}

type poolKey struct {
	url, password, prefix string
	op                    time.Duration
}

type pooled struct {
	s    *State
	refs int
}

func fromPolicy(spec stateplug.Spec) (*stateplug.Store, error) {
	k := poolKey{url: spec.URL, password: spec.Password, prefix: spec.Prefix, op: spec.OpTimeout}
	shared.Lock()
	defer shared.Unlock()
	p := shared.m[k]
	if p == nil {
		opt, err := goredis.ParseURL(spec.URL)
		if err != nil {
			return nil, fmt.Errorf("the url is not a Redis URL: %w", err)
		}
		if spec.Password != "" {
			opt.Password = spec.Password
		}
		o := Options{Prefix: spec.Prefix, OpTimeout: spec.OpTimeout, Logger: spec.Logger}
		s, err := openOwned(opt, o)
		if err != nil {
			return nil, err
		}
		p = &pooled{s: s}
		shared.m[k] = p
	}
	p.refs++
	var once sync.Once
	release := func() error {
		var err error
		once.Do(func() {
			shared.Lock()
			defer shared.Unlock()
			if p.refs--; p.refs == 0 {
				delete(shared.m, k)
				err = p.s.Close()
			}
		})
		return err
	}
	s := p.s
	return &stateplug.Store{
		Option: driver.WithState(s),
		Stats: func() stateplug.Stats {
			st := s.Stats()
			return stateplug.Stats{Errors: st.Errors, Outages: st.Outages, Local: st.LocalOps, Down: st.Down}
		},
		Close: release,
	}, nil
}
