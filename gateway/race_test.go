//go:build race

package gateway

// raceEnabled: the race detector drops sync.Pool items at random, so a
// reader whose buffer goes back to its pool while it waits (sseline)
// allocates under it; the allocation tests of the one-byte reads skip then.
const raceEnabled = true
