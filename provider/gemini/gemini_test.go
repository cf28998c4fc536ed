package gemini_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/gemini"
	"github.com/retryhost/retryhost/provider/internal/conformance"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

func wire(name string) string {
	return filepath.Join("..", "..", "testdata", "wire", "gemini", name+".json")
}

func model(t *testing.T, srv *wiretest.Server, opts ...gemini.Option) *gemini.Model {
	t.Helper()
	opts = append([]gemini.Option{gemini.WithBaseURL(srv.URL), gemini.WithAPIKey("AIza-test"),
		gemini.WithHTTPClient(srv.Client())}, opts...)
	m, err := gemini.New("gemini-2.5-flash", opts...)
	require.NoError(t, err)
	return m
}

var scenarios = map[conformance.Scenario]string{
	conformance.Text:        "text",
	conformance.ToolCall:    "tool_call",
	conformance.Length:      "max_tokens",
	conformance.RateLimit:   "rate_limit_429",
	conformance.Overloaded:  "unavailable_503",
	conformance.ServerError: "internal_500",
	conformance.Auth:        "auth_403",
	conformance.Refusal:     "safety",
	conformance.Cut:         "cut",
	conformance.Truncated:   "truncated",
	conformance.StallMid:    "stall_mid",

	conformance.GenerateRefusal: "generate_safety",
}

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Suite{
		Provider: "gemini",
		Model: func(t *testing.T, s conformance.Scenario) (driver.Model, *wiretest.Server) {
			srv := wiretest.ServeFile(t, wire(scenarios[s]))
			return model(t, srv), srv
		},
		Text:       "Hello, world.",
		RetryAfter: 13 * time.Second,
	})
}

func stream(t *testing.T, name string) ([]abi.Part, error) {
	t.Helper()
	srv := wiretest.ServeFile(t, wire(name))
	st, err := model(t, srv).Stream(context.Background(), conformance.Request())
	if err != nil {
		return nil, err
	}
	return wiretest.Collect(st, 1000)
}

func TestStreamUsageMetadata(t *testing.T) {
	parts, err := stream(t, "text")
	require.NoError(t, err)
	require.Equal(t, "stream-start response-metadata text-start text-delta*2 text-end finish", wiretest.Kinds(parts))
	require.Equal(t, abi.Usage{InputTokens: 9, OutputTokens: 31, CacheReadTokens: 4, ReasoningTokens: 24}, wiretest.Finish(parts).Usage)
	require.Equal(t, "STOP", wiretest.Finish(parts).Reason.Raw)
	require.Equal(t, "gemini-2.5-flash", parts[1].Meta.ModelID)
}

func TestStreamThoughtsAreReasoning(t *testing.T) {
	parts, err := stream(t, "thinking")
	require.NoError(t, err)
	require.Equal(t, "Weighing the greeting.", wiretest.Text(parts, abi.KindReasoningDelta))
	require.Equal(t, "Hi.", wiretest.Text(parts, abi.KindTextDelta))
}

func TestStreamBlockedAnswersAreRefusals(t *testing.T) {
	for _, name := range []string{"safety", "recitation", "prompt_blocked"} {
		t.Run(name, func(t *testing.T) {
			_, err := stream(t, name)
			var pe *driver.ProviderError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, abi.ClassRefusal, pe.Class)
			require.False(t, pe.Retryable)
			var re *abi.RefusalError
			require.ErrorAs(t, err, &re)
		})
	}
}

func TestStreamSafetyAfterTextIsContentFilterFinish(t *testing.T) {
	parts, err := stream(t, "safety_after_text")
	require.NoError(t, err)
	f := wiretest.Finish(parts)
	require.Equal(t, abi.ReasonContentFilter, f.Reason.Unified)
	require.Equal(t, "SAFETY", f.Reason.Raw)
}

func TestStreamErrorObjectIsClassified(t *testing.T) {
	_, err := stream(t, "stream_error")
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, abi.ClassOverloaded, pe.Class)
	require.True(t, pe.Retryable)
}

func TestContextLengthError(t *testing.T) {
	_, err := stream(t, "context_length_400")
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, abi.ClassContextLength, pe.Class)
	require.Equal(t, 400, pe.Status)
	require.Equal(t, "INVALID_ARGUMENT", pe.Type)
	require.False(t, pe.Retryable)
	require.Contains(t, string(pe.Body), "exceeds the maximum number of tokens")
}

func TestRateLimitKeepsHeadersAndBody(t *testing.T) {
	_, err := stream(t, "rate_limit_429")
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "13", pe.Header.Get("Retry-After"), "RetryInfo's 12.4s, rounded up")
	require.Equal(t, "RESOURCE_EXHAUSTED", pe.Type)
	require.Contains(t, string(pe.Body), "google.rpc.RetryInfo")
}

func TestGenerate(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("generate_tool_call"))
	resp, err := model(t, srv).Generate(context.Background(), conformance.Request())
	require.NoError(t, err)
	require.Equal(t, "Checking.", resp.Text())
	require.Equal(t, abi.ReasonToolCalls, resp.Finish.Unified)
	require.Len(t, resp.Content, 2)
	require.Equal(t, "fc_1", resp.Content[1].ID)
	require.JSONEq(t, `{"city":"Paris"}`, resp.Content[1].Tool.Input)
	require.Equal(t, int64(9), resp.Usage.InputTokens)
	require.Equal(t, "application/json; charset=UTF-8", resp.Headers.Get("Content-Type"))

	srv = wiretest.ServeFile(t, wire("generate_safety"))
	_, err = model(t, srv).Generate(context.Background(), conformance.Request())
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, abi.ClassRefusal, pe.Class)
}

// capture answers every request with the text transcript and records it.
func capture(t *testing.T) (*httptest.Server, <-chan *http.Request, <-chan []byte) {
	t.Helper()
	tr, err := wiretest.Load(wire("text"))
	require.NoError(t, err)
	return wiretest.Capture(t, "text/event-stream", []byte(wiretest.SSE(tr)), false)
}

func TestRequestTranslation(t *testing.T) {
	srv, reqs, bodies := capture(t)
	m, err := gemini.New("gemini-2.5-flash", gemini.WithBaseURL(srv.URL), gemini.WithAPIKey("AIza-test"),
		gemini.WithHeader("X-Team", "search"))
	require.NoError(t, err)
	temp, topP, seed := 0.3, 0.9, int64(7)
	req := &driver.Request{
		System: "Be brief.",
		Messages: []driver.Message{
			{Role: driver.RoleUser, Content: []driver.Content{{Text: "Weather in Paris?"}}},
			{Role: driver.RoleAssistant, Content: []driver.Content{{ToolCallID: "call_1", ToolName: "get_weather", ToolInput: `{"city":"Paris"}`}}},
			{Role: driver.RoleTool, Content: []driver.Content{{ToolCallID: "call_1", ToolResult: `{"temp":21}`}}},
		},
		Tools:           []driver.Tool{{Name: "get_weather", Description: "Weather by city", Schema: `{"type":"object","properties":{"city":{"type":"string"}}}`}},
		MaxOutputTokens: 256, Temperature: &temp, TopP: &topP, Seed: &seed, StopSequences: []string{"END"},
		ProviderOptions: map[string]any{"gemini": map[string]any{"safetySettings": []any{map[string]any{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}}}},
	}
	st, err := m.Stream(context.Background(), req)
	require.NoError(t, err)
	_, err = wiretest.Collect(st, 100)
	require.NoError(t, err)
	r := <-reqs
	require.Equal(t, "/v1/models/gemini-2.5-flash:streamGenerateContent", r.URL.Path)
	require.Equal(t, "sse", r.URL.Query().Get("alt"))
	require.Equal(t, "AIza-test", r.Header.Get("x-goog-api-key"))
	require.Equal(t, "search", r.Header.Get("X-Team"))
	require.JSONEq(t, `{
	  "contents": [
	    {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
	    {"role": "model", "parts": [{"functionCall": {"id": "call_1", "name": "get_weather", "args": {"city": "Paris"}}}]},
	    {"role": "user", "parts": [{"functionResponse": {"id": "call_1", "name": "get_weather", "response": {"temp": 21}}}]}
	  ],
	  "systemInstruction": {"parts": [{"text": "Be brief."}], "role": "user"},
	  "generationConfig": {"maxOutputTokens": 256, "temperature": 0.3, "topP": 0.9, "seed": 7, "stopSequences": ["END"]},
	  "tools": [{"functionDeclarations": [{"name": "get_weather", "description": "Weather by city",
	    "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}]}],
	  "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]
	}`, string(<-bodies))
}

func TestVertexEndpoint(t *testing.T) {
	srv, reqs, _ := capture(t)
	m, err := gemini.New("gemini-2.5-flash", gemini.WithBaseURL(srv.URL), gemini.WithVertex("my-project", "europe-west4"),
		gemini.WithHTTPClient(srv.Client()))
	require.NoError(t, err)
	_, err = m.Generate(context.Background(), conformance.Request())
	require.Error(t, err) // the server streams; what matters is where the call went
	r := <-reqs
	require.Equal(t, "/v1beta1/projects/my-project/locations/europe-west4/publishers/google/models/gemini-2.5-flash:generateContent", r.URL.Path)
	require.Empty(t, r.Header.Get("x-goog-api-key"))
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, opts := range map[string][]gemini.Option{
		"no key":       nil,
		"bad base URL": {gemini.WithAPIKey("k"), gemini.WithBaseURL("localhost:1")},
		"bad header":   {gemini.WithAPIKey("k"), gemini.WithHeader("a b", "c")},
		"vertex":       {gemini.WithVertex("", "")},
	} {
		_, err := gemini.New("gemini-2.5-flash", opts...)
		require.Error(t, err, name)
	}
	_, err := gemini.New(" ", gemini.WithAPIKey("k"))
	require.Error(t, err)
}

// Up to MaxStopSequences stop sequences are sent; more (which the API
// refuses with a 400) are not sent at all, with a warning.
func TestStopSequencesOverTheLimitAreNotSent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		warned bool
	}{{"at the limit", gemini.MaxStopSequences, false}, {"over it", gemini.MaxStopSequences + 1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _, bodies := capture(t)
			m, err := gemini.New("gemini-2.5-flash", gemini.WithBaseURL(srv.URL), gemini.WithAPIKey("AIza-test"))
			require.NoError(t, err)
			stops := make([]string, tc.n)
			for i := range stops {
				stops[i] = fmt.Sprintf("S%d", i)
			}
			st, err := m.Stream(context.Background(), &driver.Request{StopSequences: stops,
				Messages: []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: "hi"}}}}})
			require.NoError(t, err)
			parts, err := wiretest.Collect(st, 100)
			require.NoError(t, err)
			var body struct {
				GenerationConfig struct {
					StopSequences []string `json:"stopSequences"`
				} `json:"generationConfig"`
			}
			require.NoError(t, json.Unmarshal(<-bodies, &body))
			if tc.warned {
				require.Empty(t, body.GenerationConfig.StopSequences)
				require.Equal(t, []abi.Warning{{Type: "unsupported", Feature: "stop",
					Message: "6 stop sequences are more than the Gemini API's 5; none were sent"}}, parts[0].Warnings)
			} else {
				require.Equal(t, stops, body.GenerationConfig.StopSequences)
				require.Empty(t, parts[0].Warnings)
			}
		})
	}
}
