// Package attempt lets a layer under a driver's model, such as the
// gateway's upstream transport, end the driver attempt its request belongs
// to: the driver answers for the attempt in the context a model's Stream
// gets, without a value of its own in the chain.
package attempt

import "context"

// Key is the context key the driver answers with the attempt.
type Key struct{}

// Ender is a running attempt.
type Ender interface {
	// End ends the attempt with cause, as one of its own deadlines would:
	// the upstream is closed, the attempt fails with cause and the rules
	// decide what follows (after commit, the stream ends with it). It
	// reports false, and does nothing, once the attempt is over. Safe for
	// concurrent use.
	End(cause error) bool
}

// Of returns the attempt ctx belongs to (ctx is, or derives from, the
// context a model's Stream got from the driver), or nil.
func Of(ctx context.Context) Ender {
	e, _ := ctx.Value(Key{}).(Ender)
	return e
}
