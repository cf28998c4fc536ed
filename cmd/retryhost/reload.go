package main

// serve's reloads: the reloader that runs them one at a time under the
// budget, and the watch that asks for one when a file changes.

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/retryhost/retryhost/gateway"
	"github.com/retryhost/retryhost/internal/leaf/strict"
	"github.com/retryhost/retryhost/policy"
)

// errReloadBudget is the cause of a reload abandoned at --reload-budget;
// errReloadNewer of one a newer reload request overtook; errReloadStop of
// one the drain ended.
var (
	errReloadBudget = errors.New("past --reload-budget")
	errReloadNewer  = errors.New("a newer reload was asked for")
	errReloadStop   = errors.New("serve is stopping")
)

// A reloader runs serve's policy reloads one at a time off its control
// loop, each under the budget. A reload asked for while one is in progress
// supersedes it: the one in progress is cancelled (it would put in place
// the files as they were when it began) and the new one starts when it
// has returned, so that two compiles never run at once even with a loader
// slow to notice its cancellation. Requests made meanwhile fold into one.
// Its methods are safe for concurrent use and never wait for a reload.
type reloader struct {
	reload func(context.Context) error
	budget time.Duration
	log    *slog.Logger

	mu      sync.Mutex
	why     string                  // the pending request's reason; "": none
	cancel  context.CancelCauseFunc // the reload in progress; nil: none
	stopped bool
	wake    chan struct{}
	done    chan struct{}
}

// serveReloadHook, when set (by tests), runs at the start of each reload
// under its context, as a slow compile would: the reload goes on when it
// returns.
var serveReloadHook func(ctx context.Context) error

func newReloader(reload func(context.Context) error, budget time.Duration, log *slog.Logger) *reloader {
	r := &reloader{reload: reload, budget: budget, log: log, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go r.loop()
	return r
}

// request asks for a reload (why is for the log), superseding the one in
// progress.
func (r *reloader) request(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.why = why
	if r.cancel != nil {
		r.cancel(errReloadNewer)
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// stop abandons the reload in progress, if any, and any pending; it does
// not wait for the reload to return.
func (r *reloader) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.stopped = true
	if r.cancel != nil {
		r.cancel(errReloadStop)
	}
	close(r.done)
}

func (r *reloader) loop() {
	for {
		select {
		case <-r.done:
			return
		case <-r.wake:
		}
		r.mu.Lock()
		why := r.why
		if r.stopped || why == "" {
			r.mu.Unlock()
			continue
		}
		r.why = ""
		ctx, cancel := context.WithCancelCause(context.Background())
		r.cancel = cancel
		r.mu.Unlock()
		r.run(ctx, why)
		r.mu.Lock()
		r.cancel = nil
		r.mu.Unlock()
		cancel(nil)
	}
}

// run is one reload under the budget.
func (r *reloader) run(ctx context.Context, why string) {
	ctx, cancel := context.WithTimeoutCause(ctx, r.budget, errReloadBudget)
	defer cancel()
	if serveReloadHook != nil {
		_ = serveReloadHook(ctx) // the reload sees ctx as the hook left it
	}
	err := r.reload(ctx)
	switch {
	case err == nil:
		r.log.Info("policy reloaded", slog.String("why", why))
	case errors.Is(err, gateway.ErrReloadAbandoned) && errors.Is(err, errReloadBudget):
		r.log.Error("policy reload abandoned past --reload-budget; the old policy stays",
			slog.String("why", why), slog.Duration("budget", r.budget))
	}
}

// watchFiles reports, at most once per interval, that one of the files
// files() names changed (see fileWatch.check). It asks files() again at
// every tick, so a plugin the policy starts to use is watched from then
// on. what names what the files hold, for the log.
func watchFiles(ctx context.Context, files func() []string, interval time.Duration, log *slog.Logger, what string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	w := newFileWatch(files, log, what)
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if w.check() {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return ch
}

// fileWatch is watchFiles' state between two checks.
type fileWatch struct {
	files   func() []string
	log     *slog.Logger
	what    string
	last    map[string]os.FileInfo // as last reported, every file there
	missing map[string]bool        // missing at the last check (logged)
}

// newFileWatch watches files from their state now.
func newFileWatch(files func() []string, log *slog.Logger, what string) *fileWatch {
	w := &fileWatch{files: files, log: log, what: what, missing: map[string]bool{}}
	w.check()
	return w
}

// check reports whether the files changed since the last report: one
// added to or gone from the list, or one whose size, modification time or
// identity (a new file in its place: an editor's atomic save, a
// ConfigMap's symlink swap, even of the same size within the clock's
// granularity) differs. While a file is missing it reports nothing (a
// reload would fail, and the change made meanwhile would be lost to the
// next check) and logs it once; when every file is back, any change made
// meanwhile, to it or another, is reported.
func (w *fileWatch) check() bool {
	files := w.files()
	cur := make(map[string]os.FileInfo, len(files))
	whole := true
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			whole = false
			if !w.missing[f] {
				w.missing[f] = true
				w.log.Error("watched file missing; the "+w.what+" in use stays until it is back",
					slog.String("file", f), slog.String("error", err.Error()))
			}
			continue
		}
		if w.missing[f] {
			delete(w.missing, f)
			w.log.Info("watched file back", slog.String("file", f))
		}
		cur[f] = fi
	}
	for f := range w.missing {
		if !slices.Contains(files, f) {
			delete(w.missing, f) // no longer watched
		}
	}
	if !whole {
		return false
	}
	changed := len(cur) != len(w.last)
	for f, fi := range cur {
		old, ok := w.last[f]
		if !ok || fi.Size() != old.Size() || !fi.ModTime().Equal(old.ModTime()) || !os.SameFile(fi, old) {
			changed = true
		}
	}
	w.last = cur
	return changed
}

// policyFiles returns the policy file and the plugin files it names by
// path (relative ones against its directory, as policy.Load resolves
// them): a change to any of them reloads the policy. A file that does not
// decode is watched alone (the reload will report it).
func policyFiles(file string) []string {
	files := []string{file}
	data, err := os.ReadFile(file)
	if err != nil {
		return files
	}
	var f policy.File
	switch strings.ToLower(filepath.Ext(file)) {
	case ".yaml", ".yml":
		_, err = strict.DecodeYAML(data, &f)
	default:
		if _, err = strict.Decode(data, &f); err != nil {
			_, err = strict.DecodeYAML(data, &f)
		}
	}
	if err != nil {
		return files
	}
	add := func(ps *policy.PluginSpec) {
		if ps == nil || ps.Path == "" {
			return
		}
		p := ps.Path
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(file), p)
		}
		if !slices.Contains(files, p) {
			files = append(files, p)
		}
	}
	for i := range f.Rules {
		add(f.Rules[i].Plugin)
	}
	for i := range f.Transforms {
		add(f.Transforms[i].Plugin)
	}
	return files
}
