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
// errors.As. docs/decisions.md explains the choices.
//
// # Choosing the next attempt
//
// After a failed attempt the conditions are asked in order. The first that
// names a model with attempts left in this request wins; attempts are
// counted per model key and include the first, so Fallback(m) tries m once
// and Retry() tries the same model twice in all. A match whose model is
// exhausted falls through to the next condition; a give-up stops at once.
// When nothing matches, the request fails. [WithMaxAttempts] (default 10)
// and [WithBudget] bound every request whatever the conditions say.
//
// # Callbacks
//
// All callbacks run synchronously on the request's goroutine, in this
// order for each failed attempt: OnError (every failed attempt, before the
// conditions), then the conditions, then the backoff wait, then OnRetry
// (which may return overrides for the next attempt), then the attempt.
// Exactly one of OnSuccess and OnFailure ends every request (none when
// [WithDisabled] is in force), with every attempt and, for a failure, the
// error the caller receives.
//
// # Shared state
//
// What requests share beyond one request (the models' cooldowns and their
// probes, a Retry-After's scope, the sticky fallback, the retry budget's
// counters) lives in a [State]: each Runner's own in memory by default,
// or one given with [WithState] to several Runners, or to replicas through
// a store. A request makes one call to it when it starts and keeps what it
// read; failures, retries and probes cost one call each.
//
// # The common case
//
// A request is usually one message ([UserText]); a stream is read in a
// range loop ([Parts], which closes it) or assembled into a [Response]
// ([Collect]). The part kinds, error classes, finish reasons and deadlines
// are constants of this package (KindTextDelta, ClassRateLimit …), so a
// caller needs package abi only to write plugins. A model's [Model.Key] is
// its identity here (rules, budgets, stickiness, cooldown); its provider
// and model id are attributes ([Describe]).
//
// Nothing in this package panics on bad configuration at request time:
// [New] reports every mistake, including a [Match] built from values a
// policy file would reject (OnStatus(4290), an empty list).
//
// # Stability
//
// Stable: the exported API follows semantic versioning. Until v1.0.0 a
// breaking change happens only in a minor release and is listed in
// CHANGELOG.md; see the stability table in docs/architecture.md.
package driver
