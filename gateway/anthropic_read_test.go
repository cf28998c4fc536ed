package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An Anthropic upstream's malformed events are skipped and counted too,
// now that its adapter reads the events itself (ReadEvent) and shows the
// body only those it cannot decode; the answer is intact.
func TestAnthropicMalformedEventsSkipped(t *testing.T) {
	r := newRigOf(t, "", []string{"primary"})
	r.up["primary"].play(act{malformed: 2, chunks: []string{"Par", "is"}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Paris", got.text)
	require.EqualValues(t, 4, r.gw.MalformedEvents())
	require.Empty(t, r.up["backup"].requests())
}
