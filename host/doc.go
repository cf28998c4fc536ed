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
// Fewer calls (ABI v1.1, all optional for the guest): a transform's policy
// may carry hints ([Plugin.Hints]). Parts of a kind with a static verdict
// are answered by the host with no call, exactly as the guest would have
// answered them. A stream is opened in the guest lazily, at its first call
// (with retryhost_open_part, open and first part are one call), so a stream
// closed before it needed the guest is never opened nor closed there, and a
// failure of the guest's open surfaces from that first Part or End, where
// the plugin's fail policy applies as before. With auto_close, no
// retryhost_close follows a guest's ERROR or DETACH. Parts of streams that
// wait for the same instance are judged in one retryhost_parts call when
// the guest exports it; a stream alone on its instance makes a plain call.
// A v1.0 guest gets every call, as before.
//
// Failure policy: a trap, timeout, exit or ABI violation discards the
// instance it happened in. The call that hit it, and every later call of a
// stream whose state lived in that instance, returns a [*PluginError]; the
// driver then applies the plugin's fail policy to those streams only. A
// plugin that keeps failing is disabled by a breaker ([ErrDisabled]) for a
// cooldown, after which one probe may re-enable it ([WithBreaker]). A REPLACE
// over the host's caps fails only its stream ([ErrLimit]); a refusal for
// lack of room fails only its stream and is not a failure
// ([ErrNoCapacity]). Whatever a transform answers, the stream's framing
// parts (stream-start, metadata, finish) are kept (ABI.md §6.4). Nothing
// panics out of this package.
//
// # Stability
//
// Stable: the exported API follows semantic versioning. Until v1.0.0 a
// breaking change happens only in a minor release and is listed in
// CHANGELOG.md; see the stability table in docs/architecture.md.
package host
