package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// WithPluginPoll sets how often the gateway asks whether a plugin its
// policy follows by tag (an "oci" plugin with "follow_tag") has a new
// version behind the tag. A new version reloads the policy as [Gateway.Reload]
// does: requests in flight finish on the plugins they started with. The
// poll runs only while the policy follows a tag; a digest-pinned plugin
// never changes and is never polled. A registry that is down, or a new
// version that does not load, leaves the current plugins serving (logged
// once per distinct error); a version that failed to load is tried again
// every 10 polls, not on every one. Default 30s; it must be positive.
func WithPluginPoll(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("gateway: plugin poll interval must be positive, got %v", d)
		}
		c.pluginPoll = d
		return nil
	}
}

// defaultPluginPoll is WithPluginPoll's default.
const defaultPluginPoll = 30 * time.Second

// pluginRetryPolls is how many polls a new plugin version whose reload
// failed waits before it is tried again: a broken module is not recompiled
// on every poll, and a failure that was the registry's heals on its own.
const pluginRetryPolls = 10

// pluginPoller runs the poll goroutine while the policy follows a tag.
type pluginPoller struct {
	mu      sync.Mutex
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// startPoll starts the poll goroutine the first time a policy that
// follows a tag is served, unless the gateway is closing.
func (g *Gateway) startPoll(gen *generation) {
	if len(gen.pol.Followed()) == 0 {
		return
	}
	p := &g.poller
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		g.pollPlugins(ctx)
	}()
}

// stopPoll stops the poll goroutine, if any, and waits for it; no poll
// starts after it.
func (g *Gateway) stopPoll() {
	p := &g.poller
	p.mu.Lock()
	p.stopped = true
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (g *Gateway) pollPlugins(ctx context.Context) {
	t := time.NewTicker(g.cfg.pluginPoll)
	defer t.Stop()
	var lastErr, failed string
	wait := 0 // polls left before the failed version is tried again
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		gen := g.acquire()
		if gen == nil {
			return // closed
		}
		moved, err := gen.pol.Moved(ctx)
		gen.release()
		if ctx.Err() != nil {
			return // stopped during the poll: its error is ours
		}
		if err != nil {
			if msg := err.Error(); msg != lastErr {
				lastErr = msg
				g.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "plugin poll failed; the current plugins keep serving",
					slog.String("error", msg))
			}
			continue
		}
		lastErr = ""
		if len(moved) == 0 {
			failed = ""
			continue
		}
		refs := make([]string, 0, len(moved))
		for ref, sum := range moved {
			refs = append(refs, ref+" sha256:"+sum)
		}
		slices.Sort(refs)
		key := fmt.Sprint(refs)
		if key == failed && wait > 0 {
			wait--
			continue
		}
		g.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "a followed plugin has a new version; reloading the policy",
			slog.Any("plugins", refs))
		if err := g.Reload(ctx); err != nil {
			failed, wait = key, pluginRetryPolls
			continue
		}
		failed, wait = "", 0
	}
}
