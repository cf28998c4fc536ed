package host

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Reasons a load fails. A [*LoadError] carries exactly one of them; branch
// with errors.Is(err, host.ErrABIVersion).
var (
	ErrInvalidModule   = errors.New("host: not a valid wasm module")
	ErrChecksum        = errors.New("host: sha256 does not match the pin")
	ErrABIVersion      = errors.New("host: unsupported ABI version")
	ErrForbiddenImport = errors.New("host: forbidden import")
	ErrBadExport       = errors.New("host: export missing or with the wrong signature")
	ErrNoKind          = errors.New("host: plugin is neither a condition nor a transform")
	ErrInit            = errors.New("host: plugin failed during init")
	ErrConfigRejected  = errors.New("host: plugin rejected its config")
	ErrNoBuffer        = errors.New("host: plugin registered no valid scratch buffer")
	// ErrStartSection: the module has a Wasm start section. wazero runs it
	// inside instantiation, where no deadline can reach it, so the host
	// refuses it; a reactor initialises in _initialize instead (ABI.md).
	ErrStartSection = errors.New("host: module has a start section")
)

// Kinds of plugin failure at call time. A [*PluginError] carries exactly one.
var (
	// ErrTrap: the guest trapped (unreachable, out-of-bounds access, a Go
	// panic, out of memory). The instance is discarded.
	ErrTrap = errors.New("host: plugin trapped")
	// ErrStackOverflow: the guest's call stack reached wazero's ceiling
	// (unbounded recursion). It comes with [ErrTrap]: a [*PluginError]
	// whose Kind is ErrTrap wraps it, so errors.Is matches both.
	ErrStackOverflow = errors.New("host: plugin call stack overflowed")
	// ErrTimeout: the call outlived the per-call deadline and was stopped.
	// The instance is discarded.
	ErrTimeout = errors.New("host: plugin call timed out")
	// ErrExit: the guest exited (proc_exit). The instance is discarded.
	ErrExit = errors.New("host: plugin exited")
	// ErrABIViolation: the guest answered something the ABI forbids (an
	// unknown action, a malformed record, an output larger than its
	// buffer). The instance is discarded.
	ErrABIViolation = errors.New("host: plugin violated the ABI")
	// ErrInstanceLost: the instance holding this stream's state was
	// discarded after a failure of another call.
	ErrInstanceLost = errors.New("host: plugin instance holding the stream was lost")
	// ErrDisabled: the crash-loop breaker disabled the plugin.
	ErrDisabled = errors.New("host: plugin disabled after repeated failures")
	// ErrPluginFailed: the guest reported a failure itself (a negative result).
	ErrPluginFailed = errors.New("host: plugin reported a failure")
	// ErrWrongKind: Decide on a plugin that is not a condition, or Open on
	// one that is not a transform.
	ErrWrongKind = errors.New("host: plugin does not implement this kind")
	// ErrNoCapacity: no instance had room for another stream (ABI v1.2:
	// the plugin's declared max_streams, or its retryhost_open answered
	// OpenNoRoom). Only that stream fails, by the plugin's fail policy; it
	// is not a failure of the plugin and never trips its breaker.
	ErrNoCapacity = errors.New("host: plugin has no room for another stream")
	// ErrLimit: the plugin's output went over one of the host's caps (a
	// REPLACE's parts or bytes, per call or per stream); the Err of the
	// [*PluginError] is a [*LimitError] naming it. The stream fails by the
	// plugin's fail policy and the failure counts for the breaker; the
	// instance and its other streams are kept.
	//
	// At load, ErrLimit is the Reason of a [*LoadError]: the module exceeds
	// one of the operator's [ModuleLimits] (its size, counts, tables,
	// nesting) or took longer than ModuleLimits.CompileTimeout to compile,
	// or [Registry.Scan]'s <name>.config is over its cap; its Err is (or
	// wraps, with the file's path) a [*LimitError] naming the limit.
	ErrLimit = errors.New("host: plugin exceeded a host limit")
)

// LimitError names the host limit a plugin exceeded ([ErrLimit]).
type LimitError struct {
	// Limit is the limit's name: at call time "replace parts per call",
	// "replace bytes per call", "replace parts per stream", "replace
	// bytes per stream" or "part size" (a part over [abi.MaxPartSize]); at load the [ModuleLimits] field ("Exports",
	// "Nesting", "TableEntries", "CompileTimeout" …), or "config file
	// bytes" for a <name>.config over [Registry.Scan]'s 1 MiB.
	Limit string
	Max   int // the limit's value (nanoseconds for CompileTimeout)
	// Got is, at load, what the module declares (a count, bytes, entries;
	// a lower bound, as the check stops at the first excess), or 0.
	Got int
	// Where locates a load limit's excess ("function body 12", "table
	// 0"), or is empty.
	Where string
}

func (e *LimitError) Error() string {
	switch {
	case e.Limit == "CompileTimeout":
		return fmt.Sprintf("CompileTimeout: compiling took longer than %v", time.Duration(e.Max))
	case e.Got == 0:
		return fmt.Sprintf("over the host's limit on %s (%d)", e.Limit, e.Max)
	case e.Where == "":
		return fmt.Sprintf("%s: %d exceeds the limit of %d", e.Limit, e.Got, e.Max)
	}
	return fmt.Sprintf("%s: %s: %d exceeds the limit of %d", e.Limit, e.Where, e.Got, e.Max)
}

// Is makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// ResultError is a guest's own negative result from an export
// (retryhost_decide, retryhost_open, retryhost_parts, a failed
// retryhost_open_part): the plugin reported a failure ([ErrPluginFailed]).
// Result is the guest's value, which is the guest's business, not an
// [abi.Status] (statuses are what imports return).
type ResultError struct {
	Export string // "retryhost_decide", …
	Result int64
}

func (e *ResultError) Error() string {
	return fmt.Sprintf("%s returned %d", e.Export, e.Result)
}

// ErrClosed is returned after [Runtime.Close] or [Plugin.Close], and by
// [Runtime.Load] on a closed runtime.
var ErrClosed = errors.New("host: closed")

// LoadError reports why a plugin could not be loaded. Reason is one of the
// ErrXxx load sentinels above, or the Load context's error when it ended
// first (context.Canceled, context.DeadlineExceeded); errors.Is matches it. Err, when set, is the
// underlying cause (wazero's error, a guest's rejection reason).
type LoadError struct {
	Plugin string
	Reason error
	Err    error
}

func (e *LoadError) Error() string {
	// The reasons are sentinels that say "host: " themselves; the message
	// says it once.
	reason := strings.TrimPrefix(fmt.Sprint(e.Reason), "host: ")
	if e.Err == nil {
		return fmt.Sprintf("host: load plugin %q: %s", e.Plugin, reason)
	}
	// A cause from a call (init) carries a call-time sentinel: say host:
	// once there too.
	cause := strings.ReplaceAll(e.Err.Error(), ": host: ", ": ")
	return fmt.Sprintf("host: load plugin %q: %s: %s", e.Plugin, reason, strings.TrimPrefix(cause, "host: "))
}

// Is reports whether target is e's Reason.
func (e *LoadError) Is(target error) bool { return target == e.Reason }

// Unwrap returns the underlying cause.
func (e *LoadError) Unwrap() error { return e.Err }

// PluginError reports a failure of a plugin during a call. Kind is one of
// ErrTrap, ErrTimeout, ErrExit, ErrABIViolation, ErrInstanceLost,
// ErrDisabled, ErrPluginFailed, ErrWrongKind, ErrClosed, ErrNoCapacity or
// ErrLimit; errors.Is matches it. Under fail-closed the driver's error
// wraps it (an *abi.TransformError of class plugin), so errors.As finds it
// there too. Op is the export or method ("decide", "open", "part", "end",
// "close").
type PluginError struct {
	Plugin string
	Op     string
	Kind   error
	Err    error
}

func (e *PluginError) Error() string {
	var cause string
	switch {
	case errors.Is(e.Err, e.Kind):
		cause = e.Err.Error()
	case e.Err == nil:
		cause = fmt.Sprint(e.Kind)
	default:
		cause = fmt.Sprintf("%v: %v", e.Kind, e.Err)
	}
	// The kinds are sentinels that say "host: " themselves (a trap may
	// carry two: ErrTrap, ErrStackOverflow); the message says it once.
	cause = strings.ReplaceAll(strings.TrimPrefix(cause, "host: "), ": host: ", ": ")
	return fmt.Sprintf("host: plugin %q: %s: %s", e.Plugin, e.Op, cause)
}

// Is reports whether target is e's Kind.
func (e *PluginError) Is(target error) bool { return target == e.Kind }

// Unwrap returns the underlying cause.
func (e *PluginError) Unwrap() error { return e.Err }

func loadErr(name string, reason, err error) error {
	return &LoadError{Plugin: name, Reason: reason, Err: err}
}
