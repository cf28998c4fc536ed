package driver

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStartOn(t *testing.T) {
	runFrom := func(r *Runner, start Model, failOn ...Model) []string {
		var got []string
		_, _ = Do(StartOn(context.Background(), start), r, func(_ context.Context, c *Call) (string, error) {
			got = append(got, c.Model.Key())
			for _, m := range failOn {
				if c.Model == m {
					return "", errors.New("down")
				}
			}
			return "ok", nil
		})
		return got
	}
	t.Run("the named model is the first attempt; the rules follow", func(t *testing.T) {
		r := mustNew(t, base, WithRules(AnyError().Switch(base)), WithModels(fb))
		require.Equal(t, []string{"test/fb", "test/base"}, runFrom(r, fb, fb))
		require.Equal(t, []string{"test/base"}, runFrom(r, nil), "a nil model changes nothing")
	})
	t.Run("neither takes nor sets a sticky fallback", func(t *testing.T) {
		r := mustNew(t, base, WithRules(AnyError().Switch(fb)), WithSticky(StickyRequests(5)))
		require.Equal(t, []string{"test/fb"}, runFrom(r, fb))
		require.Equal(t, []string{"test/base", "test/fb"}, run(t, r, base)) // sets sticky
		require.Equal(t, []string{"test/base"}, runFrom(r, base), "a named start ignores sticky")
		require.Equal(t, []string{"test/fb"}, run(t, r), "the sticky fallback is still there")

		r2 := mustNew(t, base, WithRules(AnyError().Switch(fb)), WithSticky(StickyRequests(5)))
		require.Equal(t, []string{"test/base", "test/fb"}, runFrom(r2, base, base))
		require.Equal(t, []string{"test/base"}, run(t, r2), "a named request's fail-over set no sticky")
	})
}

// SkipModels passes over the models it names on a fall-back, as a
// cooldown does: the next rule decides; the start model is still tried.
func TestSkipModels(t *testing.T) {
	r := mustNew(t, base, WithRules(AnyError().Switch(fb), AnyError().Switch(fb2)), WithModels(fb, fb2))
	runSkipping := func(skip func(Model) bool, failOn ...Model) ([]string, error) {
		var got []string
		_, err := Do(SkipModels(context.Background(), skip), r, func(_ context.Context, c *Call) (string, error) {
			got = append(got, c.Model.Key())
			for _, m := range failOn {
				if c.Model == m {
					return "", errors.New("down")
				}
			}
			return "ok", nil
		})
		return got, err
	}
	for _, tc := range []struct {
		name   string
		skip   func(Model) bool
		failOn []Model
		want   []string
		fails  bool
	}{
		{"nil skips nothing", nil, []Model{base}, []string{"test/base", "test/fb"}, false},
		{"a skipped fall-back is passed over", func(m Model) bool { return m == fb }, []Model{base}, []string{"test/base", "test/fb2"}, false},
		{"the start model is not skipped", func(m Model) bool { return m == base }, nil, []string{"test/base"}, false},
		{"every fall-back skipped: the request fails", func(m Model) bool { return m != base }, []Model{base}, []string{"test/base"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := runSkipping(tc.skip, tc.failOn...)
			require.Equal(t, tc.want, got)
			if tc.fails {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
		})
	}
}
