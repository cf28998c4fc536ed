package driver

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/internal/attempt"
)

// errHeaders is a transport's own timeout, as the gateway's upstream
// client has for response headers.
type errHeaders struct{}

func (errHeaders) Error() string   { return "timeout awaiting response headers" }
func (errHeaders) Timeout() bool   { return true }
func (errHeaders) Temporary() bool { return true }

// endsAtOpen is a model whose transport ends its attempt (attempt.Ender) while
// the request waits, then fails as a canceled request does.
type endsAtOpen struct {
	ended chan bool
}

func (m *endsAtOpen) Key() string { return "p/ends" }
func (m *endsAtOpen) Generate(context.Context, *Request) (*Response, error) {
	return nil, fmt.Errorf("not used")
}
func (m *endsAtOpen) Stream(ctx context.Context, _ *Request) (Stream, error) {
	// A layer under the model derives its own contexts and values.
	inner, cancel := context.WithCancel(context.WithValue(ctx, struct{ k int }{1}, "v"))
	defer cancel()
	a := attempt.Of(inner)
	m.ended <- a != nil && a.End(errHeaders{})
	<-inner.Done()
	return nil, fmt.Errorf("post: %w", inner.Err())
}

// Ending an attempt (attempt.Ender) fails it with its cause, which the rules see (here a
// timeout, so the fallback answers), and is a no-op outside an attempt and
// once the attempt is over.
func TestAttemptEnd(t *testing.T) {
	require.Nil(t, attempt.Of(context.Background()), "not an attempt's context")

	a := &endsAtOpen{ended: make(chan bool, 1)}
	b := &scriptModel{key: "p/b", clock: newManualClock(), scripts: [][]sstep{answer("from b")}}
	var got Outcome
	r, err := New(a, WithRules(Timeout().Switch(b)), WithOnSuccess(func(_ context.Context, o Outcome) { got = o }))
	require.NoError(t, err)
	rm, err := NewRetryableModel(r)
	require.NoError(t, err)
	s, err := rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	require.True(t, <-a.ended, "the model's context belongs to the attempt")
	parts, err := drain(s)
	require.NoError(t, err)
	require.Contains(t, kinds(parts), "text-delta:from b")
	require.Len(t, got.Attempts, 2)
	require.Equal(t, abi.ClassTimeout, got.Attempts[0].Class)
	require.ErrorIs(t, got.Attempts[0].Err, errHeaders{}, "the attempt failed with the cause it was ended with")

	// The ended attempt's context is over: a later call does nothing.
	b.mu.Lock()
	ctx := b.streams[0].ctx
	b.mu.Unlock()
	require.NoError(t, s.Close())
	require.Error(t, ctx.Err())
	require.False(t, attempt.Of(ctx).End(errHeaders{}), "the attempt is over")
}

// endsWithItsOwnError is endsAtOpen whose transport returns the cause it
// ended the attempt with, which the model wraps as its own failure.
type endsWithItsOwnError struct{ endsAtOpen }

func (m *endsWithItsOwnError) Stream(ctx context.Context, _ *Request) (Stream, error) {
	a := attempt.Of(ctx)
	m.ended <- a != nil && a.End(errHeaders{})
	<-ctx.Done()
	if attempt.Cause(ctx) != (errHeaders{}) {
		return nil, fmt.Errorf("cause: %v", attempt.Cause(ctx))
	}
	return nil, &ProviderError{Provider: "p", Message: "stream interrupted: post: " + errHeaders{}.Error(), Class: abi.ClassNetwork, Retryable: true, Err: errHeaders{}}
}

// A model's error that carries the cause its attempt was ended with is
// the attempt's error, as the layer's own failure (here a cut connection,
// class network, which the rule switches on), not the bare cause.
func TestAttemptEndKeepsTheModelsError(t *testing.T) {
	a := &endsWithItsOwnError{endsAtOpen{ended: make(chan bool, 1)}}
	b := &scriptModel{key: "p/b", clock: newManualClock(), scripts: [][]sstep{answer("from b")}}
	var got Outcome
	r, err := New(a, WithRules(OnClass(abi.ClassNetwork).Switch(b)), WithOnSuccess(func(_ context.Context, o Outcome) { got = o }))
	require.NoError(t, err)
	rm, err := NewRetryableModel(r)
	require.NoError(t, err)
	s, err := rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	require.True(t, <-a.ended)
	parts, err := drain(s)
	require.NoError(t, err)
	require.Contains(t, kinds(parts), "text-delta:from b")
	require.Len(t, got.Attempts, 2)
	require.Equal(t, abi.ClassNetwork, got.Attempts[0].Class)
	require.ErrorIs(t, got.Attempts[0].Err, errHeaders{})
	require.Contains(t, got.Attempts[0].Err.Error(), "stream interrupted: post: ")
}
