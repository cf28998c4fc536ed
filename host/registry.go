package host

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/internal/leaf/filecap"
)

// Registry names plugins and hot-swaps their versions. A new version (new
// bytes, or a changed file under a watched directory) is compiled,
// verified, initialised and pre-warmed first, then swapped in atomically;
// streams in flight finish on the version they started with, and the old
// version is released when its last stream closes. A failed load leaves the
// old version serving. A Registry is safe for concurrent use by multiple
// goroutines.
type Registry struct {
	rt *Runtime

	mu      sync.Mutex
	closed  bool
	entries map[string]*Named
	retired []*Plugin
	// failed holds, by name, Scan's last failed load of a plugin, so that
	// it is logged once, not on every poll of Watch, and (unless the
	// files could not be read) not tried again until they change: a
	// plugin that never loaded has no entry to remember it by. A plugin
	// whose module is gone from its directory is dropped at that
	// directory's next scan, so the map holds at most the files there.
	failed map[string]scanFailure
}

// scanFailure is a plugin's failed load in Scan.
type scanFailure struct {
	path  string   // the module's path
	stamp string   // the files' size and mtime when it failed
	hash  [32]byte // their contents' hash, zero if they were not read whole
	// retry: the files could not be read (permissions, a file gone
	// between listing and reading), which no change of theirs may show:
	// tried on every scan, logged again only when the error changes.
	retry bool
	msg   string // the error logged
}

// NewRegistry returns an empty registry loading through rt.
func NewRegistry(rt *Runtime) *Registry {
	return &Registry{rt: rt, entries: map[string]*Named{}, failed: map[string]scanFailure{}}
}

// Named is the stable handle of a registry entry: it always serves the
// current version. It is a condition (Decide, FailPolicy) and an
// [abi.Transformer] if the current version is. A Named is safe for
// concurrent use by multiple goroutines.
type Named struct {
	name string
	cur  atomic.Pointer[Plugin]

	// file watching state, guarded by Registry.mu
	stamp string
	hash  [32]byte
}

// Name returns the entry's name.
func (n *Named) Name() string { return n.name }

// Version returns the sha256 (hex) of the version now serving.
func (n *Named) Version() string { return n.cur.Load().SHA256() }

// Policy returns the current version's transform policy.
func (n *Named) Policy() abi.TransformPolicy { return n.cur.Load().Policy() }

// FailPolicy returns the current version's fail policy.
func (n *Named) FailPolicy() abi.FailPolicy { return n.cur.Load().FailPolicy() }

// Decide runs the current version's condition (see [Plugin.Decide]).
func (n *Named) Decide(ctx context.Context, a *abi.Attempt) (abi.Decision, error) {
	for {
		p := n.cur.Load()
		d, err := p.Decide(ctx, a)
		if errors.Is(err, ErrClosed) && n.cur.Load() != p {
			continue // swapped while we called: ask the new version
		}
		return d, err
	}
}

// Open starts a stream on the current version; the stream stays on that
// version until it is closed, whatever is swapped in meanwhile.
func (n *Named) Open(ctx context.Context, info abi.StreamInfo) (abi.StreamTransform, error) {
	for {
		p := n.cur.Load()
		st, err := p.Open(ctx, info)
		if errors.Is(err, ErrClosed) && n.cur.Load() != p {
			continue
		}
		return st, err
	}
}

// Get returns the handle of name, or false if nothing was loaded under it.
func (r *Registry) Get(name string) (*Named, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := r.entries[name]
	return n, ok
}

// Load loads wasm as the new version of name (adding name if new) and
// returns its handle. On error the previous version, if any, keeps serving.
//
// # Errors
//
// A [*LoadError], or [ErrClosed].
func (r *Registry) Load(ctx context.Context, name string, wasm []byte, opts ...LoadOption) (*Named, error) {
	p, err := r.rt.Load(ctx, name, wasm, opts...)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		_ = p.Close(ctx)
		return nil, ErrClosed
	}
	n, ok := r.entries[name]
	if !ok {
		n = &Named{name: name}
		r.entries[name] = n
	}
	old := n.cur.Swap(p)
	live := r.retired[:0]
	for _, q := range r.retired {
		if !q.released.Load() {
			live = append(live, q)
		}
	}
	r.retired = live
	if old != nil {
		r.retired = append(r.retired, old)
	}
	r.mu.Unlock()
	if old != nil {
		old.retire()
		r.rt.cfg.logger.Info("plugin swapped", "plugin", name, "from", old.SHA256(), "to", p.SHA256())
	}
	return n, nil
}

// LoadFile is [Registry.Load] on the contents of a file, read as
// [Runtime.LoadFile] reads it.
func (r *Registry) LoadFile(ctx context.Context, name, path string, opts ...LoadOption) (*Named, error) {
	b, err := r.rt.readModule(name, path) // as Runtime.LoadFile: up to ModuleBytes
	if err != nil {
		return nil, err
	}
	return r.Load(ctx, name, b, opts...)
}

// Scan loads every <name>.wasm in dir that is new or changed since the last
// scan, as plugin name; if <name>.config exists beside it, its bytes are the
// config, read up to 1 MiB (a larger one, or a pipe or device that goes on
// past it, fails the load with [ErrLimit], a [*LimitError] on "config file
// bytes" naming the file). A change is noticed by size and modification time and confirmed
// by content hash. Removed files leave their plugin loaded. A load that
// fails (a module over ModuleBytes, a config over its cap, a module that
// does not compile …) is logged once, naming the file and the error, and
// retried only after the files change again (files that could not be
// read, on every scan, logged again only if the error changes); the old
// version keeps serving. opts apply to every load.
//
// # Errors
//
// The joined load errors of this scan (each a [*LoadError]); files
// unchanged since their load failed are not tried again, so their error is
// not returned again (except files that could not be read).
func (r *Registry) Scan(ctx context.Context, dir string, opts ...LoadOption) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.wasm"))
	if err != nil {
		return err
	}
	var errs []error
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".wasm")
		if err := r.scanOne(ctx, name, path, opts); err != nil {
			errs = append(errs, err)
		}
	}
	// A failure whose module is gone from dir is forgotten: a module
	// that comes back is tried and logged as new.
	r.mu.Lock()
	for name, f := range r.failed {
		if filepath.Dir(f.path) == filepath.Clean(dir) && !slices.Contains(files, f.path) {
			delete(r.failed, name)
		}
	}
	r.mu.Unlock()
	return errors.Join(errs...)
}

func (r *Registry) scanOne(ctx context.Context, name, path string, opts []LoadOption) error {
	cfgPath := strings.TrimSuffix(path, ".wasm") + ".config"
	stamp := fileStamp(path) + "|" + fileStamp(cfgPath)
	r.mu.Lock()
	n := r.entries[name]
	f, failed := r.failed[name]
	known := failed && f.stamp == stamp && !f.retry || !failed && n != nil && n.stamp == stamp
	r.mu.Unlock()
	if known {
		return nil
	}
	wasm, err := r.rt.readModule(name, path)
	if err != nil {
		// Over ModuleBytes, only a new size can bring it under: not
		// read again until the file changes.
		return r.scanFailed(name, path, path, stamp, [32]byte{}, !errors.Is(err, ErrLimit), err)
	}
	cfg, err := filecap.Read(cfgPath, maxConfigFile)
	var big *filecap.TooLargeError
	switch {
	case errors.As(err, &big):
		err = loadErr(name, ErrLimit, fmt.Errorf("%s: %w", cfgPath,
			&LimitError{Limit: "config file bytes", Got: int(min(max(big.Size, 0), math.MaxInt)), Max: maxConfigFile}))
		return r.scanFailed(name, path, cfgPath, stamp, [32]byte{}, false, err)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return r.scanFailed(name, path, cfgPath, stamp, [32]byte{}, true, loadErr(name, ErrInit, err))
	}
	h := sha256.New()
	h.Write(wasm)
	h.Write([]byte{0})
	h.Write(cfg)
	var sum [32]byte
	h.Sum(sum[:0])
	r.mu.Lock()
	if n := r.entries[name]; n != nil && n.hash == sum {
		n.stamp = stamp // touched, or back to what serves: same content
		delete(r.failed, name)
		r.mu.Unlock()
		return nil
	}
	if f, ok := r.failed[name]; ok && !f.retry && f.hash == sum {
		f.stamp = stamp // touched, same content that failed
		r.failed[name] = f
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	n, err = r.Load(ctx, name, wasm, append([]LoadOption{WithConfig(cfg)}, opts...)...)
	if err != nil {
		// A load cut short (the scan's ctx ended) says nothing of the
		// files: tried again at the next scan.
		return r.scanFailed(name, path, path, stamp, sum, ctx.Err() != nil, err)
	}
	r.mu.Lock()
	n.stamp, n.hash = stamp, sum
	delete(r.failed, name)
	r.mu.Unlock()
	return nil
}

// scanFailed records Scan's failed load of name (path is its module, file
// the file at fault) and logs it, unless the same failure of the same files was
// logged already (Watch drops Scan's errors: the log is where an operator
// sees it); the version serving, if any, stays. It returns err.
func (r *Registry) scanFailed(name, path, file, stamp string, sum [32]byte, retry bool, err error) error {
	msg := err.Error()
	r.mu.Lock()
	prev, ok := r.failed[name]
	r.failed[name] = scanFailure{path: path, stamp: stamp, hash: sum, retry: retry, msg: msg}
	_, serving := r.entries[name] // a plugin that never loaded has no entry
	r.mu.Unlock()
	if !ok || prev.stamp != stamp || prev.msg != msg {
		// Say what serves instead: the version loaded before, or nothing.
		what := "plugin reload failed; the previous version keeps serving"
		if !serving {
			what = "plugin load failed; the plugin is not loaded"
		}
		r.rt.cfg.logger.Error(what, "plugin", name, "file", file, "error", err)
	}
	return err
}

// maxConfigFile is the cap on a <name>.config file Scan reads (1 MiB, the
// default cap on a plugin's scratch buffer; the built-in plugins take 64
// KiB): past it the load fails with ErrLimit.
const maxConfigFile = 1 << 20

func fileStamp(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "-"
	}
	return fmt.Sprintf("%d@%d", fi.Size(), fi.ModTime().UnixNano())
}

// Watch scans dir now and then every interval (default 1s if ≤ 0) until
// ctx is done, and returns ctx.Err(). Load failures are logged, once
// while the files stay unchanged (see [Registry.Scan]), and leave the
// previous version serving.
func (r *Registry) Watch(ctx context.Context, dir string, interval time.Duration, opts ...LoadOption) error {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		_ = r.Scan(ctx, dir, opts...) // failures are logged by scanOne
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Close closes every version, current and retired, with
// [Plugin.Close] semantics: it waits for streams in flight until ctx is
// done. It is idempotent. The Runtime stays open.
func (r *Registry) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	ps := append([]*Plugin(nil), r.retired...)
	for _, n := range r.entries {
		ps = append(ps, n.cur.Load())
	}
	r.retired = nil
	r.mu.Unlock()
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Close(ctx))
	}
	return errors.Join(errs...)
}
