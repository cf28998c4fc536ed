package abi

import (
	"context"
	"fmt"
	"time"
)

// PartAction is a transform's verdict on one part. The zero value,
// PartPass, lets the part through, so a zeroed verdict is harmless.
type PartAction uint8

// The transform actions. Values are part of ABI v1.
const (
	// PartPass releases the hold queue in order, then the current part.
	PartPass PartAction = 0
	// PartHold appends the current part to the hold queue and emits nothing.
	PartHold PartAction = 1
	// PartError discards the hold queue and fails the attempt with Verdict.Err.
	PartError PartAction = 2
	// PartDrop discards the current part; the hold queue stays as it is.
	PartDrop PartAction = 3
	// PartReplace discards the hold queue and the current part and emits
	// Verdict.Replace instead.
	PartReplace PartAction = 4
	// PartDetach releases the hold queue and the current part, and passes
	// every later part of the stream without calling the transform again.
	PartDetach PartAction = 5
)

var partActionNames = [...]string{"pass", "hold", "error", "drop", "replace", "detach"}

// String returns the action's name, such as "detach".
func (a PartAction) String() string {
	if int(a) < len(partActionNames) {
		return partActionNames[a]
	}
	return "unknown"
}

// Valid reports whether a is an action this version of the ABI defines.
func (a PartAction) Valid() bool { return int(a) < len(partActionNames) }

// Verdict is what a transform answers for a part or for the end of the stream.
type Verdict struct {
	Action PartAction
	// Replace holds the parts to emit instead (PartReplace only).
	Replace []Part
	// Err says why the attempt fails (PartError only), for example a
	// *RefusalError. A nil Err with PartError becomes a *TransformError.
	Err error
}

// StreamInfo identifies the stream a transform instance serves.
type StreamInfo struct {
	ID      uint64 // unique within the process
	Model   string // key of the model the attempt runs on
	Attempt int    // 1-based attempt number within the request
}

// FailPolicy says what happens to a stream when its transform itself fails
// (a trap, a timeout, a panic, a broken plugin).
type FailPolicy uint8

const (
	// FailOpen passes the stream on untouched from the failure: the held
	// parts are released and the transform is detached. The default.
	FailOpen FailPolicy = 0
	// FailClosed fails the attempt with an error of class ClassPlugin, which
	// the conditions then judge like any other failure.
	FailClosed FailPolicy = 1
)

// String returns "fail-open" or "fail-closed".
func (f FailPolicy) String() string {
	if f == FailClosed {
		return "fail-closed"
	}
	return "fail-open"
}

// CapAction says what the driver does when a hold cap is hit.
type CapAction uint8

const (
	// CapDefault (the zero value) follows the transform's FailPolicy: a
	// fail-closed transform fails the attempt with a *HoldCapError (as
	// CapFail), a fail-open one releases the hold queue and detaches (as
	// CapFlush). A transform that may not let unchecked text through
	// declares fail-closed and gets both behaviours from that one word.
	// Until ABI v1.2 the zero value meant CapFlush for every transform,
	// which silently released a fail-closed content filter's held text.
	CapDefault CapAction = 0
	// CapFail fails the attempt with a *HoldCapError.
	CapFail CapAction = 1
	// CapFlush releases the hold queue and detaches the transform, even
	// for a fail-closed transform (ABI v1.2; until then the zero value).
	CapFlush CapAction = 2
)

// String returns "default", "fail" or "flush".
func (a CapAction) String() string {
	switch a {
	case CapFail:
		return "fail"
	case CapFlush:
		return "flush"
	}
	return "default"
}

// TransformPolicy is what a transform declares about its own failures and
// holding. Zero fields take the documented defaults.
type TransformPolicy struct {
	Fail FailPolicy
	// MaxHeldParts caps the hold queue's length. Default 256.
	MaxHeldParts int
	// MaxHeldBytes caps the bytes ([Part.Size]) in the hold queue. Default 64 KiB.
	MaxHeldBytes int
	// MaxHoldTime caps how long the oldest held part may wait. Default 10 s.
	MaxHoldTime time.Duration
	// OnCap is what happens when a cap is hit. Default CapDefault: fail
	// the attempt if Fail is FailClosed, else flush and detach.
	OnCap CapAction
}

// FailsAtCap reports whether hitting a hold cap fails the attempt (rather
// than releasing the held parts and detaching): OnCap resolved against
// Fail (see [CapDefault]).
func (p *TransformPolicy) FailsAtCap() bool {
	return p.OnCap == CapFail || (p.OnCap == CapDefault && p.Fail == FailClosed)
}

// Transformer makes per-stream transform instances. A native Go transform and
// a Wasm plugin loaded by the host both satisfy it.
//
// Implementations must be safe for concurrent use: the driver opens streams
// from many goroutines.
type Transformer interface {
	// Name identifies the transform in errors, logs and telemetry.
	Name() string
	// Policy returns the transform's failure and holding policy.
	Policy() TransformPolicy
	// Open starts the transform's state for one stream (one attempt). An
	// error is a failure of the transform, to which its FailPolicy applies.
	Open(ctx context.Context, info StreamInfo) (StreamTransform, error)
}

// StreamTransform is one transform's state for one stream. The driver calls
// it from one goroutine at a time, in stream order, and calls Close exactly
// once, whether the stream ended, failed or was abandoned.
type StreamTransform interface {
	// Part judges the next part. The part is only valid during the call;
	// an implementation that keeps it must copy it (Part values are cheap
	// to copy; their payloads are immutable).
	// An error is a failure of the transform (not a verdict on the stream);
	// the transform's FailPolicy applies.
	Part(ctx context.Context, p *Part) (Verdict, error)
	// End is called once when the upstream ended cleanly; it resolves
	// whatever is still held. PartHold here is treated as PartPass.
	End(ctx context.Context) (Verdict, error)
	// Close releases the state. It is called exactly once, also after
	// PartDetach, an error or an abandoned stream.
	Close()
}

// RefusalError reports that the model refused in natural language: the
// leading text of the stream matched a refusal phrase. Both the native Go
// detector and the Wasm refusal plugin produce it, so conditions can branch
// on it with errors.As or on ClassRefusal.
type RefusalError struct {
	Transform string // the transform that judged it
	Phrase    string // the normalised phrase that matched
	Text      string // the text held when it matched, as the model sent it
}

func (e *RefusalError) Error() string {
	return fmt.Sprintf("refusal detected by %s: %q matched %q", e.Transform, e.Text, e.Phrase)
}

// TransformError is the error of a PartError verdict that did not supply its
// own, or that came from a Wasm plugin, and (class ClassPlugin) the error
// of an attempt that a fail-closed transform's own failure ended.
type TransformError struct {
	Transform string
	Class     ErrorClass // ClassTransform unless the transform said otherwise
	Code      uint32     // the plugin's own code, 0 if none
	Message   string
	// Err is the failure of the transform itself when Class is
	// ClassPlugin (a *host.PluginError: a trap, a timeout …), so that
	// errors.Is(err, host.ErrTimeout) and errors.As(err, &pluginErr) see
	// through the TransformError; nil for a verdict's error. It never
	// crosses the Wasm boundary.
	Err error
}

// Unwrap returns Err.
func (e *TransformError) Unwrap() error { return e.Err }

func (e *TransformError) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("transform %s failed the stream (code %d): %s", e.Transform, e.Code, e.Message)
	}
	return fmt.Sprintf("transform %s failed the stream: %s", e.Transform, e.Message)
}
