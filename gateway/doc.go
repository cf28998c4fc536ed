// Package gateway serves a retryhost policy over HTTP as an OpenAI- and
// Anthropic-compatible fail-over gateway: any client whose base URL points at it gets the
// policy's retries, fail-overs, deadlines and transforms, with the commit
// gate on the wire.
//
//	gw, err := gateway.New(ctx, gateway.File("policy.json", policy.Options{Builtin: plugins.Module}),
//		gateway.WithAPIKeys(os.Getenv("RETRYHOST_API_KEY")))
//	if err != nil { return err }
//	defer gw.Close(ctx)
//	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: gw, MaxHeaderBytes: 64 << 10}
//
// # Endpoints
//
//	POST /v1/chat/completions   streaming (SSE) and not; "model" names a route (a model of the policy)
//	POST /v1/messages           Anthropic's Messages API, the same rules in Anthropic's format
//	POST /v1/responses          OpenAI's Responses API, the same rules, any model; a stateful one forwarded to the route's one OpenAI account
//	GET, DELETE /v1/responses/{id}, POST …/cancel, GET …/input_items  forwarded to the account that stores it
//	POST /v1/messages/count_tokens  forwarded to the route's Anthropic models, failing over between them
//	POST /v1/embeddings         forwarded to the route's OpenAI-compatible models, within one vector space
//	GET  /v1/models             the routes (owned_by: the provider; created: when the policy was loaded)
//	GET  /v1/models/{id}        one route, in the list's shape (404 for an unknown one)
//	GET  /metrics               Prometheus (WithMetrics adds the caller's collectors)
//	GET  /healthz               200 while the process serves
//	GET  /readyz                200 when a policy is loaded and the gateway is neither draining nor Unready
//
// # The commit gate on the wire
//
// Nothing — no status line, no header — is written to the client before
// the policy's stream driver commits on the first content part, so every
// failure before it (an HTTP error, a cut connection, a refusal, a slow
// first token, a malformed or truncated stream) fails over where the
// client cannot see it. After commit the answer is relayed as it arrives,
// one flush per event. A failure after commit ends the stream with an
// in-band event, data: {"error": {...}}, and no data: [DONE], so no client
// can take a truncated answer for a complete one.
//
// A non-streaming request ("stream": false) shows the client nothing
// before its whole answer, so it commits at the end (driver.CommitAtEnd):
// a failure after the upstream's first content fails over like one before
// it, the answer is one attempt's alone, and when every model failed the
// client gets an error answer, never partial text. What it holds until then
// is capped (WithMaxAnswerBytes).
//
// # Requests
//
// The fields the driver models (messages, tools, max tokens, temperature,
// top_p, stop, seed) drive every model; all the request's other fields
// (response_format, logprobs, tool_choice, vendor extensions …) and the
// original messages and tools are forwarded unchanged to OpenAI-compatible
// upstreams, as the request's own JSON. "stream" is the gateway's (it
// streams upstream, but for a non-streaming request to a model with
// "upstream_json": true in the policy, which is non-streamed upstream too).
// "stream_options" goes upstream only when the client sent it (asking for
// usage, which the gateway counts; the client gets usage when it asked for
// it), or to an upstream known to accept it (OpenAI's own API, Azure), as
// some compatible servers refuse it; "stream_options" without "stream":
// true is refused, as OpenAI refuses it. A "fallbacks" field, a list of route
// names, adds a per-request chain tried in order when the route fails for a
// reason other than the request itself (an upstream 4xx); it is never
// forwarded. n > 1 is refused (the driver follows one choice).
//
// # Anthropic's Messages API
//
// POST /v1/messages is a second front door over the same machinery:
// routing, fallbacks, the commit gate, limits, access logs, metrics, drain
// and reload behave as on /v1/chat/completions. Answers are Messages API
// events (message_start, content blocks by index with text_delta,
// thinking_delta and input_json_delta, message_delta with stop_reason and
// usage, message_stop) or one message object; a failure after commit ends
// the stream with event: error and no message_stop; errors are
// {"type":"error","error":{"type":…,"message":…}} with the statuses the
// chat door uses. Every field but model, stream and fallbacks, and the
// anthropic-beta header, go unchanged to Anthropic upstreams. A request
// whose route fails over to a model of the other API (either way) is
// answered in the client's format; that upstream gets the driver's fields
// and the translated tool choice, parallel tool use and end-user id.
//
// Every response names, in its "model" field, the route of the model that
// answered; the header X-Retryhost-Model says it too,
// X-Retryhost-Attempts how many attempts the answer took, and
// X-Retryhost-Upstream-Model the model id the upstream reported. A
// client's X-Request-Id (1-128 visible ASCII characters, else the answer's
// id) is echoed, logged and sent upstream.
//
// # Responses
//
// From an OpenAI-compatible upstream the answer carries back the fields
// the driver does not model: system_fingerprint, service_tier and each
// content delta's logprobs (see policy.Options.RawChunks); a refusal after
// content is a refusal delta. The policy's transforms never see the raw
// chunks these come from; a delta whose text a transform rewrote goes out
// with "logprobs": null. Under the "legacy" commit rule none is carried.
//
// # Defaults for the policy
//
// A policy with no backoff.delay retries after 1 s, doubling to 8 s, with
// equal jitter (a switch to another model does not wait); one with no
// cooldown and a rule that switches models cools a model down for 10 s
// after 5 consecutive counted failures (policy.Options.DefaultBackoff and
// DefaultCooldown, which the caller may set instead).
//
// A Gateway is safe for concurrent use.
//
// # Stability
//
// Experimental: the package is new; its options and the wire behaviour
// beyond the OpenAI-compatible surface may change in any release (each
// change is listed in CHANGELOG.md).
package gateway
