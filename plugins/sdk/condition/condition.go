// Package condition registers a plugin's condition: import it from your
// plugin's main package and call [Register] in an init function. Importing
// it is what makes the module a condition: in Wasm it adds the
// retryhost_decide export.
//
// See package sdk for a complete plugin.
package condition

import (
	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/sdk/internal/guest"
)

// Decider is a condition's logic. Decide returns a zero Decision for "no
// opinion"; an error is a failure of the plugin (its fail policy applies),
// not a verdict. A Decider that also has a Policy() abi.TransformPolicy
// method declares that policy (only its Fail field applies to conditions).
//
// The Attempt, and every string in it, is valid only during the call (the
// SDK decodes it in place, without allocating): copy what you keep. The
// host calls one Decide at a time per instance, and runs several
// instances: keep no state between calls (ABI.md §2).
type Decider interface {
	Decide(a *abi.Attempt) (abi.Decision, error)
}

// Func adapts a plain function to a Decider.
type Func func(a *abi.Attempt) (abi.Decision, error)

// Decide calls f.
func (f Func) Decide(a *abi.Attempt) (abi.Decision, error) { return f(a) }

// Register makes newDecider the plugin's condition. It is called once per
// instance, at load, with the operator's config (raw bytes, the format is
// the plugin's); an error rejects the config and fails the load, with the
// error's message as the reason. Call Register from an init function:
// a wasip1 c-shared module runs package initialisers but never main.
func Register(newDecider func(config []byte) (Decider, error)) {
	guest.NewCondition = func(config []byte) (guest.Decider, error) {
		d, err := newDecider(config)
		if err != nil || d == nil {
			return nil, err
		}
		return d, nil
	}
}
