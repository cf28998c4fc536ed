package plugins

import (
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the generated C headers (c/phrases.h, c/lower.h)")

// TestCPhrases keeps the C refusal plugin's default list equal to
// refusalcore's, so the C guest starts from the same phrases.
func TestCPhrases(t *testing.T) {
	want := cPhrasesHeader()
	if *update {
		require.NoError(t, os.WriteFile("c/phrases.h", []byte(want), 0o644))
	}
	got, err := os.ReadFile("c/phrases.h")
	require.NoError(t, err)
	require.Equal(t, want, string(got), "c/phrases.h is stale: go test ./plugins -run TestCPhrases -update && make -C plugins")
}
