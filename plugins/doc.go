// Package plugins ships retryhost's built-in plugins, built to Wasm and
// embedded, so a program gets them with `go get` and no toolchain: load
// the bytes of [Refusal], [ErrMatch], [Finish] or [CStatus] with the host
// package, or name them in a policy file ([Module]). Each one's config is
// documented in plugins/README.md (and in [All]).
//
// The embedded builds are the freestanding C ones (plugins/c): a few KB
// each, they load cold in milliseconds and add well under 1 MB to a binary.
// The Go-SDK builds of the same plugins (plugins/refusal, plugins/errmatch,
// plugins/finish) are the reference for SDK authors; they take exactly the
// same configs and decide the same, which this package's differential tests
// check, but are not embedded.
//
// Every .wasm sits beside its source and is rebuilt byte for byte by
// `make -C plugins`; CI fails if a rebuild changes anything. The package
// imports nothing: it is bytes, names and docs.
//
// # Stability
//
// Stable: the names, the exported API and each plugin's config format
// follow semantic versioning (CHANGELOG.md); the bytes change with every
// rebuild of a plugin.
package plugins
