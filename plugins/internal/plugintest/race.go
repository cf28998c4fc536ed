//go:build race

package plugintest

// Race reports whether the race detector is on: Go guests then take about
// a second each to instantiate, so tests sample their wasm-side tables.
const Race = true
