package scenario_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retryhost/retryhost/cmd/internal/scenario"
	"github.com/retryhost/retryhost/plugins"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestScenarios plays every scenario in testdata/scenarios through the
// replay engine: each one must match its expectation exactly.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("../../../testdata/scenarios/*.json")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 25, "the scenario corpus")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			s, res, err := scenario.RunFile(context.Background(), f, scenario.Options{Builtin: builtin})
			require.NoError(t, err)
			require.Empty(t, s.Diff(res), "scenario %s: want (-) vs got (+)", f)
		})
	}
}

// builtin resolves {"builtin": NAME} plugins to the embedded ones, as the
// replay command does.
func builtin(name string) ([]byte, bool) {
	p, ok := plugins.Lookup(name)
	return p.Wasm, ok
}

// TestWrongExpectationFailsWithDiff proves a scenario can fail: a
// deliberately wrong expectation yields a diff naming every difference.
func TestWrongExpectationFailsWithDiff(t *testing.T) {
	s, res, err := scenario.RunFile(context.Background(), "testdata/wrong-expectation.json", scenario.Options{})
	require.NoError(t, err)
	require.Equal(t, `request 1:
  attempts:
      primary: rate-limit
    - backup: ok
    + primary: ok
  committed:
    - "backup"
    + "primary"
  text:
    - "from backup"
    + "second try"
`, s.Diff(res))
}
