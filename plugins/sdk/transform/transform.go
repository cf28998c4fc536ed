// Package transform registers a plugin's stream transform: import it from
// your plugin's main package and call [Register] in an init function.
// Importing it is what makes the module a transform: in Wasm it adds the
// retryhost_open, _part, _parts, _end and _close exports.
//
// See package sdk for a complete plugin.
package transform

import (
	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/sdk/internal/guest"
)

// Transform opens one Stream per stream. A Transform that also has a
// Policy() abi.TransformPolicy method declares that policy (fail-open or
// fail-closed, hold caps) to the host at load; one that also implements
// [Static] declares static verdicts per part kind.
//
// Open's error fails the stream (the plugin's fail policy applies) and
// counts as a failure of the plugin, except [ErrNoRoom].
type Transform interface {
	Open(info abi.StreamInfo) (Stream, error)
}

// ErrNoRoom is what Open returns (possibly wrapped) to refuse a stream for
// lack of room, such as a full fixed table of streams: the SDK answers
// retryhost_open with abi.OpenNoRoom, and the host fails only that stream
// (host.ErrNoCapacity, with the plugin's fail policy), keeps the instance
// and does not count the refusal against the plugin's breaker.
var ErrNoRoom = guest.ErrNoRoom

// Stream is one stream's state. The host pins a stream to one instance and
// calls it in stream order, one call at a time.
//
// Part judges the next part. The part, and every string in it, is valid
// only during the call (for text parts they point into the scratch
// buffer): copy what you keep. End resolves what is still held when the
// upstream ended cleanly (HOLD there means PASS). Close is called exactly
// once per opened stream: by the SDK itself right after the stream
// answers ERROR or DETACH (from Part or End) or fails (auto_close: the
// host need not call in again), else when the host closes the stream.
// After Close the SDK never calls the Stream again, so Close may recycle
// it (a free list of stream states is the cheapest Open). An error from
// Part or End is a failure of the plugin, not a verdict: the plugin's fail
// policy applies; to fail the attempt, answer abi.PartError with an error
// (an *abi.RefusalError for a refusal, an *abi.TransformError to carry a
// class and a code). The SDK encodes the verdict before Part or End
// returns to the host, so its error and its replacement parts may point
// into the stream's own state (an error value kept in the Stream costs no
// allocation; the refusal plugin does this).
//
// It is the SDK's own interface type (an alias), so that handing a Stream
// to the SDK costs no interface conversion.
type Stream = guest.Stream

// Static is implemented by a Transform that declares static verdicts: for
// each part kind in the map, the verdict its streams give every part of
// that kind without reading it and without changing any state (only
// abi.PartPass, PartHold, PartDrop and PartDetach; anything else rejects
// the load). Default (no Static method, or a nil map): none, every part
// reaches Stream.Part.
//
// Declaring them saves a call per such part: a v1.1 host answers them
// itself, and the SDK answers them without decoding the part or calling
// Stream.Part on a host that calls anyway. It is a promise: the host
// relies on it, so Stream.Part is then never called for those kinds.
// sdk.Load checks it in native tests (it calls Stream.Part for every part
// and fails the call if the verdict differs or the stream's state
// changed). Declare only what never depends on the stream's state: a
// detector that holds the preamble (stream start, response metadata,
// text start) and detaches on every non-text part is the typical case.
type Static interface {
	Static() map[abi.PartKind]abi.PartAction
}

// Register makes newTransform the plugin's transform. It is called once
// per instance, at load, with the operator's config; an error rejects the
// config and fails the load. Call Register from an init function: a wasip1
// c-shared module runs package initialisers but never main.
func Register(newTransform func(config []byte) (Transform, error)) {
	guest.NewTransform = func(config []byte) (guest.Transform, error) {
		t, err := newTransform(config)
		if err != nil || t == nil {
			return nil, err
		}
		return adapter{t}, nil
	}
}

// adapter turns a Transform into the guest's, keeping its Policy.
type adapter struct{ t Transform }

func (a adapter) Open(info abi.StreamInfo) (guest.Stream, error) {
	return a.t.Open(info)
}

func (a adapter) Static() map[abi.PartKind]abi.PartAction {
	if s, ok := a.t.(Static); ok {
		return s.Static()
	}
	return nil
}

func (a adapter) Policy() abi.TransformPolicy {
	if p, ok := a.t.(guest.Policer); ok {
		return p.Policy()
	}
	return abi.TransformPolicy{}
}
