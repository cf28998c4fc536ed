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
	//
	// A model whose call fails with an error that carries cause (the
	// layer returned it, errors.Is) fails the attempt with that error,
	// not with its context's: the failure is the layer's, as it would be
	// had the layer ended the request with a context of its own (see
	// Cause).
	End(cause error) bool
	// Ended returns the cause End ended the attempt with, nil when End
	// did not end it.
	Ended() error
}

// Of returns the attempt ctx belongs to (ctx is, or derives from, the
// context a model's Stream got from the driver), or nil.
func Of(ctx context.Context) Ender {
	e, _ := ctx.Value(Key{}).(Ender)
	return e
}

// Cause returns the cause End ended ctx's attempt with, nil when ctx
// belongs to no attempt or End did not end it. A model whose call failed
// under such a context maps the failure as the layer's that ended it (a
// transport's timeout is a cut connection of the upstream), not as its
// context's end; an SDK that reports its context's end in place of the
// layer's error has the cause in its place.
func Cause(ctx context.Context) error {
	if a := Of(ctx); a != nil {
		return a.Ended()
	}
	return nil
}
