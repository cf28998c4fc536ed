// Package plugins ships retryhost's reference plugins, built to Wasm and
// embedded, so a program gets them with `go get` and no toolchain: load
// the bytes of [Refusal], [ErrMatch], [Finish], [CStatus] or [CRefusal]
// with the host package. Each one's config is documented in
// plugins/README.md (and in [All]).
//
// Every .wasm sits beside its source and is rebuilt byte for byte by
// `make -C plugins`; CI fails if a rebuild changes anything. The package
// imports neither host nor driver: it is bytes, names and docs.
//
// # Stability
//
// Stable: the names, the exported API and each plugin's config format
// follow semantic versioning (CHANGELOG.md); the bytes change with every
// rebuild of a plugin.
package plugins
