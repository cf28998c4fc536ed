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
	// ErrLimit: the module exceeds one of the operator's [ModuleLimits]
	// (its size, counts, tables, nesting) or took longer than
	// ModuleLimits.CompileTimeout to compile. The LoadError's Err is a
	// [*LimitError] naming the limit.
	ErrLimit = errors.New("host: module exceeds a sandbox limit")
	// ErrStartSection: the module has a Wasm start section. wazero runs it
	// inside instantiation, where no deadline can reach it, so the host
	// refuses it; a reactor initialises in _initialize instead (ABI.md).
	ErrStartSection = errors.New("host: module has a start section")
)

// LimitError names the [ModuleLimits] field a module exceeds. It is the Err
// of a [*LoadError] whose Reason is [ErrLimit]. Got may be a lower bound:
// the check stops at the first excess.
type LimitError struct {
	Limit string // the ModuleLimits field: "Exports", "Nesting", "CompileTimeout" …
	Got   uint64 // what the module declares (bytes, entries, a count; nanoseconds for CompileTimeout)
	Max   uint64 // the limit in force
	Where string // "function body 12", "table 0", or empty
}

func (e *LimitError) Error() string {
	if e.Limit == "CompileTimeout" {
		return fmt.Sprintf("CompileTimeout: compiling took longer than %v", time.Duration(e.Max))
	}
	if e.Where == "" {
		return fmt.Sprintf("%s: %d exceeds the limit of %d", e.Limit, e.Got, e.Max)
	}
	return fmt.Sprintf("%s: %s: %d exceeds the limit of %d", e.Limit, e.Where, e.Got, e.Max)
}

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
)

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
	return fmt.Sprintf("host: load plugin %q: %s: %v", e.Plugin, reason, e.Err)
}

// Is reports whether target is e's Reason.
func (e *LoadError) Is(target error) bool { return target == e.Reason }

// Unwrap returns the underlying cause.
func (e *LoadError) Unwrap() error { return e.Err }

// PluginError reports a failure of a plugin during a call. Kind is one of
// ErrTrap, ErrTimeout, ErrExit, ErrABIViolation, ErrInstanceLost,
// ErrDisabled, ErrPluginFailed, ErrWrongKind or ErrClosed; errors.Is
// matches it. Op is the export or method ("decide", "open", "part", "end",
// "close").
type PluginError struct {
	Plugin string
	Op     string
	Kind   error
	Err    error
}

func (e *PluginError) Error() string {
	if errors.Is(e.Err, e.Kind) {
		return fmt.Sprintf("host: plugin %q: %s: %v", e.Plugin, e.Op, e.Err)
	}
	if e.Err == nil {
		return fmt.Sprintf("host: plugin %q: %s: %v", e.Plugin, e.Op, e.Kind)
	}
	return fmt.Sprintf("host: plugin %q: %s: %v: %v", e.Plugin, e.Op, e.Kind, e.Err)
}

// Is reports whether target is e's Kind.
func (e *PluginError) Is(target error) bool { return target == e.Kind }

// Unwrap returns the underlying cause.
func (e *PluginError) Unwrap() error { return e.Err }

func loadErr(name string, reason, err error) error {
	return &LoadError{Plugin: name, Reason: reason, Err: err}
}
