// Package e2e holds end-to-end tests: the retry driver over the real
// provider SDK clients (provider/openai, provider/anthropic), talking HTTP
// to loopback servers that replay the wire transcripts in testdata/wire.
// It has no code of its own.
package e2e
