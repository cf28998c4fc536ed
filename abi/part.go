package abi

import "time"

// PartKind says what a [Part] is. The zero value is [KindInvalid], so a zeroed
// part is never mistaken for content. The numeric values are part of ABI v1
// (they travel in the part record) and never change; new kinds are appended.
type PartKind uint8

// The part kinds of the LLM stream protocol. They mirror the AI SDK v7
// provider-level stream parts (LanguageModelV4StreamPart).
const (
	KindInvalid        PartKind = 0
	KindStreamStart    PartKind = 1  // first part of a stream; carries Warnings
	KindResponseMeta   PartKind = 2  // response id, model id, timestamp (Meta)
	KindTextStart      PartKind = 3  // a text block opens; ID names it
	KindTextDelta      PartKind = 4  // Delta is text of block ID
	KindTextEnd        PartKind = 5  // block ID closes
	KindReasoningStart PartKind = 6  // a reasoning block opens; ID names it
	KindReasoningDelta PartKind = 7  // Delta is reasoning text of block ID
	KindReasoningEnd   PartKind = 8  // block ID closes
	KindToolInputStart PartKind = 9  // a tool call's input starts streaming; ID is the call id, Tool.Name is set
	KindToolInputDelta PartKind = 10 // Delta is a fragment of the tool input JSON of call ID
	KindToolInputEnd   PartKind = 11 // the input of call ID is complete
	KindToolCall       PartKind = 12 // a complete tool call; ID is the call id; Tool holds name and input
	KindToolResult     PartKind = 13 // a provider-executed tool's result; ID is the call id; Tool holds it
	KindFile           PartKind = 14 // a generated file (File)
	KindSource         PartKind = 15 // a cited source (Source)
	KindFinish         PartKind = 16 // the last part of a successful stream (Finish)
	KindRaw            PartKind = 17 // a raw provider chunk (Raw), only when asked for
	KindError          PartKind = 18 // an error reported inside the stream (Err)

	kindCount = 19
)

var kindNames = [kindCount]string{
	"invalid", "stream-start", "response-metadata",
	"text-start", "text-delta", "text-end",
	"reasoning-start", "reasoning-delta", "reasoning-end",
	"tool-input-start", "tool-input-delta", "tool-input-end",
	"tool-call", "tool-result", "file", "source", "finish", "raw", "error",
}

// String returns the kind's protocol name, such as "text-delta".
func (k PartKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Valid reports whether k is a kind this version of the ABI defines (other than KindInvalid).
func (k PartKind) Valid() bool { return k > KindInvalid && k < kindCount }

// Part is one element of a model's output stream.
//
// It is a flat value type rather than an interface so that the hot path
// (text deltas) copies a few words and allocates nothing. Only the fields that
// belong to Kind are set; the others are zero. Rare payloads hang off pointers
// so the common part stays small.
//
// A Part is immutable once emitted: transforms and the driver never modify a
// part they receive, they build a new one.
type Part struct {
	Kind PartKind
	// ID names the block (text, reasoning, tool input), the tool call, the
	// source, or (for KindResponseMeta) the response.
	ID string
	// Delta is the text of a text, reasoning or tool-input delta.
	Delta string

	Meta     *ResponseMeta // KindResponseMeta
	Tool     *ToolInfo     // KindToolInputStart, KindToolCall, KindToolResult
	File     *File         // KindFile
	Source   *Source       // KindSource
	Finish   *Finish       // KindFinish
	Warnings []Warning     // KindStreamStart
	Raw      any           // KindRaw: the provider's chunk as the adapter decoded it
	Err      error         // KindError: the error the provider reported
}

// Size is the number of payload bytes a part carries, as counted by hold caps.
func (p *Part) Size() int {
	n := len(p.ID) + len(p.Delta)
	if p.Tool != nil {
		n += len(p.Tool.Name) + len(p.Tool.Input) + len(p.Tool.Result)
	}
	if p.File != nil {
		n += len(p.File.Data) + len(p.File.URL)
	}
	return n
}

// ResponseMeta identifies the response a stream belongs to.
type ResponseMeta struct {
	ID        string
	ModelID   string
	Timestamp time.Time
}

// ToolInfo describes a tool call or its result.
type ToolInfo struct {
	Name             string
	Input            string // the call's input as JSON text (KindToolCall)
	Result           string // the result as JSON text (KindToolResult)
	IsError          bool   // the result reports a failure (KindToolResult)
	ProviderExecuted bool   // the provider ran the tool itself
}

// File is a generated file, inline or by URL.
type File struct {
	MediaType string
	Data      []byte
	URL       string
}

// Source is a cited source (a URL or a document).
type Source struct {
	URL       string
	Title     string
	MediaType string // documents only
	Filename  string // documents only
}

// Warning is a provider's warning about the request (an unsupported setting…).
type Warning struct {
	Type    string // "unsupported", "compatibility", "deprecated" or "other"
	Feature string
	Message string
}

// Finish ends a successful stream.
type Finish struct {
	Reason FinishReason
	Usage  Usage
}

// FinishReason is why the model stopped: a unified value to branch on and the
// provider's own word for it.
type FinishReason struct {
	Unified Reason
	Raw     string // as the provider said it ("end_turn", "content_filter", …)
}

// Reason is the unified finish reason. The zero value, ReasonUnknown, means the
// provider did not say.
type Reason uint8

// The unified finish reasons.
const (
	ReasonUnknown       Reason = 0
	ReasonStop          Reason = 1
	ReasonLength        Reason = 2
	ReasonContentFilter Reason = 3
	ReasonToolCalls     Reason = 4
	ReasonError         Reason = 5
	ReasonOther         Reason = 6
	ReasonRefusal       Reason = 7 // a provider-declared refusal (Anthropic stop_reason "refusal")

	reasonCount = 8
)

var reasonNames = [reasonCount]string{"unknown", "stop", "length", "content-filter", "tool-calls", "error", "other", "refusal"}

// String returns the reason's protocol name, such as "content-filter".
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// ParseReason maps a protocol name back to a Reason; unknown names give ReasonUnknown and false.
func ParseReason(s string) (Reason, bool) {
	for i, n := range reasonNames {
		if n == s {
			return Reason(i), true
		}
	}
	return ReasonUnknown, false
}

// Usage counts tokens. Zero means "not reported".
type Usage struct {
	InputTokens      int64
	OutputTokens     int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	ReasoningTokens  int64
}
