package driver

import "context"

type startKey struct{}

// StartOn returns a copy of ctx that makes the request run with it start on
// m instead of the Runner's base model (or its sticky fallback): the
// request names its own first model, as a gateway's client does when it
// asks for a model by name. Everything else is the Runner's: its rules
// decide what follows a failure on m, and a cooldown of m still moves the
// start to the next model in the Runner's order. m need not be one of the
// Runner's models (but then its cooldown is not read: a request reads
// those of the Runner's models); a nil m changes nothing.
//
// A request that names its start model neither takes a sticky fallback
// (the caller chose) nor sets one: its fail-overs redirect no other request.
func StartOn(ctx context.Context, m Model) context.Context {
	if m == nil {
		return ctx
	}
	return context.WithValue(ctx, startKey{}, m)
}

// startFrom returns the model StartOn put in ctx, or nil.
func startFrom(ctx context.Context) Model {
	m, _ := ctx.Value(startKey{}).(Model)
	return m
}
