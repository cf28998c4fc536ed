package scenario_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/cmd/internal/scenario"
)

// TestChaosInvariants drives the chaos provider over many seeds and checks
// what must hold whatever the failures: the caller gets a prefix of one
// attempt's text exactly once (never a duplicate or a mix of two models),
// the whole text when there is no error, nothing when no attempt committed,
// no upstream is left open and the preamble is seen once.
func TestChaosInvariants(t *testing.T) {
	const text = "alpha beta gamma delta epsilon"
	for seed := 1; seed <= 60; seed++ {
		doc := fmt.Sprintf(`{
		  "policy": {
		    "models": [{"name": "a", "provider": "scripted"}, {"name": "b", "provider": "scripted"}],
		    "rules": [{"when": {"status": [503]}, "action": "switch", "model": "b", "attempts": 3},
		              {"when": {"status": [503]}, "action": "switch", "model": "a", "attempts": 3}],
		    "max_attempts": 5
		  },
		  "scripts": {
		    "a": {"chaos": {"seed": %d, "text": %q, "chunks": 5, "fail_rate": 0.7}},
		    "b": {"chaos": {"seed": %d, "text": %q, "chunks": 5, "fail_rate": 0.7}}
		  },
		  "requests": [{}, {}, {}, {}]
		}`, seed, text, seed+1000, text)
		s, d, err := scenario.Parse([]byte(doc))
		require.NoError(t, err)
		res, err := s.Run(context.Background(), d, scenario.Options{})
		require.NoError(t, err)
		require.Empty(t, res.LoadError)
		for i, o := range res.Requests {
			at := fmt.Sprintf("seed %d request %d: %+v", seed, i+1, o)
			require.Empty(t, o.Violations, at)
			require.True(t, strings.HasPrefix(text, o.Text), at)
			require.NotEmpty(t, o.Attempts, at)
			require.LessOrEqual(t, len(o.Attempts), 5, at)
			switch {
			case o.Error == "":
				require.Equal(t, text, o.Text, at)
				require.NotEmpty(t, o.Committed, at)
			case o.Committed == "":
				require.Empty(t, o.Text, at, "nothing reaches the caller before commit")
			default:
				require.Equal(t, "network", o.Error, at, "only a cut can end a committed chaos stream")
			}
			if o.Committed != "" {
				last := o.Attempts[len(o.Attempts)-1]
				require.True(t, strings.HasPrefix(last, o.Committed+":"), at, "the committed model made the last attempt")
			}
		}
	}
}
