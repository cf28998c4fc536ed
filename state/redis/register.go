package redis

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/link/stateplug"
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
	url, password, sentinelPassword, prefix string
	op                                      time.Duration
}

type pooled struct {
	s    *State
	refs int
}

func fromPolicy(spec stateplug.Spec) (*stateplug.Store, error) {
	k := poolKey{url: spec.URL, password: spec.Password, sentinelPassword: spec.SentinelPassword, prefix: spec.Prefix, op: spec.OpTimeout}
	shared.Lock()
	defer shared.Unlock()
	p := shared.m[k]
	if p == nil {
		t, err := parseURL(spec.URL)
		if err != nil {
			return nil, fmt.Errorf("the url: %w", err)
		}
		if err := t.auth(spec.Password, spec.SentinelPassword); err != nil {
			return nil, err
		}
		o := Options{Prefix: spec.Prefix, OpTimeout: spec.OpTimeout, Logger: spec.Logger}
		s, err := openOwned(t, o)
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

// auth sets the passwords a policy names by their variables: the
// server's (every node's, for a cluster; the primary's and replicas', for
// Sentinel) and the Sentinels'. Empty ones leave the URL's.
func (t target) auth(password, sentinelPassword string) error {
	if sentinelPassword != "" && t.failover == nil {
		return errors.New("a Sentinel password is set, and the url is not a redis+sentinel:// one")
	}
	switch {
	case password == "":
	case t.failover != nil:
		t.failover.Password = password
	case t.cluster != nil:
		t.cluster.Password = password
	default:
		t.single.Password = password
	}
	if sentinelPassword != "" {
		t.failover.SentinelPassword = sentinelPassword
	}
	return nil
}
