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

// TestCluster: three masters agree on the slots, and a key lives on the
// node that serves its slot (the others redirect with MOVED).
func TestCluster(t *testing.T) {
	c := StartCluster(t)
	moved := 0
	for _, n := range c.Nodes {
		if _, err := n.Query("SET", "{tag}k", "v"); err != nil {
			require.Contains(t, err.Error(), "MOVED")
			moved++
		}
	}
	require.Equal(t, 2, moved, "one node serves the slot of {tag}")
	require.Contains(t, c.URL(), "redis+cluster://127.0.0.1:")
}

// TestSentinelFailover: with the primary killed, the sentinels promote
// the replica, which then takes writes.
func TestSentinelFailover(t *testing.T) {
	s := StartSentinel(t)
	addr, err := s.PrimaryAddr()
	require.NoError(t, err)
	require.Equal(t, s.Primary.Addr(), addr)
	s.Primary.Kill()
	s.WaitPromoted(t)
	addr, err = s.PrimaryAddr()
	require.NoError(t, err)
	require.Equal(t, s.Replica.Addr(), addr)
	got, err := s.Replica.Query("SET", "k", "v")
	require.NoError(t, err)
	require.Equal(t, []string{"OK"}, got)
}
