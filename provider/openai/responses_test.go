package openai_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
	"github.com/retryhost/retryhost/provider/openai"
)

const (
	respID    = "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b"
	respMsgID = "msg_68af4031a3d08193b1c0a5e1f26c2c3b05438e46b5f69a3b"
	respCall  = "call_Qx5b1J2r8WnKp3TzL0vYh7Ud"
)

func responsesModel(t *testing.T, srv *wiretest.Server, opts ...openai.Option) *openai.Model {
	t.Helper()
	return model(t, srv, append([]openai.Option{openai.WithResponsesAPI()}, opts...)...)
}

func TestResponsesStream(t *testing.T) {
	completed := abi.FinishReason{Unified: abi.ReasonStop, Raw: "completed"}
	weather := &abi.ToolInfo{Name: "get_weather", Input: `{"location":"Paris, France"}`}
	tests := []struct {
		name      string
		kinds     string
		text      string
		reasoning string
		finish    abi.FinishReason
		usage     abi.Usage
		tool      *abi.ToolInfo
		source    *abi.Source
		recvErr   *wantErr
		message   string
	}{
		{
			name:   "responses_text",
			kinds:  "stream-start response-metadata text-start text-delta*9 text-end finish",
			text:   "Hello! How can I help you today?",
			finish: completed,
			usage:  abi.Usage{InputTokens: 19, OutputTokens: 10, CacheReadTokens: 4},
		},
		{
			name:   "responses_text_cr_bom",
			kinds:  "stream-start response-metadata text-start text-delta*9 text-end finish",
			text:   "Hello! How can I help you today?",
			finish: completed,
			usage:  abi.Usage{InputTokens: 19, OutputTokens: 10, CacheReadTokens: 4},
		},
		{
			name: "responses_reasoning",
			kinds: "stream-start response-metadata reasoning-start reasoning-delta*3 reasoning-end " +
				"text-start text-delta*2 source text-end finish",
			text:      "Hi there! Nice to meet you.",
			reasoning: "**Answering a greeting**\n\nThe user says hello; a short friendly answer will do.",
			finish:    completed,
			usage:     abi.Usage{InputTokens: 25, OutputTokens: 180, ReasoningTokens: 160},
			source:    &abi.Source{URL: "https://en.wikipedia.org/wiki/Greeting", Title: "Greeting - Wikipedia"},
		},
		{
			name:   "responses_tool_call",
			kinds:  "stream-start response-metadata tool-input-start tool-input-delta*6 tool-input-end tool-call finish",
			finish: abi.FinishReason{Unified: abi.ReasonToolCalls, Raw: "completed"},
			usage:  abi.Usage{InputTokens: 62, OutputTokens: 19},
			tool:   weather,
		},
		{
			name:   "responses_incomplete",
			kinds:  "stream-start response-metadata text-start text-delta*3 text-end finish",
			text:   "Once upon a time",
			finish: abi.FinishReason{Unified: abi.ReasonLength, Raw: "max_output_tokens"},
			usage:  abi.Usage{InputTokens: 12, OutputTokens: 4},
		},
		{
			name:   "responses_refusal_after_text",
			kinds:  "stream-start response-metadata text-start text-delta text-end text-start text-delta*3 text-end finish",
			text:   "Sure, the first stepI'm sorry, but I can't help with that.",
			finish: abi.FinishReason{Unified: abi.ReasonRefusal, Raw: "refusal"},
			usage:  abi.Usage{InputTokens: 21, OutputTokens: 12},
		},
		{
			name:   "responses_refusal_then_text",
			kinds:  "stream-start response-metadata text-start text-delta text-end text-start text-delta text-end finish",
			text:   "I'm sorry, but I can't help with that.Here is something else.",
			finish: abi.FinishReason{Unified: abi.ReasonRefusal, Raw: "refusal"},
			usage:  abi.Usage{InputTokens: 21, OutputTokens: 12},
		},
		{
			name:    "responses_refusal",
			kinds:   "stream-start response-metadata",
			recvErr: &wantErr{class: abi.ClassRefusal, typ: "refusal"},
			message: "I'm sorry, but I can't help with that.",
		},
		{
			name:    "responses_failed",
			kinds:   "stream-start response-metadata",
			recvErr: &wantErr{class: abi.ClassServer, typ: "server_error", retryable: true},
			message: "The model failed to generate a response.",
		},
		{
			name:    "responses_failed_invalid_prompt",
			kinds:   "stream-start response-metadata",
			recvErr: &wantErr{class: abi.ClassClient, typ: "invalid_prompt"},
		},
		{
			name:    "responses_error_event",
			kinds:   "stream-start response-metadata",
			recvErr: &wantErr{class: abi.ClassRateLimit, typ: "rate_limit_exceeded", retryable: true},
		},
		{
			name:    "responses_error_event_nested",
			kinds:   "stream-start response-metadata text-start text-delta",
			text:    "Hello",
			recvErr: &wantErr{class: abi.ClassServer, typ: "server_error", retryable: true},
			message: "An error occurred while processing your request. You can retry your request.",
		},
		{
			name:    "responses_truncated",
			kinds:   "stream-start response-metadata text-start text-delta*2",
			text:    "The answer",
			recvErr: &wantErr{class: abi.ClassNetwork, retryable: true},
		},
		{
			name:    "responses_cut",
			kinds:   "stream-start response-metadata text-start text-delta*2",
			text:    "The answer",
			recvErr: &wantErr{class: abi.ClassNetwork, retryable: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := wiretest.ServeFile(t, wire(tt.name))
			st, err := responsesModel(t, srv).Stream(context.Background(), request())
			require.NoError(t, err)
			parts, err := wiretest.Collect(st, 1000)
			require.Equal(t, tt.kinds, wiretest.Kinds(parts))
			require.Equal(t, tt.text, wiretest.Text(parts, abi.KindTextDelta))
			require.Equal(t, tt.reasoning, wiretest.Text(parts, abi.KindReasoningDelta))
			require.Equal(t, respID, parts[1].Meta.ID)
			got := srv.Requests()[0]
			var body map[string]any
			require.NoError(t, json.Unmarshal(got.Body, &body))
			require.Equal(t, true, body["stream"])
			if tt.recvErr != nil {
				checkErr(t, err, tt.recvErr)
				if tt.message != "" {
					var pe *driver.ProviderError
					require.ErrorAs(t, err, &pe)
					require.Equal(t, tt.message, pe.Message)
				}
				require.Nil(t, wiretest.Finish(parts))
				return
			}
			require.NoError(t, err)
			f := wiretest.Finish(parts)
			require.NotNil(t, f)
			require.Equal(t, tt.finish, f.Reason)
			require.Equal(t, tt.usage, f.Usage)
			for _, p := range parts {
				switch p.Kind {
				case abi.KindToolCall:
					require.Equal(t, respCall, p.ID, "the call_id a tool result must name")
					require.Equal(t, tt.tool, p.Tool)
					require.Equal(t, tt.tool.Input, wiretest.Text(parts, abi.KindToolInputDelta))
				case abi.KindSource:
					require.Equal(t, tt.source, p.Source)
				}
			}
		})
	}
}

func TestResponsesGenerate(t *testing.T) {
	tests := []struct {
		name      string
		text      string
		reasoning string
		finish    abi.FinishReason
		usage     abi.Usage
		kinds     []abi.PartKind
		tool      *abi.ToolInfo
		wantErr   *wantErr
	}{
		{name: "generate_responses_text", text: "Hello! How can I help you today?",
			finish: abi.FinishReason{Unified: abi.ReasonStop, Raw: "completed"},
			usage:  abi.Usage{InputTokens: 19, OutputTokens: 10, CacheReadTokens: 4},
			kinds:  []abi.PartKind{abi.KindTextDelta}},
		{name: "generate_responses_reasoning", text: "Hi there! Nice to meet you.",
			reasoning: "**Answering a greeting**\n\nThe user says hello; a short friendly answer will do.",
			finish:    abi.FinishReason{Unified: abi.ReasonStop, Raw: "completed"},
			usage:     abi.Usage{InputTokens: 25, OutputTokens: 180, ReasoningTokens: 160},
			kinds:     []abi.PartKind{abi.KindReasoningDelta, abi.KindTextDelta, abi.KindSource}},
		{name: "generate_responses_tool_call",
			finish: abi.FinishReason{Unified: abi.ReasonToolCalls, Raw: "completed"},
			usage:  abi.Usage{InputTokens: 62, OutputTokens: 19},
			kinds:  []abi.PartKind{abi.KindToolCall},
			tool:   &abi.ToolInfo{Name: "get_weather", Input: `{"location":"Paris, France"}`}},
		{name: "generate_responses_incomplete", text: "Once upon a time",
			finish: abi.FinishReason{Unified: abi.ReasonLength, Raw: "max_output_tokens"},
			usage:  abi.Usage{InputTokens: 12, OutputTokens: 4},
			kinds:  []abi.PartKind{abi.KindTextDelta}},
		{name: "generate_responses_refusal", wantErr: &wantErr{class: abi.ClassRefusal, typ: "refusal"}},
		{name: "generate_responses_failed", wantErr: &wantErr{class: abi.ClassServer, typ: "server_error", retryable: true}},
		{name: "rate_limit_429", wantErr: &wantErr{status: 429, class: abi.ClassRateLimit, typ: "requests", retryable: true, retryAfter: "2", retryMS: "1500"}},
		{name: "overloaded_503", wantErr: &wantErr{status: 503, class: abi.ClassOverloaded, typ: "server_error", retryable: true}},
		{name: "context_length_400", wantErr: &wantErr{status: 400, class: abi.ClassContextLength, typ: "invalid_request_error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := wiretest.ServeFile(t, wire(tt.name))
			resp, err := responsesModel(t, srv).Generate(context.Background(), request())
			require.Len(t, srv.Requests(), 1, "the SDK must not retry")
			if tt.wantErr != nil {
				require.Nil(t, resp)
				checkErr(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			var kinds []abi.PartKind
			var reasoning string
			for _, p := range resp.Content {
				kinds = append(kinds, p.Kind)
				if p.Kind == abi.KindReasoningDelta {
					reasoning += p.Delta
				}
				if p.Kind == abi.KindToolCall {
					require.Equal(t, respCall, p.ID)
					require.Equal(t, tt.tool, p.Tool)
				}
			}
			require.Equal(t, tt.kinds, kinds)
			require.Equal(t, tt.text, resp.Text())
			require.Equal(t, tt.reasoning, reasoning)
			require.Equal(t, tt.finish, resp.Finish)
			require.Equal(t, tt.usage, resp.Usage)
			require.Equal(t, respID, resp.Meta.ID)
			require.Equal(t, time.Unix(1756315696, 0).UTC(), resp.Meta.Timestamp)
			require.Equal(t, "req_5b3f0c9e2a7d41e8", resp.Headers.Get("x-request-id"))
		})
	}
}

// The driver request becomes a Responses API body: instructions, input
// items (messages, the assistant's function call, its output by call_id),
// function tools (not strict), max_output_tokens; seed and stop sequences,
// which the API lacks, come back as warnings instead of being sent.
func TestResponsesRequestTranslation(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("responses_text"))
	temp := 0.2
	seed := int64(7)
	req := &driver.Request{
		System: "Be brief.",
		Messages: []driver.Message{
			{Role: driver.RoleUser, Content: []driver.Content{{Text: "Weather in Paris?"}}},
			{Role: driver.RoleAssistant, Content: []driver.Content{{Text: "Checking."}, {ToolCallID: "call_1", ToolName: "get_weather", ToolInput: `{"location":"Paris"}`}}},
			{Role: driver.RoleTool, Content: []driver.Content{{ToolCallID: "call_1", ToolResult: `{"temp":21}`}}},
		},
		Tools:           []driver.Tool{{Name: "get_weather", Description: "Weather now", Schema: `{"type":"object","properties":{"location":{"type":"string"}}}`}},
		MaxOutputTokens: 256,
		Temperature:     &temp,
		Seed:            &seed,
		StopSequences:   []string{"END"},
		Headers:         http.Header{"X-Trace": {"abc"}},
		ProviderOptions: map[string]any{"openai": map[string]any{"store": false, "reasoning": map[string]any{"summary": "auto"}}},
	}
	st, err := responsesModel(t, srv).Stream(context.Background(), req)
	require.NoError(t, err)
	parts, err := wiretest.Collect(st, 100)
	require.NoError(t, err)
	require.Equal(t, []abi.Warning{
		{Type: "unsupported", Feature: "seed", Message: "the Responses API has no seed; it was not sent"},
		{Type: "unsupported", Feature: "stop", Message: "the Responses API has no stop sequences; they were not sent"},
	}, parts[0].Warnings)
	got := srv.Requests()[0]
	require.Equal(t, "/v1/responses", got.Path)
	require.Equal(t, "abc", got.Header.Get("X-Trace"))
	require.JSONEq(t, `{
		"model": "gpt-4o-mini",
		"stream": true,
		"instructions": "Be brief.",
		"max_output_tokens": 256,
		"temperature": 0.2,
		"store": false,
		"reasoning": {"summary": "auto"},
		"input": [
			{"role": "user", "content": "Weather in Paris?"},
			{"role": "assistant", "content": "Checking."},
			{"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"location\":\"Paris\"}"},
			{"type": "function_call_output", "call_id": "call_1", "output": "{\"temp\":21}"}
		],
		"tools": [{"type": "function", "name": "get_weather", "description": "Weather now", "strict": false,
			"parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}]
	}`, string(got.Body))
}

// WithRawChunks passes the SDK's Responses events through.
func TestResponsesRawChunks(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("responses_text"))
	st, err := responsesModel(t, srv, openai.WithRawChunks()).Stream(context.Background(), request())
	require.NoError(t, err)
	parts, err := wiretest.Collect(st, 1000)
	require.NoError(t, err)
	var types []string
	for _, p := range parts {
		if p.Kind == abi.KindRaw {
			ev, ok := p.Raw.(responses.ResponseStreamEventUnion)
			require.True(t, ok, "Raw is %T", p.Raw)
			types = append(types, ev.Type)
		}
	}
	require.Len(t, types, 17, "every event of the transcript")
	require.Equal(t, "response.created", types[0])
	require.Equal(t, "response.completed", types[len(types)-1])
	for _, p := range parts {
		if p.Kind == abi.KindTextDelta {
			require.Equal(t, respMsgID, p.ID, "a text block is its message item")
		}
	}
}

// A Responses stream exposes its response headers too.
func TestResponsesStreamHeader(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("responses_text"))
	st, err := responsesModel(t, srv).Stream(context.Background(), request())
	require.NoError(t, err)
	defer st.Close()
	h, ok := st.(interface{ Header() http.Header })
	require.True(t, ok)
	require.Equal(t, "req_5b3f0c9e2a7d41e8", h.Header().Get("x-request-id"))
}

// WithAzure's deployments path has no Responses API: the combination is
// refused at construction, naming the way that works.
func TestResponsesWithAzureRejected(t *testing.T) {
	_, err := openai.New("gpt-4.1", openai.WithResponsesAPI(), openai.WithAPIKey("k"),
		openai.WithAzure("https://example.openai.azure.com", "dep", "2025-03-01-preview"))
	require.ErrorContains(t, err, "/openai/v1/")
}
