package driver

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// Users of failsafe-go expect errors.As on the final
// error to find what finally failed (its LastError), not the first attempt.
func TestRetryError_NewestAttemptWinsErrorsAs(t *testing.T) {
	fn, _ := script(status(503), status(502), status(500))
	r := mustNew(t, base, WithRules(OnStatusRange(500, 599).Switch(fb), OnStatusRange(500, 599).Switch(fb2)))
	_, err := Do(context.Background(), r, fn)
	var re *RetryError
	require.ErrorAs(t, err, &re)
	require.Len(t, re.Attempts, 3)
	require.Equal(t, []string{"test/base", "test/fb", "test/fb2"},
		[]string{re.Attempts[0].Model.Key(), re.Attempts[1].Model.Key(), re.Attempts[2].Model.Key()},
		"Attempts stay oldest first")
	var pe *ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 500, pe.Status, "the newest attempt's error wins errors.As")
	require.Same(t, re.Last(), error(pe))

	// errors.Is too: a sentinel in the newest attempt is found before an
	// equal-looking older one, and an older attempt's is still reachable.
	older, newer := errors.New("older"), errors.New("newer")
	fn, _ = script(older, newer)
	_, err = Do(context.Background(), mustNew(t, base, WithRules(AnyError().Switch(fb))), fn)
	require.ErrorIs(t, err, newer)
	require.ErrorIs(t, err, older)
	require.ErrorAs(t, err, &re)
	require.Equal(t, []error{newer, older}, re.Unwrap(), "newest first, then older; no Cause")
}

// A caller that cancels with a cause after several
// attempts must find both context.Canceled and its cause with errors.Is.
func TestDo_CancelWithCauseAfterAttempts(t *testing.T) {
	why := errors.New("the user went away")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	n := 0
	r := mustNew(t, base, WithRules(AnyError().Retry().Attempts(5)))
	_, err := Do(ctx, r, func(ctx context.Context, c *Call) (string, error) {
		n++
		if n == 3 {
			cancel(why)
			return "", ctx.Err()
		}
		return "", errN(n)
	})
	require.Equal(t, 3, n)
	var re *RetryError
	require.ErrorAs(t, err, &re, "three attempts: a RetryError")
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, why)
	require.ErrorIs(t, re.Cause, context.Canceled)
	require.ErrorIs(t, re.Cause, why)
	require.Equal(t, "context canceled: the user went away", re.Cause.Error())

	// Canceled during the backoff wait (advance's path).
	ctx2, cancel2 := context.WithCancelCause(context.Background())
	defer cancel2(nil)
	clk := newClock()
	clk.sleepErr = nil
	r = mustNew(t, base, clk.option(), WithRules(AnyError().Retry().Attempts(5).Delay(1)),
		WithOnRetry(func(context.Context, RetryInfo) *Overrides { cancel2(why); return nil }))
	fn, _ := script(errN(1), errN(2))
	_, err = Do(ctx2, r, fn)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, why)

	// Without a cause nothing changes: the cause is context.Canceled itself.
	ctx3, cancel3 := context.WithCancel(context.Background())
	n = 0
	_, err = Do(ctx3, mustNew(t, base, WithRules(AnyError().Retry().Attempts(5))), func(ctx context.Context, c *Call) (string, error) {
		n++
		if n == 2 {
			cancel3()
			return "", ctx.Err()
		}
		return "", errN(n)
	})
	require.ErrorAs(t, err, &re)
	require.Same(t, context.Canceled, re.Cause)
}
