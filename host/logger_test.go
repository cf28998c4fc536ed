package host

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// TestLogger_GuestLinesNameTheirStream: what a plugin writes reaches the
// logger with its name and the stream it went through (the log import,
// stdout, stderr), and the host's own records have no stream: a reader of
// the logs (retryhost replay) tells the guest's words from the host's.
func TestLogger_GuestLinesNameTheirStream(t *testing.T) {
	var logs logBuffer
	rt := newRuntime(t, WithLogger(logs.logger()), WithBreaker(0, time.Hour))
	p, err := rt.Load(context.Background(), "logtrap", fixture(t, "logtrap"))
	require.NoError(t, err)
	_, err = p.Decide(context.Background(), &abi.Attempt{})
	require.ErrorIs(t, err, ErrTrap)
	got := logs.String()
	require.Contains(t, got, `level=INFO msg="decided" plugin=logtrap stream=log truncated=false`+"\n")
	require.Contains(t, got, `level=INFO msg="decided\n" plugin=logtrap stream=stdout`+"\n")
	require.Contains(t, got, `level=INFO msg="decided\n" plugin=logtrap stream=stderr`+"\n")
	for line := range strings.Lines(got) {
		if strings.Contains(line, "plugin instance discarded") {
			require.NotContains(t, line, "stream=")
		}
	}
}
