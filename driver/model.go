package driver

import (
	"context"
	"net/http"

	"github.com/retryhost/retryhost/abi"
)

// The stream vocabulary, re-exported from package abi so that users of the
// driver need one import.
type (
	Part         = abi.Part
	PartKind     = abi.PartKind
	Finish       = abi.Finish
	FinishReason = abi.FinishReason
	Usage        = abi.Usage
	Attempt      = abi.Attempt
	Decision     = abi.Decision
	RefusalError = abi.RefusalError
)

// Model is an LLM the driver can call: a provider adapter, a fake in a test,
// or a retryable model built by this package (which is itself a Model).
//
// Implementations must be safe for concurrent use.
type Model interface {
	// Key is the model's identity: attempt budgets, rules, condition
	// decisions, stickiness, cooldown and telemetry refer to models by
	// key, so it must be stable and unique among a Runner's models. The
	// adapters default it to "provider/model-id" and let the user choose
	// it (WithKey; a policy file's model name), so one model can be
	// declared twice; the provider and model id are then attributes (see
	// [Described]).
	Key() string
	// Generate makes one non-streaming call.
	Generate(ctx context.Context, req *Request) (*Response, error)
	// Stream opens one streaming call. The stream is bound to ctx: when ctx
	// is done, Recv returns promptly and the upstream connection is closed.
	Stream(ctx context.Context, req *Request) (Stream, error)
}

// Stream is a pulled sequence of parts: the caller's pace drives the
// provider. It is not safe for concurrent use; one goroutine reads it.
type Stream interface {
	// Recv returns the next part, or io.EOF after the last one. Any other
	// error ends the stream. Recv after an error or io.EOF returns it again.
	Recv() (Part, error)
	// Close releases the stream and its connection. It may be called at any
	// time, also concurrently with a blocked Recv (which then returns), and
	// more than once. The driver never calls it concurrently with itself.
	Close() error
}

// HeaderStream is implemented by a [Stream] that carries the HTTP response
// headers of the call that opened it (a provider adapter's stream), so a
// caller can log the provider's request id or read its rate-limit headers:
//
//	if hs, ok := s.(driver.HeaderStream); ok {
//		log.Printf("request id %s", hs.Header().Get("x-request-id"))
//	}
//
// A [RetryableModel]'s stream implements it with the headers of the attempt
// that answered (the one the caller reads), or nil when that attempt's
// stream carries none. Header may be called at any time, also concurrently
// with Recv; the caller must not modify the result.
type HeaderStream interface {
	Stream
	Header() http.Header
}

// Role is the author of a message.
type Role string

// The message roles.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one turn of the conversation.
type Message struct {
	Role    Role
	Content []Content
}

// Content is one element of a message: text, a tool call (assistant) or a
// tool result (tool).
type Content struct {
	Text       string
	ToolCallID string // tool calls and results
	ToolName   string // tool calls
	ToolInput  string // tool calls: input as JSON text
	ToolResult string // tool results: result as text or JSON
}

// Tool declares a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Schema is the JSON Schema of the input, as JSON text.
	Schema string
}

// AnyModelID is the model id of a Model that sends whatever id each
// request names in [Request.ModelID], such as a gateway's pass-through to
// an upstream that serves many models.
const AnyModelID = "*"

// Request is a provider-neutral chat request. Adapters translate it to their
// SDK's request type. Fields left zero are not sent.
type Request struct {
	System          string
	Messages        []Message
	Tools           []Tool
	MaxOutputTokens int
	Temperature     *float64
	TopP            *float64
	StopSequences   []string
	Seed            *int64
	// ModelID is the model id a Model built with the id [AnyModelID]
	// sends: the one the caller named (a gateway passes the client's
	// through). Models with an id of their own ignore it; one built with
	// AnyModelID fails a request without it.
	ModelID string
	// Headers are added to the HTTP request.
	Headers http.Header
	// ProviderOptions passes provider-specific settings through, keyed by
	// provider name; adapters document what they read.
	ProviderOptions map[string]any
	// Continue, when set, asks the model to continue an answer it has
	// begun rather than start one: the driver sets it on the attempts that
	// continue a stream cut after commit ([AfterCommitContinue]). A Model
	// that cannot honour it must fail the call (wrapping
	// [ErrCannotContinue]), never answer from the start: the caller would
	// read the beginning twice.
	Continue *Continuation
}

// Response is the result of a non-streaming call.
type Response struct {
	// Content holds the output in order: text and reasoning as one
	// KindTextDelta / KindReasoningDelta part per block, tool calls as
	// KindToolCall parts, and files and sources as theirs.
	Content  []Part
	Finish   FinishReason
	Usage    Usage
	Meta     abi.ResponseMeta
	Warnings []abi.Warning
	// Headers are the HTTP response headers, when the adapter has them.
	Headers http.Header
}

// Text returns the concatenated text of the response's text parts.
func (r *Response) Text() string {
	var n int
	for i := range r.Content {
		if r.Content[i].Kind == abi.KindTextDelta {
			n += len(r.Content[i].Delta)
		}
	}
	b := make([]byte, 0, n)
	for i := range r.Content {
		if r.Content[i].Kind == abi.KindTextDelta {
			b = append(b, r.Content[i].Delta...)
		}
	}
	return string(b)
}

// Transformer is a stream transform (see package abi for the contract).
type Transformer = abi.Transformer
