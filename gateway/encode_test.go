package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/provider/openai"
)

// TestCompletionCarriesEveryField collects a non-streaming answer part by
// part, as collect does, and checks the chat.completion against what a
// client decodes: text that needs escapes (and is longer than the buffer
// the encoder reserves for it), reasoning, a late refusal, a tool call
// streamed as deltas and one delivered whole, logprobs, the upstream's
// fingerprint and tier, the finish and the usage.
func TestCompletionCarriesEveryField(t *testing.T) {
	long := strings.Repeat("\"quoted\"\n\t<\u2028>é", 40) // each piece escapes to more bytes than it has
	parts := []abi.Part{
		{Kind: abi.KindStreamStart},
		{Kind: abi.KindRaw, Raw: openai.ChunkFields{SystemFingerprint: "fp_1", ServiceTier: "default"}},
		{Kind: abi.KindResponseMeta, ID: "up-1", Meta: &abi.ResponseMeta{ID: "up-1", ModelID: "m-2026"}},
		{Kind: abi.KindReasoningDelta, ID: "reasoning-0", Delta: "think"},
		{Kind: abi.KindRaw, Raw: openai.ChunkFields{Content: "Hello ", Logprobs: `{"content":[{"token":"Hello"}]}`, LogprobsContent: `[{"token":"Hello"}]`}},
		{Kind: abi.KindTextDelta, ID: "text-0", Delta: "Hello "},
		{Kind: abi.KindRaw, Raw: openai.ChunkFields{Content: long, Logprobs: `{"content":[{"token":"x"}]}`, LogprobsContent: `[{"token":"x"}]`}},
		{Kind: abi.KindTextDelta, ID: "text-0", Delta: long},
		{Kind: abi.KindToolInputStart, ID: "call_a", Tool: &abi.ToolInfo{Name: "lookup"}},
		{Kind: abi.KindToolInputDelta, ID: "call_a", Delta: `{"q":`},
		{Kind: abi.KindToolInputDelta, ID: "call_a", Delta: `"x"}`},
		{Kind: abi.KindToolCall, ID: "call_b", Tool: &abi.ToolInfo{Name: "send", Input: `{"to":"bob"}`}},
		{Kind: abi.KindRaw, Raw: openai.ChunkFields{Refusal: "no more"}},
		{Kind: abi.KindTextDelta, ID: refusalBlock, Delta: "no more"},
		{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonToolCalls, Raw: "tool_calls"},
			Usage: abi.Usage{InputTokens: 7, OutputTokens: 9, CacheReadTokens: 2, ReasoningTokens: 1}}},
	}
	enc := &chunkEncoder{id: "chatcmpl-rh1", model: "route", created: 42}
	for i := range parts {
		enc.collect(&parts[i])
	}
	b := enc.appendAnswer(nil)
	require.True(t, json.Valid(b), "%s", b)

	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	var got struct {
		ID          string `json:"id"`
		Object      string `json:"object"`
		Created     int64  `json:"created"`
		Model       string `json:"model"`
		Fingerprint string `json:"system_fingerprint"`
		Tier        string `json:"service_tier"`
		Choices     []struct {
			Message struct {
				Role      string  `json:"role"`
				Content   *string `json:"content"`
				Reasoning string  `json:"reasoning_content"`
				Refusal   *string `json:"refusal"`
				ToolCalls []call  `json:"tool_calls"`
			} `json:"message"`
			Logprobs     json.RawMessage `json:"logprobs"`
			FinishReason string          `json:"finish_reason"`
		} `json:"choices"`
	}
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, "chatcmpl-rh1", got.ID)
	require.Equal(t, "chat.completion", got.Object)
	require.Equal(t, int64(42), got.Created)
	require.Equal(t, "route", got.Model)
	require.Equal(t, "fp_1", got.Fingerprint)
	require.Equal(t, "default", got.Tier)
	require.Len(t, got.Choices, 1)
	ch := got.Choices[0]
	require.Equal(t, "assistant", ch.Message.Role)
	require.NotNil(t, ch.Message.Content)
	require.Equal(t, "Hello "+long, *ch.Message.Content)
	require.Equal(t, "think", ch.Message.Reasoning)
	require.NotNil(t, ch.Message.Refusal)
	require.Equal(t, "no more", *ch.Message.Refusal)
	require.Len(t, ch.Message.ToolCalls, 2)
	require.Equal(t, "call_a", ch.Message.ToolCalls[0].ID)
	require.Equal(t, "function", ch.Message.ToolCalls[0].Type)
	require.Equal(t, "lookup", ch.Message.ToolCalls[0].Function.Name)
	require.Equal(t, `{"q":"x"}`, ch.Message.ToolCalls[0].Function.Arguments)
	require.Equal(t, "call_b", ch.Message.ToolCalls[1].ID)
	require.Equal(t, "send", ch.Message.ToolCalls[1].Function.Name)
	require.Equal(t, `{"to":"bob"}`, ch.Message.ToolCalls[1].Function.Arguments)
	require.JSONEq(t, `{"content":[{"token":"Hello"},{"token":"x"}],"refusal":null}`, string(ch.Logprobs))
	require.Equal(t, "tool_calls", ch.FinishReason)
	require.JSONEq(t, `{"prompt_tokens":7,"completion_tokens":9,"total_tokens":16,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":1}}`,
		string(mustField(t, b, "usage")))

	// Appending to a buffer that holds something keeps it.
	b2 := enc.appendAnswer([]byte("prefix:"))
	require.Equal(t, "prefix:"+string(b), string(b2))
}

func mustField(t *testing.T, b []byte, name string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))
	return m[name]
}
