package driver

import "github.com/retryhost/retryhost/abi"

// CommitRule says which parts commit a stream: the first such part that
// leaves the transform chain ends the attempt's ability to fail over (doing
// so later would duplicate output the caller already has).
type CommitRule uint8

const (
	// CommitOnOutput commits on the first part that carries output: a
	// non-empty text, reasoning or tool-input delta, a tool-input start, a
	// tool call, a tool result or a file. An empty delta (a heartbeat), a
	// source, metadata, block starts and ends and a finish never commit.
	// This is what ai-retry 2.4 measurably does and the AI SDK calls an
	// output chunk. The default.
	CommitOnOutput CommitRule = 0
	// CommitLegacy is ai-retry 2.3's set: any text or reasoning delta (even
	// empty), a source, a tool call or result, a tool-input start or
	// delta, and a raw chunk; a file does not commit.
	CommitLegacy CommitRule = 1
)

// String returns "output" or "legacy".
func (r CommitRule) String() string {
	if r == CommitLegacy {
		return "legacy"
	}
	return "output"
}

// IsContent reports whether p commits a stream under r.
func (r CommitRule) IsContent(p *abi.Part) bool {
	if r == CommitLegacy {
		switch p.Kind {
		case abi.KindTextDelta, abi.KindReasoningDelta, abi.KindSource, abi.KindToolCall,
			abi.KindToolResult, abi.KindToolInputStart, abi.KindToolInputDelta, abi.KindRaw:
			return true
		}
		return false
	}
	switch p.Kind {
	case abi.KindTextDelta, abi.KindReasoningDelta, abi.KindToolInputDelta:
		return p.Delta != ""
	case abi.KindToolInputStart, abi.KindToolCall, abi.KindToolResult, abi.KindFile:
		return true
	}
	return false
}
