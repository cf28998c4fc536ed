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
	// Canonical, when set, is what re-encoding the meaning gives: a
	// decoder normalises these bytes (an optional field left out, a class
	// a guest may not claim).
	Canonical string `json:"canonical,omitempty"`
	Error     bool   `json:"error,omitempty"`
	// Cap, on an error vector of a "replace" record, names the cap
	// (parts or bytes) the bytes exceed; such bytes are well formed.
	Cap string `json:"cap,omitempty"`
}

// The caps the "replace" vectors are decoded under (a host's are larger;
// these keep the vectors short).
const (
	vectorReplaceParts = 2
	vectorReplaceBytes = 16
)

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
	case "replace":
		ps, err := abi.DecodeReplace(b, vectorReplaceParts, vectorReplaceBytes)
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
		{"policy-hints: capacity of 64 streams per instance (v1.2)", "policy-hints", abi.AppendPolicyHints(nil, &abi.TransformPolicy{Fail: abi.FailClosed},
			&abi.Hints{MaxStreams: 64, Static: map[abi.PartKind]abi.PartAction{abi.KindStreamStart: abi.PartHold}})},
		{"policy: on_cap flush even when fail-closed (v1.2)", "policy", abi.AppendPolicy(nil, &abi.TransformPolicy{Fail: abi.FailClosed, OnCap: abi.CapFlush})},
		{"error: content-filter class is kept (v1.2)", "error", abi.AppendError(nil, &abi.TransformError{Class: abi.ClassContentFilter, Message: "pii"})},
		{"replace: content within the caps (v1.2)", "replace", abi.AppendParts(nil, []abi.Part{
			{Kind: abi.KindSource, Source: &abi.Source{URL: "u"}}, {Kind: abi.KindTextDelta, ID: "t0", Delta: "[redacted]"}})},
	}
}

// shortVectors are v1.2 records a decoder must accept although they are
// not in the form the codec writes: Canonical is the codec's form of the
// same meaning.
var shortVectors = []struct{ name, record, hex string }{
	{"error: header only, an empty transform error (v1.2)", "error", "00 00 0000 00000000"},
	{"error: message only, no phrase or text (v1.2)", "error", "00 0d 0000 05000000 07000000 626c6f636b6564"},
	{"error: refusal with a phrase and no text (v1.2)", "error", "01 00 0000 00000000 00000000 07000000 69206361 6e2774"},
	{"error: a transform error claiming class auth is a transform error (v1.2)", "error", "00 08 0000 00000000 04000000 6e6f7065"},
	{"error: an unknown class is a transform error (v1.2)", "error", "00 63 0000 00000000 00000000"},
	{"policy-hints: capacity after an empty static table (v1.2)", "policy-hints", "00 00 0000 00000000 00000000 00000000 0000000000000000 00000000 00000000 08000000"},
	{"replace: no payload is the empty list (v1.3)", "replace", ""},
	{"replace: the empty list, count 0 (v1.3)", "replace", "00000000"},
	{"replace: ids are the guest's, carried as written (v1.3)", "replace", "01000000 12000000 04 00 0000 05000000 626c6b2d37 01000000 58"},
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
	{"policy: unknown cap action (v1.2)", "policy", "00 03 0000 00000000 00000000 00000000 0000000000000000"},
	{"error: a string cut short (v1.2)", "error", "00 00 0000 00000000 05000000 6162"},
	{"replace: stream-start may not be injected (v1.2)", "replace", "01000000 10000000 01 00 0000 00000000 00000000 00000000"},
	{"replace: finish may not be injected (v1.2)", "replace", "01000000 39000000 10 00 0000 00000000 00000000 00 00000000" + strings.Repeat("0000000000000000", 5)},
	{"replace: an error part may not be injected (v1.2)", "replace", "01000000 10000000 12 00 0000 00000000 00000000 00000000"},
	{"replace: response-metadata may not be injected (v1.2)", "replace", "01000000 18000000 02 00 0000 00000000 00000000 00000000 0000000000000000"},
}

// capVectors are well-formed REPLACE payloads over the vectors' caps
// (vectorReplaceParts, vectorReplaceBytes): a host rejects them before it
// decodes past the cap.
var capVectors = []struct{ name, limit, hex string }{
	{"replace: three parts over a cap of two (v1.2)", "parts", "03000000 0c000000 05 00 0000 00000000 00000000 0c000000 05 00 0000 00000000 00000000 0c000000 05 00 0000 00000000 00000000"},
	{"replace: 17 bytes over a cap of 16 (v1.2)", "bytes", "01000000 1d000000 04 00 0000 00000000 11000000 61616161 61616161 61616161 61616161 61"},
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
		for _, sv := range shortVectors {
			v, again, err := decodeRecord(sv.record, unhex(t, sv.hex))
			require.NoError(t, err, sv.name)
			vs = append(vs, vector{Name: sv.name, Record: sv.record, Hex: sv.hex, Meaning: meaningOf(t, v), Canonical: spaced(again)})
		}
		for _, b := range badVectors {
			vs = append(vs, vector{Name: b.name, Record: b.record, Hex: b.hex, Error: true})
		}
		for _, c := range capVectors {
			vs = append(vs, vector{Name: c.name, Record: "replace", Hex: c.hex, Error: true, Cap: c.limit})
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
	require.Len(t, vs, len(goldenValues())+len(shortVectors)+len(badVectors)+len(capVectors), "vectors.json is stale: go test ./abi -run TestVectors -update")
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			b := unhex(t, v.Hex)
			got, again, err := decodeRecord(v.Record, b)
			if v.Cap != "" {
				var ce *abi.CapError
				require.ErrorAs(t, err, &ce)
				require.NotErrorIs(t, err, abi.ErrMalformed, "over a cap is not malformed")
				require.Equal(t, v.Cap, ce.Limit)
				return
			}
			if v.Error {
				require.ErrorIs(t, err, abi.ErrMalformed)
				return
			}
			require.NoError(t, err)
			require.JSONEq(t, string(v.Meaning), string(meaningOf(t, got)))
			if v.Canonical != "" {
				require.Equal(t, unhex(t, v.Canonical), again, "re-encoding must give the vector's canonical bytes")
				return
			}
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

// TestDecodeReplace_Kinds: a REPLACE may carry content and metadata, never
// the driver's or the provider's own parts (ABI.md §8.6), and the reason
// names the kind.
func TestDecodeReplace_Kinds(t *testing.T) {
	for k := abi.KindStreamStart; k <= abi.KindError; k++ {
		b := abi.AppendParts(nil, []abi.Part{{Kind: abi.KindTextDelta, Delta: "x"}, {Kind: k}})
		ps, err := abi.DecodeReplace(b, -1, -1)
		if k.Replaceable() {
			require.NoError(t, err, k.String())
			require.Len(t, ps, 2)
			continue
		}
		require.ErrorIs(t, err, abi.ErrMalformed, k.String())
		require.ErrorContains(t, err, "a "+k.String()+" part, which a REPLACE may not carry")
		_, err = abi.DecodeParts(b)
		require.NoError(t, err, "DecodeParts itself accepts every kind")
	}
	require.False(t, abi.KindStreamStart.Replaceable())
	require.False(t, abi.KindFinish.Replaceable())
	require.False(t, abi.KindResponseMeta.Replaceable())
	require.True(t, abi.KindTextStart.Replaceable())
	require.True(t, abi.KindSource.Replaceable())
}

// TestDecodeReplace_CapsBeforeDecoding: a count over the parts cap is
// refused from the count alone (the bytes after it are never read), and
// the bytes cap stops at the first part past it.
func TestDecodeReplace_CapsBeforeDecoding(t *testing.T) {
	many := abi.AppendParts(nil, make([]abi.Part, 0))
	many = many[:0]
	many = append(many, 0xff, 0xff, 0, 0) // 65535 parts claimed
	many = append(many, make([]byte, 65535*16)...)
	_, err := abi.DecodeReplace(many, 1024, -1)
	var ce *abi.CapError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, abi.CapError{Limit: "parts", Max: 1024}, *ce)

	big := abi.AppendParts(nil, []abi.Part{{Kind: abi.KindTextDelta, Delta: strings.Repeat("a", 10)}, {Kind: abi.KindTextDelta, Delta: strings.Repeat("b", 10)}})
	_, err = abi.DecodeReplace(big, -1, 15)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, abi.CapError{Limit: "bytes", Max: 15}, *ce)
	ps, err := abi.DecodeReplace(big, 2, 20)
	require.NoError(t, err, "exactly at both caps")
	require.Len(t, ps, 2)
}

func TestCapAction_Resolved(t *testing.T) {
	for _, tc := range []struct {
		p    abi.TransformPolicy
		fail bool
	}{
		{abi.TransformPolicy{}, false},
		{abi.TransformPolicy{Fail: abi.FailClosed}, true},
		{abi.TransformPolicy{Fail: abi.FailClosed, OnCap: abi.CapFlush}, false},
		{abi.TransformPolicy{OnCap: abi.CapFail}, true},
	} {
		require.Equal(t, tc.fail, tc.p.FailsAtCap(), "%+v", tc.p)
	}
}

func TestTransformError_Unwrap(t *testing.T) {
	cause := errors.New("plugin call timed out")
	err := error(&abi.TransformError{Transform: "t", Class: abi.ClassPlugin, Message: cause.Error(), Err: cause})
	require.ErrorIs(t, err, cause)
}
