// Package driver runs LLM calls with retry and model fail-over.
//
// A [Runner] holds a base model and an ordered list of conditions: native
// rules built with this package ([OnStatus], [OnClass], [Timeout],
// [OnFinish], [Fallback] …, combined with [And], [Or], [Not]) and Wasm
// condition plugins loaded by the host, which satisfy the same [Condition]
// interface. [Do] runs one request: it calls a function once per attempt
// with that attempt's model, number, deadline and request overrides, and
// after each failure asks the conditions, in order, what to do next.
//
// The semantics follow the TypeScript library ai-retry (per-model attempt
// budgets counting the first attempt, first matching rule with attempts
// left wins, Retry-After aware retries, sticky fallbacks) and fix its known
// defects: per-request state (concurrent requests never redirect each
// other), backoff that starts at the configured delay, a cap, jitter, a
// total attempt cap and an overall budget, the caller's cancellation as a
// hard stop, and a typed final error that works with errors.Is and
// errors.As. RATIONALE.md at the repository root explains the choices.
//
// Nothing in this package panics on bad configuration at request time:
// [New] reports every mistake.
package driver
