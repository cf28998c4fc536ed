// Package abi is the contract between retryhost's driver, its Wasm host and
// plugins: the vocabulary of the LLM stream protocol ([Part]), what a
// condition sees and answers ([Attempt], [Decision]), what a transform sees
// and answers ([StreamTransform], [Verdict]), and the versioned byte-level
// ABI that Wasm guests implement.
//
// The normative specification of ABI v1 is ABI.md in this directory: the
// import namespace [ModuleName], every export and import with its WAT
// signature, the byte layout of each record, the statuses, what is checked
// at load and what the host promises. The Append*/Decode* functions are the
// codec for those records, shared by the host and Go guests;
// testdata/abi/vectors.json at the repository root holds conformance
// vectors for the records, and testdata/abi/framing.json for what a host
// makes of a transform's verdicts on a stream's framing parts.
//
// The package depends on the standard library only and builds for
// GOOS=wasip1, so Go guests share the host's codec.
//
// # Stability
//
// Stable: the Go API follows semantic versioning (until v1.0.0 a breaking
// change happens only in a minor release, listed in CHANGELOG.md), and the
// Wasm ABI is versioned on its own: v1 only grows (minor versions add
// optional imports and exports a v1.0 guest never sees); a breaking ABI
// change is a new major namespace, loaded beside v1.
package abi
