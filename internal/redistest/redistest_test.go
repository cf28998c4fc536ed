package redistest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKillRestart: the server answers, keeps nothing across a kill and a
// restart on the same port, and refuses connections while it is down.
func TestKillRestart(t *testing.T) {
	s := Start(t)
	got, err := s.Do("SET", "k", "v")
	require.NoError(t, err)
	require.Equal(t, "+OK", got)
	got, err = s.Do("CONFIG", "GET", "save")
	require.NoError(t, err)
	require.Equal(t, "*2", got)

	s.Kill()
	_, err = s.Do("PING")
	require.Error(t, err, "a killed server must not answer")

	addr := s.Addr()
	s.Restart()
	require.Equal(t, addr, s.Addr())
	got, err = s.Do("EXISTS", "k")
	require.NoError(t, err)
	require.Equal(t, ":0", got, "no persistence: a restart starts empty")
}
