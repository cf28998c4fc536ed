package host

import (
	"context"
	"errors"
	"time"
)

// A Source is where a plugin's module comes from when it is not a local
// file: package oci implements one that follows an OCI registry reference.
// The interface keeps host free of any registry client. A Source must be
// safe for concurrent use by multiple goroutines.
type Source interface {
	// Fetch returns the module now behind the source and its sha256
	// (lower-case hex), which the load verifies as [WithSHA256] does. have
	// is the sha256 of a version whose bytes the caller does not need (the
	// one serving now, or one that failed to load; "" if none): when the
	// source still serves that version it may return (have, nil, nil) and
	// skip the download.
	Fetch(ctx context.Context, have string) (sha256 string, wasm []byte, err error)
}

// LoadSource loads the module behind src as the new version of name, as
// [Registry.Load] does, pinned to the sha256 the source reports. When the
// source still serves the version that is serving, nothing is loaded and
// the current handle is returned (a version is its module's sha256: opts,
// config included, apply only when a new module loads). On error the
// previous version, if any, keeps serving.
//
// # Errors
//
// The source's error (wrapped), a [*LoadError], or [ErrClosed].
func (r *Registry) LoadSource(ctx context.Context, name string, src Source, opts ...LoadOption) (*Named, error) {
	n, _, err := r.loadSource(ctx, name, src, "", opts)
	return n, err
}

// loadSource is LoadSource skipping a version known to fail (skip), so a
// watch does not recompile a broken module on every poll. It returns the
// sha256 the source reported.
func (r *Registry) loadSource(ctx context.Context, name string, src Source, skip string, opts []LoadOption) (*Named, string, error) {
	have := ""
	if n, ok := r.Get(name); ok {
		have = n.Version()
	}
	ask := have
	if skip != "" {
		ask = skip // its bytes are not needed either: the version failed to load
	}
	sum, wasm, err := src.Fetch(ctx, ask)
	if err != nil {
		return nil, "", loadErr(name, ErrInvalidModule, err)
	}
	if sum == "" {
		return nil, "", loadErr(name, ErrInvalidModule, errors.New("source reported no sha256"))
	}
	if sum == have {
		n, _ := r.Get(name)
		return n, sum, nil
	}
	if skip != "" && sum == skip {
		return nil, sum, errSkipped
	}
	if wasm == nil {
		return nil, sum, loadErr(name, ErrInvalidModule, errors.New("source returned no module for a new version"))
	}
	n, err := r.Load(ctx, name, wasm, append(append([]LoadOption(nil), opts...), WithSHA256(sum))...)
	return n, sum, err
}

var errSkipped = errors.New("version failed before")

// WatchSource loads name from src now, then asks src every interval
// (default 30s if ≤ 0) and swaps in each new version, until ctx is done;
// it returns ctx.Err(). Streams in flight finish on the version they
// started with. A failure (source unreachable, bad module) is logged when
// it first happens and leaves the previous version serving; a version
// whose load failed is not loaded again until the source moves on from it.
func (r *Registry) WatchSource(ctx context.Context, name string, src Source, interval time.Duration, opts ...LoadOption) error {
	if interval <= 0 {
		interval = 30 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var failed, lastErr string
	for {
		_, sum, err := r.loadSource(ctx, name, src, failed, opts)
		switch {
		case err == nil:
			failed, lastErr = "", ""
		case errors.Is(err, errSkipped):
		case ctx.Err() != nil:
		default:
			if sum != "" && !errors.Is(err, ErrChecksum) {
				failed = sum // a module that does not load; bytes that did not match their sum are fetched again
			}
			if msg := err.Error(); msg != lastErr {
				lastErr = msg
				r.rt.cfg.logger.Error("plugin source failed; the previous version keeps serving", "plugin", name, "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
