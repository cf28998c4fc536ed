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

type skipKey struct{}

// SkipModels returns a copy of ctx that makes the request run with it pass
// over the models skip reports true for, as it passes over a model that
// cools down: a rule that would retry such a model or switch to it is
// skipped as if it did not match, and the next rule decides. It is for a
// caller that knows a model cannot serve this request (a gateway whose
// policy makes a model ineligible for a parameter it cannot honour). The
// start model is the caller's choice and is not skipped, nor is a group's
// deployment (the group chooses it). A nil skip changes nothing; skip is
// called from the request's goroutines and must be safe for that.
func SkipModels(ctx context.Context, skip func(Model) bool) context.Context {
	if skip == nil {
		return ctx
	}
	return context.WithValue(ctx, skipKey{}, skip)
}

// skipFrom returns the func SkipModels put in ctx, or nil.
func skipFrom(ctx context.Context) func(Model) bool {
	f, _ := ctx.Value(skipKey{}).(func(Model) bool)
	return f
}

type atEndKey struct{}

// CommitAtEnd returns a copy of ctx that makes a [RetryableModel.Stream]
// request run with it commit at the end of its stream instead of at its
// first content part: Stream returns once an attempt's stream has ended
// cleanly (and its transforms have had their last word), holding the whole
// answer, which it then replays. So every failure up to the end — a reset
// or an error after the first content, an upstream that ends without a
// finish, a transform's late verdict, the gap deadline (armed at the first
// content), the attempt deadline — fails the attempt and the rules decide,
// and the caller only ever gets one attempt's answer, never a failed
// attempt's partial text. The whole answer is judged by the rules as a
// result (as [RetryableModel.Generate] judges a response), so a rule on a
// finish reason may reject it. The first-content deadline still bounds the
// time to the first content part; OnCommit fires at the end.
//
// It is for a caller that shows nothing before the answer is complete, such
// as a gateway's non-streaming client, and that wants the stream's
// deadlines and parts rather than a Generate call. The answer is held in
// memory until the end: what bounds it is the request's MaxOutputTokens
// and the deadlines.
func CommitAtEnd(ctx context.Context) context.Context {
	return context.WithValue(ctx, atEndKey{}, true)
}

// CommitsAtEnd reports whether ctx was made by [CommitAtEnd] (or derives
// from one). A model's Stream may read it: nothing of such a stream
// reaches the caller before its end, so an adapter may ask its upstream
// for the whole answer at once instead of a stream (openai.WithUpstreamJSON)
// and replay it as the parts a stream would give.
func CommitsAtEnd(ctx context.Context) bool {
	v, _ := ctx.Value(atEndKey{}).(bool)
	return v
}
