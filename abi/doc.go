// Package abi is the contract between retryhost's driver, its Wasm host and
// plugins: the vocabulary of the LLM stream protocol ([Part]), what a
// condition sees and answers ([Attempt], [Decision]), what a transform sees
// and answers ([StreamTransform], [Verdict]), and (in ABI.md and the codec
// files) the versioned byte-level ABI that Wasm guests implement.
//
// The package depends on the standard library only and builds for
// GOOS=wasip1, so Go guests share the host's codec.
package abi
