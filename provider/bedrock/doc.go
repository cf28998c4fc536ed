// Package bedrock adapts Amazon Bedrock's Converse API, through the
// official SDK github.com/aws/aws-sdk-go-v2/service/bedrockruntime, to
// driver.Model: Converse for Generate, ConverseStream (an AWS event
// stream) for Stream.
//
//	m, err := bedrock.New("us.anthropic.claude-sonnet-4-20250514-v1:0", bedrock.WithRegion("us-east-1"))
//
// Calls are signed with SigV4 by the SDK, with the credentials of the AWS
// default chain (environment, shared profile, web identity, container and
// instance roles) unless WithCredentials gives others; WithAPIKey uses an
// Amazon Bedrock API key (a bearer token) instead. The region is
// WithRegion's, else the AWS configuration's (AWS_REGION, the profile's);
// New fails with ErrNoRegion without one. The SDK retries nothing: the
// retryhost driver owns retries and fail-over.
//
// # Request mapping
//
// Request.System (and system messages) becomes system text blocks; user
// messages are role user, assistant messages role assistant, with tool
// calls as toolUse blocks (input = the input object); tool results become
// toolResult blocks in a user turn (a JSON object as json content,
// anything else as text), merged with the turn next to them, since
// Converse wants the roles to alternate. Tools become toolSpec entries
// with their schema as inputSchema.json. MaxOutputTokens, Temperature,
// TopP and StopSequences go in inferenceConfig (maxTokens, temperature,
// topP, stopSequences); Seed has no Converse field and is not sent. A
// Temperature above 1 (MaxTemperature, the most Converse's models take)
// is sent as 1, and more than 2500 stop sequences (MaxStopSequences) as
// none, each with a Warning on stream-start and in Response.Warnings.
// Request.ProviderOptions["bedrock"], a map[string]any, is merged into
// additionalModelRequestFields (the model's own parameters, such as
// {"top_k": 40} or Claude's {"thinking": {…}}); WithParam's fields win
// over it. The entry may be an Options instead: its Fields are merged the
// same way, its ToolChoice becomes toolConfig.toolChoice, its JSONSchema
// outputConfig.textFormat, and on a Claude model (Model.Claude) its
// ThinkingBudget and TopK become additionalModelRequestFields' thinking
// and top_k (another model is sent neither, with a Warning). A model id
// of "*" sends Request.ModelID.
//
// # Stream mapping
//
// Stream reads the HTTP response before it returns (an HTTP error is its
// error). It emits:
//
//	(first Recv)                            stream-start
//	contentBlockDelta text                  text-start (once per block, ID "text-N"), text-delta
//	contentBlockDelta reasoningContent text reasoning-start (ID "reasoning-N"), reasoning-delta
//	contentBlockStart toolUse               tool-input-start (ID = toolUseId)
//	contentBlockDelta toolUse               tool-input-delta
//	contentBlockStop                        text-end, reasoning-end, or tool-input-end and tool-call
//	messageStop                             (the stop reason, kept)
//	metadata, then the end of the stream    finish (reason, usage)
//
// N is the content block's index. Stop reasons: end_turn and
// stop_sequence → ReasonStop, tool_use → ReasonToolCalls, max_tokens and
// model_context_window_exceeded → ReasonLength, guardrail_intervened and
// content_filtered → ReasonContentFilter, malformed_model_output and
// malformed_tool_use → ReasonError, others → ReasonOther; Raw keeps the
// API's word. Usage: inputTokens + cacheReadInputTokens +
// cacheWriteInputTokens → InputTokens, outputTokens → OutputTokens, the
// cache counts → CacheReadTokens and CacheWriteTokens.
//
// # Blocked answers
//
// A stream whose stop reason is guardrail_intervened or content_filtered
// before any content of the model's fails with a *driver.ProviderError of
// Class abi.ClassRefusal that wraps an *abi.RefusalError, Type the stop
// reason: the same fail-over trigger as a declared refusal, so a policy's
// refusal rule moves the request to another model. After content it is a
// content-filter finish: Bedrock writes a guardrail's blocked message as
// the answer's text, so a streamed one reaches the caller. Generate, which
// has the whole answer before it returns, fails as a refusal on either
// stop reason whatever the text.
//
// # Errors
//
// An HTTP error is a *driver.ProviderError with Status, the response
// Header (a Retry-After there, as a proxy in front may add, is honoured
// by the driver; Bedrock's own throttling answers carry none, so the
// driver's backoff decides) and Body, Type the exception's name ("ThrottlingException")
// and Message. Class by name, then HTTP status: ThrottlingException and
// ServiceQuotaExceededException → ClassRateLimit; ServiceUnavailableException
// and ModelNotReadyException → ClassOverloaded; InternalServerException,
// ModelStreamErrorException, ModelTimeoutException and ModelErrorException
// → ClassServer (these three classes are retryable); AccessDeniedException,
// UnrecognizedClientException, InvalidSignatureException and
// ExpiredTokenException → ClassAuth; a ValidationException about the
// prompt's length → ClassContextLength, other ValidationException,
// ResourceNotFoundException and ConflictException → ClassClient. An
// exception event inside the stream ends it with a ProviderError of
// Status 0 classed the same way. A cut connection, or a stream that ends
// before messageStop, is a retryable ClassNetwork error; a stream that
// breaks Converse's rules (tool input for a block that is no tool call, a
// call whose input is not JSON) a retryable ClassServer one.
//
// The stream is bound to the context passed to Stream; Close may be
// called at any time, also during a blocked Recv, which then returns
// net.ErrClosed. The stream's Header() has the HTTP response headers. The
// SDK decodes the event stream on goroutines of its own, which end when
// the stream ends or is closed.
//
// # Stability
//
// Experimental: the API may change in a minor release.
package bedrock
