package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/retryhost/retryhost/gateway/vkey"
)

// keyStoreStartTimeout bounds serve's first read of --keys-redis's set.
const keyStoreStartTimeout = 10 * time.Second

// A keyStore is serve's --keys-redis: the key set on Redis, and the
// version of it in use. reload reads it again when its version moved; a
// set that does not load, or a Redis that does not answer, keeps the keys
// in use, with one warning until it loads again. It is safe for
// concurrent use (the poll and a SIGHUP).
type keyStore struct {
	st *vkey.Store

	mu     sync.Mutex // orders the reloads: a set is never replaced by an older one
	tried  int64      // the version last read (the one in use, unless it did not load)
	failed string     // failedRedis or the set's error, warned of once ("": none)
}

// openKeyStore connects to the Redis at url and reads its key set; the
// error says why serve cannot start on it.
func openKeyStore(url string) (*keyStore, *vkey.Set, error) {
	st, err := vkey.OpenStore(url)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), keyStoreStartTimeout)
	defer cancel()
	set, v, err := st.Load(ctx)
	if err != nil {
		_ = st.Close()
		return nil, nil, err
	}
	return &keyStore{st: st, tried: v}, set, nil
}

func (k *keyStore) close() { _ = k.st.Close() }

// poll reloads the set every interval when its version moved, until the
// returned stop is called (which waits for the poll to end).
func (k *keyStore) poll(g *serveGateway, logger *slog.Logger, interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				k.reload(g, logger, "version changed", false)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// reload reads the set again if its version moved since the one last
// tried (always, with force) and puts it in use.
func (k *keyStore) reload(g *serveGateway, logger *slog.Logger, why string, force bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), vkey.StoreOpTimeout)
	defer cancel()
	v, err := k.st.Version(ctx)
	if err != nil {
		k.warn(logger, why, err)
		return
	}
	if !force && v == k.tried {
		if k.failed == failedRedis { // back, and the set unchanged meanwhile
			logger.Info("Redis key set reachable again; its keys unchanged", slog.Int64("version", v))
			k.failed = ""
		}
		return
	}
	set, v, err := k.st.Load(ctx)
	if err == nil {
		err = g.gw.SetKeySet(set)
	}
	if err != nil {
		if errors.As(err, new(*vkey.FileError)) {
			k.tried = v // tried again at the next edit
		}
		k.warn(logger, why, err)
		return
	}
	k.tried, k.failed = v, ""
	g.onDown.Store(&set.OnStoreDown)
	logger.Info("Redis key set reloaded", slog.String("why", why), slog.Int64("version", v), slog.Int("keys", set.Len()))
}

// failedRedis is keyStore.failed while Redis does not answer.
const failedRedis = "redis"

// warn logs a failed reload once: once for an outage however long, once
// for a set that does not load until an edit makes it load.
func (k *keyStore) warn(logger *slog.Logger, why string, err error) {
	what := failedRedis
	if errors.As(err, new(*vkey.FileError)) {
		what = err.Error()
	}
	if what == k.failed {
		return
	}
	k.failed = what
	logger.Warn("Redis key set reload failed; the keys in use stay", slog.String("why", why), slog.String("error", err.Error()))
}
