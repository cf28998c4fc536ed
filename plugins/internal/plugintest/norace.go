//go:build !race

package plugintest

// Race reports whether the race detector is on.
const Race = false
