package abi_test

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

var update = flag.Bool("update", false, "rewrite testdata/abi/vectors.json from the Go values in this file")

const vectorsFile = "../testdata/abi/vectors.json"

// vector is one conformance vector: a record's bytes and their meaning.
// Hex may contain spaces (one group per field, for readers); Meaning is
// the decoded value as JSON (Go field names, durations in nanoseconds).
// Error vectors hold bytes every decoder must reject.
type vector struct {
	Name    string          `json:"name"`
	Record  string          `json:"record"`
	Hex     string          `json:"hex"`
	Meaning json.RawMessage `json:"meaning,omitempty"`
	Error   bool            `json:"error,omitempty"`
}

// partJSON shows Part.Err as its message.
type partJSON struct {
	abi.Part
	Err string
}

func meaningOf(t *testing.T, v any) json.RawMessage {
	t.Helper()
	switch x := v.(type) {
	case abi.Part:
		pj := partJSON{Part: x}
		if x.Err != nil {
			pj.Err = x.Err.Error()
		}
		v = pj
	case []abi.Part:
		ps := make([]partJSON, len(x))
		for i, p := range x {
			ps[i] = partJSON{Part: p}
			if p.Err != nil {
				ps[i].Err = p.Err.Error()
			}
		}
		v = ps
	case error:
		v = map[string]any{"type": strings.TrimPrefix(typeName(x), "*abi."), "value": x}
	}
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func typeName(err error) string {
	var re *abi.RefusalError
	if errors.As(err, &re) {
		return "RefusalError"
	}
	return "TransformError"
}

// decodeRecord decodes b as the named record and re-encodes it.
func decodeRecord(record string, b []byte) (v any, again []byte, err error) {
	switch record {
	case "attempt":
		a, err := abi.DecodeAttempt(b)
		return a, abi.EncodeAttempt(&a), err
	case "decision":
		d, err := abi.DecodeDecision(b)
		return d, abi.EncodeDecision(d), err
	case "stream-info":
		s, err := abi.DecodeStreamInfo(b)
		return s, abi.AppendStreamInfo(nil, &s), err
	case "part":
		p, n, err := abi.DecodePart(b)
		if err == nil && n != len(b) {
			err = errors.New("stray bytes after part")
		}
		return p, abi.EncodePart(&p), err
	case "parts":
		ps, err := abi.DecodeParts(b)
		return ps, abi.AppendParts(nil, ps), err
	case "error":
		e, err := abi.DecodeError(b, "t")
		return e, abi.AppendError(nil, e), err
	case "policy":
		p, err := abi.DecodePolicy(b)
		return p, abi.AppendPolicy(nil, &p), err
	case "policy-hints":
		p, h, err := abi.DecodePolicyHints(b)
		return struct {
			P abi.TransformPolicy
			H abi.Hints
		}{p, h}, abi.AppendPolicyHints(nil, &p, &h), err
	}
	panic("unknown record " + record)
}

// goldenValues are the vectors' sources; -update regenerates the file.
func goldenValues() []struct {
	name, record string
	bytes        []byte
} {
	ts := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	type g = struct {
		name, record string
		bytes        []byte
	}
	return []g{
		{"attempt: 429 with retry-after", "attempt", abi.EncodeAttempt(&abi.Attempt{
			Number: 1, Model: "openai/gpt-5", Elapsed: 1500 * time.Millisecond, Duration: 1400 * time.Millisecond,
			Class: abi.ClassRateLimit, Status: 429, ErrorName: "*driver.ProviderError", Message: "slow down",
			RetryAfter: 2 * time.Second, Retryable: true})},
		{"attempt: result with finish and usage and earlier", "attempt", abi.EncodeAttempt(&abi.Attempt{
			Number: 3, Model: "anthropic/claude", Elapsed: time.Second, RetryAfter: -1,
			Finish: abi.FinishReason{Unified: abi.ReasonContentFilter, Raw: "content_filter"},
			Usage:  abi.Usage{InputTokens: 10, OutputTokens: 20, CacheReadTokens: 1, CacheWriteTokens: 2, ReasoningTokens: 3},
			Earlier: []abi.AttemptSummary{
				{Model: "openai/gpt-5", Class: abi.ClassServer, Status: 503, Duration: time.Millisecond},
				{Model: "openai/gpt-5", Class: abi.ClassTimeout, Duration: 2 * time.Millisecond},
			}})},
		{"decision: zero is no opinion", "decision", abi.EncodeDecision(abi.Decision{})},
		{"decision: retry after retry-after", "decision", abi.EncodeDecision(abi.Decision{
			Action: abi.ActionRetry, UseRetryAfter: true, MaxAttempts: 3, Delay: 100 * time.Millisecond, BackoffFactor: 2})},
		{"decision: switch", "decision", abi.EncodeDecision(abi.Decision{
			Action: abi.ActionSwitch, Model: "anthropic/claude", Timeout: 30 * time.Second})},
		{"stream-info", "stream-info", abi.AppendStreamInfo(nil, &abi.StreamInfo{ID: 42, Attempt: 2, Model: "openai/gpt-5"})},
		{"part: text-delta", "part", abi.EncodePart(&abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: "hello"})},
		{"part: text-start", "part", abi.EncodePart(&abi.Part{Kind: abi.KindTextStart, ID: "t0"})},
		{"part: response-metadata", "part", abi.EncodePart(&abi.Part{Kind: abi.KindResponseMeta, ID: "resp_1",
			Meta: &abi.ResponseMeta{ID: "resp_1", ModelID: "gpt-5-2026", Timestamp: ts}})},
		{"part: tool-result", "part", abi.EncodePart(&abi.Part{Kind: abi.KindToolResult, ID: "call_1",
			Tool: &abi.ToolInfo{Name: "search", Result: `{"n":1}`, IsError: true, ProviderExecuted: true}})},
		{"part: file", "part", abi.EncodePart(&abi.Part{Kind: abi.KindFile,
			File: &abi.File{MediaType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}}})},
		{"part: source", "part", abi.EncodePart(&abi.Part{Kind: abi.KindSource, ID: "s1",
			Source: &abi.Source{URL: "https://example.com", Title: "Example"}})},
		{"part: finish", "part", abi.EncodePart(&abi.Part{Kind: abi.KindFinish,
			Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop, Raw: "end_turn"}, Usage: abi.Usage{InputTokens: 5, OutputTokens: 7}}})},
		{"part: stream-start with a warning", "part", abi.EncodePart(&abi.Part{Kind: abi.KindStreamStart,
			Warnings: []abi.Warning{{Type: "unsupported", Feature: "topK", Message: "ignored"}}})},
		{"part: error", "part", abi.EncodePart(&abi.Part{Kind: abi.KindError, Err: errors.New("overloaded")})},
		{"parts: replace with two", "parts", abi.AppendParts(nil, []abi.Part{
			{Kind: abi.KindTextDelta, ID: "t0", Delta: "HELLO"}, {Kind: abi.KindTextEnd, ID: "t0"}})},
		{"error: refusal", "error", abi.AppendError(nil, &abi.RefusalError{Phrase: "i can't", Text: "I can't help"})},
		{"error: transform error with code", "error", abi.AppendError(nil, &abi.TransformError{
			Class: abi.ClassContentFilter, Code: 7, Message: "blocked"})},
		{"policy: fail-closed with caps", "policy", abi.AppendPolicy(nil, &abi.TransformPolicy{
			Fail: abi.FailClosed, OnCap: abi.CapFail, MaxHeldParts: 64, MaxHeldBytes: 4096, MaxHoldTime: 2 * time.Second})},
		{"policy-hints: a refusal detector's (v1.1)", "policy-hints", abi.AppendPolicyHints(nil, &abi.TransformPolicy{},
			&abi.Hints{AutoClose: true, Static: map[abi.PartKind]abi.PartAction{
				abi.KindStreamStart: abi.PartHold, abi.KindResponseMeta: abi.PartHold, abi.KindTextStart: abi.PartHold,
				abi.KindTextEnd: abi.PartDetach, abi.KindReasoningStart: abi.PartDetach, abi.KindFinish: abi.PartDetach}})},
	}
}

// badVectors are bytes every decoder must reject.
var badVectors = []struct{ name, record, hex string }{
	{"attempt: truncated header", "attempt", "01000000 9501"},
	{"attempt: string past the end", "attempt", "01000000 0000 00 00 00 00 0000 00000000" + strings.Repeat("00", 64) + "ff000000 41"},
	{"decision: unknown action", "decision", "09 00 0000 00000000 0000000000000000 0000000000000000 0000000000000000 00000000"},
	{"decision: negative delay", "decision", "01 00 0000 00000000 ffffffffffffffff 0000000000000000 0000000000000000 00000000"},
	{"decision: switch without model", "decision", "02 00 0000 00000000 0000000000000000 0000000000000000 0000000000000000 00000000"},
	{"decision: NaN backoff", "decision", "01 00 0000 00000000 0000000000000000 0000000000000000 000000000000f87f 00000000"},
	{"part: kind 0", "part", "00 00 0000 00000000 00000000"},
	{"part: unknown kind", "part", "63 00 0000 00000000 00000000"},
	{"parts: count past the end", "parts", "ffffffff"},
	{"parts: stray bytes in a part", "parts", "01000000 0d000000 05 00 0000 00000000 00000000 00"},
	{"error: unknown kind", "error", "07 00 0000 00000000 00000000 00000000 00000000"},
	{"policy-hints: static ERROR", "policy-hints", "00 00 0000 00000000 00000000 00000000 0000000000000000 00000000 02000000 ff02"},
	{"policy-hints: static verdict for kind 0", "policy-hints", "00 00 0000 00000000 00000000 00000000 0000000000000000 00000000 01000000 01"},
	{"policy-hints: table past the end", "policy-hints", "00 00 0000 00000000 00000000 00000000 0000000000000000 01000000 05000000 ff01"},
	{"policy-hints: cut flags", "policy-hints", "00 00 0000 00000000 00000000 00000000 0000000000000000 0100"},
	{"policy: unknown fail policy", "policy", "05 00 0000 00000000 00000000 00000000 0000000000000000"},
}

// spaced renders b as hex for readers: one group per 4 bytes.
func spaced(b []byte) string {
	var sb strings.Builder
	for i := 0; i < len(b); i += 4 {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(hex.EncodeToString(b[i:min(i+4, len(b))]))
	}
	return sb.String()
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(t, err)
	return b
}

func TestVectors(t *testing.T) {
	if *update {
		var vs []vector
		for _, g := range goldenValues() {
			v, _, err := decodeRecord(g.record, g.bytes)
			require.NoError(t, err, g.name)
			vs = append(vs, vector{Name: g.name, Record: g.record, Hex: spaced(g.bytes), Meaning: meaningOf(t, v)})
		}
		for _, b := range badVectors {
			vs = append(vs, vector{Name: b.name, Record: b.record, Hex: b.hex, Error: true})
		}
		out, err := json.MarshalIndent(vs, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(vectorsFile), 0o755))
		require.NoError(t, os.WriteFile(vectorsFile, append(out, '\n'), 0o644))
	}
	raw, err := os.ReadFile(vectorsFile)
	require.NoError(t, err)
	var vs []vector
	require.NoError(t, json.Unmarshal(raw, &vs))
	require.Len(t, vs, len(goldenValues())+len(badVectors), "vectors.json is stale: go test ./abi -run TestVectors -update")
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			b := unhex(t, v.Hex)
			got, again, err := decodeRecord(v.Record, b)
			if v.Error {
				require.ErrorIs(t, err, abi.ErrMalformed)
				return
			}
			require.NoError(t, err)
			require.JSONEq(t, string(v.Meaning), string(meaningOf(t, got)))
			require.Equal(t, b, again, "re-encoding must give the vector's bytes")
		})
	}
}

// TestTextDeltaBytes pins the hot-path record byte for byte, written by hand
// from ABI.md §8.4 rather than by the codec.
func TestTextDeltaBytes(t *testing.T) {
	want := []byte{4, 0, 0, 0, 2, 0, 0, 0, 't', '0', 5, 0, 0, 0, 'h', 'e', 'l', 'l', 'o'}
	require.Equal(t, want, abi.EncodePart(&abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: "hello"}))
	// Decision "retry after 1s", from ABI.md §8.2.
	d := []byte{1, 0, 0, 0, 0, 0, 0, 0, 0x00, 0xca, 0x9a, 0x3b, 0, 0, 0, 0}
	d = append(d, make([]byte, 20)...)
	got, err := abi.DecodeDecision(d)
	require.NoError(t, err)
	require.Equal(t, abi.Decision{Action: abi.ActionRetry, Delay: time.Second}, got)
}

func TestUnpackVerdict(t *testing.T) {
	tests := []struct {
		name    string
		v       uint64
		action  abi.PartAction
		n       uint32
		wantErr bool
	}{
		{name: "zero is pass", v: 0, action: abi.PartPass},
		{name: "hold", v: 1, action: abi.PartHold},
		{name: "replace with payload", v: abi.PackVerdict(abi.PartReplace, 40), action: abi.PartReplace, n: 40},
		{name: "error with payload", v: abi.PackVerdict(abi.PartError, 9), action: abi.PartError, n: 9},
		{name: "unknown action", v: 77, wantErr: true},
		{name: "bits above the action byte", v: 0x100, wantErr: true},
		{name: "payload on pass", v: abi.PackVerdict(abi.PartPass, 3), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, n, err := abi.UnpackVerdict(tc.v)
			if tc.wantErr {
				require.ErrorIs(t, err, abi.ErrMalformed)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.action, a)
			require.Equal(t, tc.n, n)
		})
	}
}

func TestStatus(t *testing.T) {
	require.NoError(t, abi.StatusOK.Err())
	require.ErrorIs(t, abi.StatusFault.Err(), abi.StatusFault)
	require.Equal(t, "StatusTooSmall", abi.StatusTooSmall.String())
	require.Equal(t, "Status(-99)", abi.Status(-99).String())
}
