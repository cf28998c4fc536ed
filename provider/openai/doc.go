// Package openai adapts the OpenAI Chat Completions API, and with
// WithResponsesAPI the Responses API, through the official SDK
// github.com/openai/openai-go/v3, to driver.Model. It serves
// OpenAI and every OpenAI-compatible server (vLLM, Ollama, Groq, LiteLLM…):
// point it elsewhere with WithBaseURL and name it with WithProvider.
//
//	m, err := openai.New("gpt-4o-mini", openai.WithAPIKey(key))
//
// # Retries are off
//
// The SDK retries 429s and 5xx twice by default. Here its retries are off
// (option.WithMaxRetries(0)): the retryhost driver owns retries and
// fail-over, and an SDK retrying underneath it would multiply attempts, sleep
// where the driver cannot see it and hide errors from conditions. To opt back
// in, use WithMaxRetries(n), or pass any SDK option with WithRequestOptions
// (applied last, so it wins).
//
// # Requests a gateway forwards
//
// A Chat Completions request whose messages (and tools) come as raw JSON in
// its ProviderOptions entry, which is what the retryhost gateway forwards,
// is written without the SDK's encoder and sent without its per-request
// pipeline: with the URL and the headers the SDK composes for the model,
// captured from the SDK once (the SDK's X-Stainless-* telemetry headers
// aside). The object, the headers, the errors and the redirect rule are the
// SDK path's. A model with WithRequestOptions, WithParam, SDK retries or the
// Responses API keeps the SDK's pipeline for every request.
//
// # Stream mapping
//
// Stream sends stream_options.include_usage to the servers known to accept
// it (see WithStreamUsage) and emits:
//
//	(first Recv)                      stream-start
//	first chunk                       response-metadata (id, model, created)
//	delta.content                     text-start (once, ID "text-0"), text-delta
//	delta.reasoning_content/reasoning reasoning-start (ID "reasoning-0"), reasoning-delta
//	                                  (the field compatible servers add; OpenAI itself sends none)
//	delta.tool_calls[i] first seen    tool-input-start (ID = call id, Tool.Name)
//	delta.tool_calls[i].arguments     tool-input-delta
//	finish_reason                     text-end / reasoning-end, then per call in index
//	                                  order tool-input-end and tool-call (Tool.Input = the JSON)
//	[DONE] after a finish_reason      finish (reason, usage from the usage chunk)
//	every chunk, with WithRawChunks   raw (Raw = the oai.ChatCompletionChunk), before
//	                                  the parts mapped from it
//	a chunk, with WithChunkFields     raw (Raw = a ChunkFields: system_fingerprint,
//	                                  service_tier, choice 0's logprobs), before them,
//	                                  unless it repeats the last (WithChunkFields)
//
// The chunks are decoded without the SDK's reflective decoder when they have
// the shape every compatible server sends (the fields read well-typed, no
// escaped or repeated keys); anything else is decoded by the SDK, by its
// own lenient rules, so the parts are the same either way (the two are
// fuzzed against each other). WithRawChunks needs the SDK's chunk type and
// decodes every chunk with the SDK.
//
// Only choice 0 is mapped: a request for n > 1 choices streams the others'
// deltas too, which this adapter ignores (read them from raw parts).
//
// Finish reasons: stop → ReasonStop, length → ReasonLength, content_filter →
// ReasonContentFilter, tool_calls → ReasonToolCalls, others → ReasonOther;
// Raw keeps the provider's word. Usage: prompt_tokens → InputTokens (cached
// tokens included), completion_tokens → OutputTokens, cached_tokens →
// CacheReadTokens, reasoning_tokens → ReasoningTokens.
//
// # Refusals
//
// OpenAI declares a refusal in the message's refusal field, which arrives
// before (and instead of) content. The adapter holds the refusal deltas and,
// at the finish_reason, fails the stream with a *driver.ProviderError of
// Class abi.ClassRefusal whose Message is the refusal text and which wraps an
// *abi.RefusalError. Nothing but stream-start and response-metadata has been
// emitted, so the driver can fail over cleanly, and one condition covers
// declared refusals and those a refusal transform detects in plain text. A
// refusal after content (unexpected) is delivered as text (block
// "refusal-0") and the finish reason becomes ReasonRefusal. Generate does the
// same: the error when the refusal is all there is, the text and
// ReasonRefusal otherwise. A refusal written as ordinary text ("I'm sorry, but
// I can't help with that.") is ordinary text here; detecting it is a
// transform's job.
//
// # Errors
//
// An HTTP error is returned by Stream (or Generate) as a *driver.ProviderError
// with Status, the response Header (Retry-After, retry-after-ms, x-ratelimit-*),
// the raw Body, the provider's error Type and Message, Retryable from
// driver.DefaultRetryable (overridden by an x-should-retry header; false for
// insufficient_quota) and Class: 429 → ClassRateLimit, 503/529 →
// ClassOverloaded, other 5xx → ClassServer, 401/403 → ClassAuth, other 4xx →
// ClassClient, with the error code winning over the status
// (context_length_exceeded → ClassContextLength, content_filter →
// ClassContentFilter). An error event inside the stream ({"error": {…}})
// ends it with a ProviderError of Status 0, classed by its type
// (server_error → ClassServer, Retryable). A connection cut, or a stream that
// ends before any finish_reason, is a ProviderError of Class ClassNetwork,
// Retryable, wrapping the transport error (or adapter's truncation error).
//
// The stream is bound to the context passed to Stream: when it is done, Recv
// returns its error (joined with its cause, if any) and the HTTP connection
// is closed. Close may be called at any time, also during a blocked Recv,
// which then returns net.ErrClosed.
//
// # Responses API
//
// With WithResponsesAPI the model calls POST /responses, where new OpenAI
// features ship first. The request maps as Instructions (Request.System),
// input items (messages; the assistant's function calls and the tool
// results by call_id), function tools with strict off, max_output_tokens
// and the sampling settings; seed and stop sequences do not exist there and
// come back as warnings on the stream-start part (Response.Warnings). The
// stream emits:
//
//	response.created                  response-metadata (id, model, created_at)
//	response.output_text.delta        text-start (once per message item, ID = item id), text-delta
//	response.reasoning_summary_text.delta,
//	response.reasoning_text.delta     reasoning-start (ID = reasoning item id), reasoning-delta
//	response.output_text.annotation.added
//	  (url_citation)                  source (URL, Title)
//	response.output_item.added
//	  (function_call)                 tool-input-start (ID = call_id, Tool.Name)
//	response.function_call_arguments.delta
//	                                  tool-input-delta
//	response.output_item.done         text-end / reasoning-end; for a function call
//	                                  tool-input-end and tool-call (Tool.Input = the item's arguments)
//	response.completed                finish: ReasonStop, or ReasonToolCalls after a function
//	                                  call (Raw "completed"), with usage
//	response.incomplete               finish: max_output_tokens → ReasonLength,
//	                                  content_filter → ReasonContentFilter (Raw = the reason)
//	response.failed                   a ProviderError classed by response.error.code
//	                                  (server_error → ClassServer, Retryable;
//	                                  rate_limit_exceeded → ClassRateLimit; invalid_* → ClassClient)
//	error                             a ProviderError classed by its code, as above
//	every event, with WithRawChunks   raw (Raw = the responses.ResponseStreamEventUnion)
//
// A refusal content part before any content fails the stream with a
// ClassRefusal error, as in Chat Completions; after content it arrives as
// text (block "refusal-0") and the finish reason becomes ReasonRefusal. An
// error event or failed response without a code is a retryable ClassServer
// fault. A stream that ends without response.completed, response.incomplete
// or response.failed is a ClassNetwork error. Generate maps a whole response
// the same way (a status "failed" is its error). The HTTP errors are those of
// Chat Completions. The adapter is stateless like Chat Completions: it sends
// the whole conversation each time and never previous_response_id; the
// API's own default for store applies (set {"store": false} in
// ProviderOptions to keep responses off OpenAI's servers).
//
// # Framing and headers
//
// The body of a stream is read as the SSE spec says, which the SDK alone
// does not: a leading UTF-8 byte-order mark is dropped and CR or CRLF line
// endings count as LF (rewritten in place as the body is read). A stream
// returned by Stream has a Header() http.Header method (driver.HeaderStream)
// with the HTTP response headers (x-request-id, x-ratelimit-*). A stream
// that would hold more than 4 MiB of tool input and held refusal, or 1,024
// open blocks and tool calls, fails with a ClassServer error of Type
// "adapter_limit_exceeded", not retryable.
//
// # Request mapping
//
// Request.System becomes a system message; tool results (RoleTool) become one
// tool message per result; MaxOutputTokens is sent as max_completion_tokens
// (max_tokens with WithLegacyMaxTokens). Request.ProviderOptions[provider],
// a map[string]any, is merged into the request body as is (for example
// {"reasoning_effort": "low"}).
//
// # Stability
//
// Stable: the exported API follows semantic versioning. Until v1.0.0 a
// breaking change happens only in a minor release and is listed in
// CHANGELOG.md; see the stability table in docs/architecture.md.
package openai
