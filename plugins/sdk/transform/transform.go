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
// fail-closed, hold caps) to the host at load.
type Transform interface {
	Open(info abi.StreamInfo) (Stream, error)
}

// Stream is one stream's state. The host pins a stream to one instance and
// calls it in stream order, one call at a time.
//
// Part judges the next part. The part, and every string in it, is valid
// only during the call (for text parts they point into the scratch
// buffer): copy what you keep. End resolves what is still held when the
// upstream ended cleanly (HOLD there means PASS). Close is called exactly
// once per opened stream. An error from Part or End is a failure of the
// plugin, not a verdict: the plugin's fail policy applies; to fail the
// attempt, answer abi.PartError with an error (an *abi.RefusalError for a
// refusal, an *abi.TransformError to carry a class and a code).
type Stream interface {
	Part(p *abi.Part) (abi.Verdict, error)
	End() (abi.Verdict, error)
	Close()
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
	s, err := a.t.Open(info)
	if err != nil || s == nil {
		return nil, err
	}
	return s, nil
}

func (a adapter) Policy() abi.TransformPolicy {
	if p, ok := a.t.(guest.Policer); ok {
		return p.Policy()
	}
	return abi.TransformPolicy{}
}
