package redis

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLateFailureAfterRecoveryIsNoNewOutage: an outage's retry that fails
// after another operation found Redis back (it started before the
// recovery) is an error, not a second outage; a failure of an operation
// that started after the recovery is a new one.
func TestLateFailureAfterRecoveryIsNoNewOutage(t *testing.T) {
	ctx := context.Background()
	s, err := newState(nil, Options{})
	require.NoError(t, err)
	boom := errors.New("connection reset")

	e0, ok := s.tryStore()
	require.True(t, ok)
	require.False(t, s.done(ctx, e0, boom)) // Redis goes away
	require.True(t, s.Stats().Down)

	late, _ := s.tryStore()               // an outage's retry, still on its way
	require.True(t, s.done(ctx, e0, nil)) // another finds Redis back
	require.False(t, s.Stats().Down)
	require.False(t, s.done(ctx, late, boom), "the late retry's answer does not stand")
	st := s.Stats()
	require.False(t, st.Down, "the late retry fails: not a new outage")
	require.EqualValues(t, 1, st.Outages)
	require.EqualValues(t, 2, st.Errors)

	e1, _ := s.tryStore()
	require.False(t, s.done(ctx, e1, boom))
	require.True(t, s.Stats().Down, "a failure after the recovery is a new outage")
	require.EqualValues(t, 2, s.Stats().Outages)
}
