// Package stateplug is how package policy builds a shared fail-over state
// ("state": {"redis": …}) without linking a store's client: the store's
// package (state/redis) registers a factory when it is imported, as the
// provider adapters do (internal/link/providers), so a program whose policies
// never share state links no Redis client.
package stateplug

import (
	"log/slog"
	"sync"
	"time"

	"github.com/retryhost/retryhost/driver"
)

// Spec is a policy file's state section, resolved.
type Spec struct {
	Kind     string // the store: "redis"
	URL      string // the store's URL
	Password string // read from the environment; empty: the URL's, if any
	// SentinelPassword authenticates to the Sentinels of a
	// redis+sentinel:// URL, read from the environment; empty: the URL's.
	SentinelPassword string
	Prefix           string        // key prefix; empty: the store's default
	OpTimeout        time.Duration // zero: the store's default
	Logger           *slog.Logger  // never nil
}

// Stats are a store's counters since the process started using it.
type Stats struct {
	Errors  int64 // operations that failed or timed out against the store
	Outages int64 // times the replica fell back to its local state
	Local   int64 // operations served by the local state during outages
	Down    bool  // the replica is on its local state now
}

// Store is a built shared state.
type Store struct {
	Option driver.Option // installs the state in a Runner
	Stats  func() Stats
	Close  func() error // releases it (the last user closes the connections)
}

// Factory builds the state a Spec describes.
type Factory func(Spec) (*Store, error)

var (
	mu        sync.RWMutex
	factories = map[string]Factory{}
)

// Register makes f build the states of kind. Store packages call it from init.
func Register(kind string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	factories[kind] = f
}

// Lookup returns kind's factory, or nil when no linked package registered one.
func Lookup(kind string) Factory {
	mu.RLock()
	defer mu.RUnlock()
	return factories[kind]
}
