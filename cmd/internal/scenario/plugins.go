package scenario

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
)

// PluginError is what a plugin said when it failed during a request: a
// call that failed (a trap, a timeout, a negative result, an ABI
// violation …; under fail-open too, where the attempt goes on), or an
// ERROR verdict that ended an attempt.
type PluginError struct {
	// Plugin is the name the plugin was loaded under; for a verdict, the
	// transform's name.
	Plugin string `json:"plugin"`
	// Op is the call that failed ("decide", "open", "part", "end"), or
	// "verdict" for an ERROR verdict.
	Op string `json:"op"`
	// Error is the host's account of the failure (a trap's message and
	// stack, the guest's result), or the verdict's error with the guest's
	// message.
	Error string `json:"error"`
	// Guest is what the plugin wrote (its log lines, stdout and stderr)
	// since its previous failure in the request, up to this one: a Go
	// guest's panic message, a C guest's last words. The last
	// maxGuestLines lines, each cut at abi.MaxLogLine bytes.
	Guest []string `json:"guest,omitempty"`
}

const (
	maxPluginErrors = 10 // per request; the others are counted
	maxGuestLines   = 10 // per failure: the last ones
)

// pluginNotes collects, per request, the plugins' failures (as a
// host.Observer) and what they wrote (through its handler, the host's
// logger).
type pluginNotes struct {
	mu      sync.Mutex
	lines   map[string][]string // by plugin, since its last failure
	errs    []PluginError
	omitted int
}

// hostOptions are the host options that feed the notes; the host's
// records go on to next (nil: discarded).
func (n *pluginNotes) hostOptions(next *slog.Logger) []host.Option {
	if next == nil {
		next = slog.New(slog.DiscardHandler)
	}
	return []host.Option{host.WithLogger(slog.New(&handler{n: n, next: next.Handler()})), host.WithObserver(n)}
}

// PluginCall records a failed call. Failures that are not the plugin's
// (the caller canceled, the plugin closed, no room for a stream) are left
// out.
func (n *pluginNotes) PluginCall(_ context.Context, c host.PluginCall) {
	switch c.Failure {
	case "", "canceled", "closed", "no-capacity":
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	guest := n.lines[c.Plugin]
	delete(n.lines, c.Plugin)
	n.add(PluginError{Plugin: c.Plugin, Op: c.Op, Error: c.Err.Error(), Guest: guest})
}

func (n *pluginNotes) add(e PluginError) {
	if len(n.errs) == maxPluginErrors {
		n.omitted++
		return
	}
	n.errs = append(n.errs, e)
}

// verdicts records the ERROR verdicts that ended the request's attempts:
// the guest's own error text, through the ABI's error record.
func (n *pluginNotes) verdicts(o *driver.Outcome) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, a := range o.Attempts {
		var te *abi.TransformError
		var re *abi.RefusalError
		switch {
		case errors.As(a.Err, &re):
			n.add(PluginError{Plugin: re.Transform, Op: "verdict", Error: re.Error()})
		case errors.As(a.Err, &te) && te.Err == nil: // te.Err is a failure, seen by PluginCall
			n.add(PluginError{Plugin: te.Transform, Op: "verdict", Error: te.Error()})
		}
	}
}

// take returns the request's failures and starts the next request afresh.
func (n *pluginNotes) take() ([]PluginError, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	errs, omitted := n.errs, n.omitted
	n.errs, n.omitted = nil, 0
	clear(n.lines)
	return errs, omitted
}

// handler is the host's slog.Handler: it passes every record on to the
// scenario's logger and keeps those a plugin wrote (host.WithLogger: they
// carry the plugin and stream attributes, on the record itself).
type handler struct {
	n    *pluginNotes
	next slog.Handler
}

func (h *handler) Enabled(context.Context, slog.Level) bool { return true }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	var err error
	if h.next.Enabled(ctx, r.Level) {
		err = h.next.Handle(ctx, r)
	}
	h.n.keep(r)
	return err
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{n: h.n, next: h.next.WithAttrs(as)}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{n: h.n, next: h.next.WithGroup(name)}
}

// keep records r's lines as its plugin's if a plugin wrote it.
func (n *pluginNotes) keep(r slog.Record) {
	var plugin string
	stream := false
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "plugin":
			plugin = a.Value.String()
		case "stream":
			stream = true
		}
		return true
	})
	if plugin == "" || !stream {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	kept := n.lines[plugin]
	for line := range strings.Lines(r.Message) {
		if line = strings.TrimRight(line, "\r\n"); line != "" {
			kept = append(kept, line[:min(len(line), abi.MaxLogLine)])
		}
	}
	n.lines[plugin] = kept[max(0, len(kept)-maxGuestLines):]
}
