// Package gemini adapts Google's Gemini API, through the official SDK
// google.golang.org/genai, to driver.Model: Google AI (the default; the
// key goes in the x-goog-api-key header) or, with WithVertex, Vertex AI.
//
//	m, err := gemini.New("gemini-2.5-flash", gemini.WithAPIKey(key))
//
// The SDK retries nothing by default, and this adapter asks for no
// retries: the retryhost driver owns retries and fail-over.
//
// # Request mapping
//
// Request.System (and system messages) becomes systemInstruction; user
// messages are role user, assistant messages role model, with tool calls
// as functionCall parts (args = the input object); tool results become
// functionResponse parts (role user) named after the call they answer,
// with an object result as the response and anything else under
// "output". Tools become functionDeclarations with their schema as
// parametersJsonSchema. MaxOutputTokens, Temperature, TopP, Seed and
// StopSequences go in generationConfig (maxOutputTokens, temperature,
// topP, seed, stopSequences; more than MaxStopSequences are not sent, with
// a Warning on stream-start). Request.ProviderOptions["gemini"], a
// map[string]any, is merged into the body's top level (for example
// {"safetySettings": […]} or {"generationConfig": {"thinkingConfig": …}});
// WithParam's fields win over it.
//
// # Stream mapping
//
// Stream calls streamGenerateContent with alt=sse and reads the first
// chunk before it returns (an HTTP error is its error). It emits:
//
//	(first Recv)                       stream-start
//	first chunk                        response-metadata (responseId, modelVersion)
//	text part                          text-start (once, ID "text-0"), text-delta
//	text part with thought: true       reasoning-start (ID "reasoning-0"), reasoning-delta
//	functionCall part                  tool-input-start, tool-input-delta (the args as JSON),
//	                                   tool-input-end, tool-call; ID = the call's id, or
//	                                   "gemini-call-N" when the API gives none
//	finishReason                       text-end / reasoning-end
//	end of the body after a finishReason
//	                                   finish (reason, usage)
//
// Finish reasons: STOP → ReasonStop (ReasonToolCalls after a function
// call), MAX_TOKENS → ReasonLength, SAFETY, RECITATION, BLOCKLIST,
// PROHIBITED_CONTENT, SPII and IMAGE_SAFETY after content →
// ReasonContentFilter, MALFORMED_FUNCTION_CALL → ReasonError, others →
// ReasonOther; Raw keeps the API's word. Usage: promptTokenCount (plus
// toolUsePromptTokenCount) → InputTokens, candidatesTokenCount +
// thoughtsTokenCount → OutputTokens, thoughtsTokenCount →
// ReasoningTokens, cachedContentTokenCount → CacheReadTokens.
//
// # Blocked answers
//
// A prompt blocked (promptFeedback.blockReason, no candidates) or a
// candidate that finishes with one of the content reasons above before
// any content fails the call with a *driver.ProviderError of Class
// abi.ClassRefusal that wraps an *abi.RefusalError, Type the reason in
// lower case ("safety", "recitation"): the same fail-over trigger as a
// declared refusal, so a policy's refusal rule moves the request to
// another model. Generate does the same.
//
// # Errors
//
// An HTTP error is a *driver.ProviderError with Status, the response
// Header and Body, Type the google.rpc status ("RESOURCE_EXHAUSTED") and
// Message. Class by status name, then HTTP status: RESOURCE_EXHAUSTED
// (429) → ClassRateLimit, UNAVAILABLE (503) → ClassOverloaded, INTERNAL,
// UNKNOWN, DEADLINE_EXCEEDED → ClassServer (these three classes are
// retryable), UNAUTHENTICATED, PERMISSION_DENIED → ClassAuth,
// INVALID_ARGUMENT about the token count → ClassContextLength, other
// INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND → ClassClient. A
// google.rpc.RetryInfo detail's retryDelay becomes the error's
// Retry-After header (whole seconds, rounded up) when the response has
// none, so the driver and a cooldown wait as the API asked. An error
// object in place of a chunk ends the stream with a ProviderError of
// Status 0 classed the same way. A cut connection, or a body that ends
// before a finishReason, is a retryable ClassNetwork error.
//
// The stream is bound to the context passed to Stream; Close may be
// called at any time, also during a blocked Recv, which then returns
// net.ErrClosed. The stream's Header() has the HTTP response headers.
//
// # Stability
//
// Experimental: the API may change in a minor release.
package gemini
