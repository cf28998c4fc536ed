package driver

import (
	"context"

	"github.com/retryhost/retryhost/abi"
)

// Condition decides what happens after an attempt fails (or, for result
// conditions, after it returns a result a rule may reject). A native Go rule
// built with this package and a Wasm condition plugin loaded by the host
// both satisfy it.
//
// Decide returns a zero Decision for "no opinion". An error is a failure of
// the condition itself (a broken plugin), not a verdict; the driver logs it
// and treats it as no opinion, unless the condition is fail-closed, in which
// case the request fails with that error.
//
// Implementations must be safe for concurrent use.
type Condition interface {
	Decide(ctx context.Context, a *Attempt) (Decision, error)
}

// FailPolicyer is implemented by a Condition that declares what a failure of
// its own means. Without it, a condition fails open (its error counts as no
// opinion).
type FailPolicyer interface {
	FailPolicy() abi.FailPolicy
}
