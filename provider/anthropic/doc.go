// Package anthropic adapts the Anthropic Messages API, through the official
// SDK github.com/anthropics/anthropic-sdk-go/v2, to driver.Model.
//
//	m, err := anthropic.New("claude-sonnet-4-5", anthropic.WithAPIKey(key))
//
// # Retries are off
//
// The SDK retries 408, 409, 429, 5xx and 529 by default. Here its retries
// are off (option.WithMaxRetries(0)): the retryhost driver owns retries and
// fail-over, and an SDK retrying underneath it would multiply attempts,
// sleep where the driver cannot see it and hide overloads from conditions.
// To opt back in, use WithMaxRetries(n), or pass any SDK option with
// WithRequestOptions (applied last, so it wins).
//
// # Stream mapping
//
//	(first Recv)                         stream-start (Warnings: unsupported settings)
//	message_start                        response-metadata (message id, model)
//	content_block_start text             text-start (ID = block index), text-delta if any
//	content_block_start thinking         reasoning-start (redacted_thinking too)
//	content_block_start tool_use         tool-input-start (ID = tool_use id, Tool.Name;
//	                                     server_tool_use sets Tool.ProviderExecuted)
//	text_delta / thinking_delta          text-delta / reasoning-delta
//	input_json_delta                     tool-input-delta
//	citations_delta                      source (web page: URL and title; search
//	                                     result; request document: its title)
//	content_block_stop                   text-end / reasoning-end / tool-input-end + tool-call
//	content_block_start *_tool_result    tool-result (ID = tool_use_id, Tool.Result = the
//	                                     result's JSON, ProviderExecuted, IsError for an
//	                                     *_error result), then for web_search a source
//	                                     per page found
//	message_delta                        (stop_reason, usage: kept for the finish)
//	message_stop                         finish
//	ping, signature_delta                nothing
//	every event, with WithRawChunks      raw (Raw = the ant.MessageStreamEventUnion),
//	                                     before the parts mapped from it
//	… with WithUnmappedEvents            the same, but for the text_delta, thinking_delta
//	                                     and input_json_delta of their own blocks
//	                                     (what retryhost serve's /v1/messages relays
//	                                     from: signatures, citations, redacted_thinking,
//	                                     blocks newer than this adapter, which map to
//	                                     nothing or to less than they carry)
//
// Generate maps the same content: server tool calls and results, and each
// text block's citations as source parts after its text.
//
// Stop reasons: end_turn and stop_sequence → ReasonStop, max_tokens and
// model_context_window_exceeded → ReasonLength, tool_use → ReasonToolCalls,
// refusal → ReasonRefusal, others (pause_turn) → ReasonOther; Raw keeps the
// provider's word. Usage: InputTokens is the whole prompt (input_tokens plus
// cache reads and writes, which Anthropic counts apart), CacheReadTokens and
// CacheWriteTokens the cache parts, ReasoningTokens the thinking tokens.
//
// # Refusals
//
// A stop_reason "refusal" before any content (an empty text or thinking
// block is not content) fails the stream (or Generate) with a *driver.ProviderError of Class abi.ClassRefusal, whose
// Message is stop_details.explanation and which wraps an *abi.RefusalError:
// only stream-start and response-metadata have gone out, so the driver can
// fail over cleanly. After content it is the finish reason ReasonRefusal. A
// refusal written as ordinary text is ordinary text here; detecting it is a
// transform's job.
//
// # Errors
//
// An HTTP error is returned by Stream (or Generate) as a *driver.ProviderError
// with Status, the response Header (retry-after, anthropic-ratelimit-*), the
// raw Body, the error Type (overloaded_error, rate_limit_error…) and Message,
// Retryable from driver.DefaultRetryable (overridden by x-should-retry) and
// Class: 429 → ClassRateLimit, 529 and 503 → ClassOverloaded, other 5xx →
// ClassServer, 401/403 → ClassAuth, "prompt is too long" →
// ClassContextLength, other 4xx → ClassClient. An error event inside the
// stream (event: error, such as overloaded_error after the 200 status) ends
// it with a ProviderError of Status 0, classed by its type (overloaded_error
// → ClassOverloaded, api_error → ClassServer, both Retryable); one that
// names no error type (event: error with no data, or data that is not JSON)
// is a Retryable ClassServer fault, never an unclassified one. A connection
// cut, or a stream that ends before message_stop, is a ProviderError of
// Class ClassNetwork, Retryable. A stream that would hold more than 4 MiB of
// tool input or 1,024 open blocks fails with a ClassServer error of Type
// "adapter_limit_exceeded", not retryable.
//
// The body of a stream is read as the SSE spec says, which the SDK alone
// does not: a leading UTF-8 byte-order mark is dropped and CR or CRLF line
// endings count as LF. A stream returned by Stream has a Header()
// http.Header method (driver.HeaderStream) with the HTTP response headers,
// such as request-id.
//
// The stream is bound to the context passed to Stream: when it is done, Recv
// returns its error (joined with its cause, if any) and the HTTP connection
// is closed. Close may be called at any time, also during a blocked Recv,
// which then returns net.ErrClosed.
//
// # Request mapping
//
// Request.System (and RoleSystem messages) become system blocks; tool
// results (RoleTool) become a user message of tool_result blocks, one
// message for consecutive RoleTool messages (parallel calls' results);
// MaxOutputTokens is max_tokens (DefaultMaxTokens when zero: the API
// requires it). Temperature above 1 (OpenAI's and Gemini's range goes to
// 2) is sent as 1 (MaxTemperature), and seed is not supported: each yields
// a Warning on stream-start and in Response.Warnings. Request.ProviderOptions["anthropic"], a
// map[string]any, is merged into the request body as is (for example
// {"thinking": {"type": "enabled", "budget_tokens": 1024}}).
//
// # Stability
//
// Stable: the exported API follows semantic versioning. Until v1.0.0 a
// breaking change happens only in a minor release and is listed in
// CHANGELOG.md; see the stability table in docs/architecture.md.
package anthropic
