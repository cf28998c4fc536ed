//go:build race

package host

// raceEnabled: the race detector slows wazero's optimizing compiler ~20×
// (33 s for a 2 MB Go guest), so race runs compile Go guests with the
// interpreter only.
const raceEnabled = true
