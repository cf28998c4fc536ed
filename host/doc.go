// Package host loads, verifies, sandboxes, pools and hot-swaps retryhost
// Wasm plugins (ABI v1, see the abi package's ABI.md) with wazero.
//
// A [Runtime] owns one wazero runtime and its sandbox settings. [Runtime.Load]
// compiles and verifies a plugin, runs its init with its config, and
// pre-warms a small pool of instances; the resulting [*Plugin] is a
// condition (it has Decide and FailPolicy, the method set of the driver's
// Condition) and/or a transform (it satisfies [abi.Transformer]). Neither
// this package nor its tests import the driver: the interfaces match by
// method set. A [Registry] names plugins and swaps new versions in
// atomically while streams in flight finish on the version they started
// with.
//
// Failure policy: a trap, timeout, exit or ABI violation discards the
// instance it happened in. The call that hit it, and every later call of a
// stream whose state lived in that instance, returns a [*PluginError]; the
// driver then applies the plugin's fail policy to those streams only. A
// plugin that keeps failing is disabled by a breaker ([ErrDisabled]) until a
// new version is loaded. Nothing panics out of this package.
package host
