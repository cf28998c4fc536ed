package bedrock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/bedrock"
	"github.com/retryhost/retryhost/provider/internal/conformance"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

func wire(name string) string {
	return filepath.Join("..", "..", "testdata", "wire", "bedrock", name+".json")
}

// frame renders a transcript event as Bedrock sends it: one AWS event
// stream message, an exception message when the event is named after one
// ("throttlingException"), an event message otherwise.
func frame(e *wiretest.Event, data []byte) ([]byte, error) {
	var msg eventstream.Message
	if strings.HasSuffix(e.Event, "Exception") {
		msg.Headers.Set(":message-type", eventstream.StringValue("exception"))
		msg.Headers.Set(":exception-type", eventstream.StringValue(e.Event))
	} else {
		msg.Headers.Set(":event-type", eventstream.StringValue(e.Event))
		msg.Headers.Set(":message-type", eventstream.StringValue("event"))
	}
	msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	msg.Payload = data
	var b bytes.Buffer
	err := eventstream.NewEncoder().Encode(&b, msg)
	return b.Bytes(), err
}

func serve(t *testing.T, name string) *wiretest.Server {
	t.Helper()
	return wiretest.ServeFileFramed(t, wire(name), frame)
}

var creds = credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "")

// model is a model of the loopback server srv, over the server's own
// client (whose idle connections go with the server).
func model(t *testing.T, srv *httptest.Server, opts ...bedrock.Option) *bedrock.Model {
	t.Helper()
	opts = append([]bedrock.Option{bedrock.WithBaseURL(srv.URL), bedrock.WithRegion("us-east-1"),
		bedrock.WithCredentials(creds), bedrock.WithHTTPClient(srv.Client())}, opts...)
	m, err := bedrock.New("anthropic.claude-3-5-haiku-20241022-v1:0", opts...)
	require.NoError(t, err)
	return m
}

var scenarios = map[conformance.Scenario]string{
	conformance.Text:        "text",
	conformance.ToolCall:    "tool_call",
	conformance.Length:      "max_tokens",
	conformance.RateLimit:   "throttling_retry_after_429",
	conformance.Overloaded:  "service_unavailable_503",
	conformance.ServerError: "internal_500",
	conformance.Auth:        "access_denied_403",
	conformance.Refusal:     "content_filtered",
	conformance.Cut:         "cut",
	conformance.Truncated:   "truncated",
	conformance.StallMid:    "stall_mid",

	conformance.GenerateRefusal: "generate_guardrail",
}

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Suite{
		Provider: "bedrock",
		Model: func(t *testing.T, s conformance.Scenario) (driver.Model, *wiretest.Server) {
			srv := serve(t, scenarios[s])
			return model(t, srv.Server), srv
		},
		Text:       "Hello, world.",
		RetryAfter: 3 * time.Second,
	})
}

func stream(t *testing.T, name string) ([]abi.Part, error) {
	t.Helper()
	srv := serve(t, name)
	st, err := model(t, srv.Server).Stream(context.Background(), conformance.Request())
	if err != nil {
		return nil, err
	}
	return wiretest.Collect(st, 1000)
}

func TestStreamUsageAndFinish(t *testing.T) {
	parts, err := stream(t, "text")
	require.NoError(t, err)
	require.Equal(t, "stream-start text-start text-delta*2 text-end finish", wiretest.Kinds(parts))
	f := wiretest.Finish(parts)
	require.Equal(t, abi.Usage{InputTokens: 17, OutputTokens: 7, CacheReadTokens: 4, CacheWriteTokens: 2}, f.Usage)
	require.Equal(t, "end_turn", f.Reason.Raw)
}

func TestStreamToolCall(t *testing.T) {
	parts, err := stream(t, "tool_call")
	require.NoError(t, err)
	require.Equal(t, "stream-start text-start text-delta text-end tool-input-start tool-input-delta*2 tool-input-end tool-call finish", wiretest.Kinds(parts))
	call := parts[len(parts)-2]
	require.Equal(t, "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", call.ID)
	require.JSONEq(t, `{"city":"Paris"}`, call.Tool.Input)
}

func TestStreamReasoning(t *testing.T) {
	parts, err := stream(t, "reasoning")
	require.NoError(t, err)
	require.Equal(t, "Weighing the greeting.", wiretest.Text(parts, abi.KindReasoningDelta))
	require.Equal(t, "Hi.", wiretest.Text(parts, abi.KindTextDelta))
	require.Equal(t, "stream-start reasoning-start reasoning-delta reasoning-end text-start text-delta text-end finish", wiretest.Kinds(parts))
}

func TestStreamBlockedBeforeContentIsRefusal(t *testing.T) {
	for _, name := range []string{"content_filtered", "guardrail_no_content"} {
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

func TestStreamGuardrailAfterTextIsContentFilterFinish(t *testing.T) {
	parts, err := stream(t, "guardrail_after_text")
	require.NoError(t, err)
	f := wiretest.Finish(parts)
	require.Equal(t, abi.ReasonContentFilter, f.Reason.Unified)
	require.Equal(t, "guardrail_intervened", f.Reason.Raw)
}

func TestStreamExceptionEventsAreClassified(t *testing.T) {
	for name, want := range map[string]abi.ErrorClass{
		"throttling_event":         abi.ClassRateLimit,
		"model_stream_error_event": abi.ClassServer,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := stream(t, name)
			var pe *driver.ProviderError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, want, pe.Class)
			require.True(t, pe.Retryable)
			require.Zero(t, pe.Status)
			require.NotEmpty(t, pe.Message)
		})
	}
}

func TestHTTPErrorsAreClassified(t *testing.T) {
	for name, want := range map[string]struct {
		class     abi.ErrorClass
		retryable bool
		typ       string
	}{
		"throttling_429":          {abi.ClassRateLimit, true, "ThrottlingException"},
		"model_not_ready_429":     {abi.ClassOverloaded, true, "ModelNotReadyException"},
		"service_unavailable_503": {abi.ClassOverloaded, true, "ServiceUnavailableException"},
		"context_length_400":      {abi.ClassContextLength, false, "ValidationException"},
		"validation_400":          {abi.ClassClient, false, "ValidationException"},
		"access_denied_403":       {abi.ClassAuth, false, "AccessDeniedException"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := stream(t, name)
			var pe *driver.ProviderError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, want.class, pe.Class)
			require.Equal(t, want.retryable, pe.Retryable)
			require.Equal(t, want.typ, pe.Type)
			require.Equal(t, "bedrock", pe.Provider)
			require.NotEmpty(t, pe.Header.Get("X-Amzn-Requestid"))
			require.Contains(t, string(pe.Body), `"message"`)
		})
	}
}

func TestThrottlingWithoutRetryAfterAsksNoWait(t *testing.T) {
	_, err := stream(t, "throttling_429")
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	_, ok := driver.RetryAfter(pe.Header, time.Now(), time.Hour)
	require.False(t, ok, "the adapter invents no wait: the driver's backoff decides")
}

func TestGenerate(t *testing.T) {
	srv := serve(t, "generate_tool_call")
	resp, err := model(t, srv.Server).Generate(context.Background(), conformance.Request())
	require.NoError(t, err)
	require.Equal(t, "Checking.", resp.Text())
	require.Equal(t, abi.ReasonToolCalls, resp.Finish.Unified)
	require.Len(t, resp.Content, 2)
	require.Equal(t, "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", resp.Content[1].ID)
	require.JSONEq(t, `{"city":"Paris"}`, resp.Content[1].Tool.Input)
	require.Equal(t, int64(402), resp.Usage.InputTokens)
	require.Equal(t, "5e2a9c4d-7b1f-4d8e-a6c3-9f0e1d2b3a4c", resp.Meta.ID)
	require.Equal(t, "/model/anthropic.claude-3-5-haiku-20241022-v1:0/converse", srv.Requests()[0].Path)
}

// capture answers every request with the text transcript and records it.
func capture(t *testing.T, tls bool) (*httptest.Server, <-chan *http.Request, <-chan []byte) {
	t.Helper()
	tr, err := wiretest.Load(wire("text"))
	require.NoError(t, err)
	var body bytes.Buffer
	for i := range tr.Events {
		var data bytes.Buffer
		require.NoError(t, json.Compact(&data, tr.Events[i].Data))
		b, err := frame(&tr.Events[i], data.Bytes())
		require.NoError(t, err)
		body.Write(b)
	}
	return wiretest.Capture(t, "application/vnd.amazon.eventstream", body.Bytes(), tls)
}

func TestRequestTranslation(t *testing.T) {
	srv, reqs, bodies := capture(t, false)
	m := model(t, srv, bedrock.WithHeader("X-Team", "search"), bedrock.WithParam("top_k", 40),
		bedrock.WithGuardrail("gr-abc123", "2"))
	temp, topP := 0.5, 0.9
	req := &driver.Request{
		System: "Be brief.",
		Messages: []driver.Message{
			{Role: driver.RoleUser, Content: []driver.Content{{Text: "Weather in Paris?"}}},
			{Role: driver.RoleAssistant, Content: []driver.Content{{ToolCallID: "call_1", ToolName: "get_weather", ToolInput: `{"city":"Paris"}`}}},
			{Role: driver.RoleTool, Content: []driver.Content{{ToolCallID: "call_1", ToolResult: `{"temp":21}`}}},
			{Role: driver.RoleUser, Content: []driver.Content{{Text: "And tomorrow?"}}},
		},
		Tools:           []driver.Tool{{Name: "get_weather", Description: "Weather by city", Schema: `{"type":"object","properties":{"city":{"type":"string"}}}`}},
		MaxOutputTokens: 256, Temperature: &temp, TopP: &topP, StopSequences: []string{"END"},
		ProviderOptions: map[string]any{"bedrock": map[string]any{"top_k": 5, "anthropic_beta": []any{"token-efficient-tools-2025-02-19"}}},
	}
	st, err := m.Stream(context.Background(), req)
	require.NoError(t, err)
	_, err = wiretest.Collect(st, 100)
	require.NoError(t, err)
	r := <-reqs
	require.Equal(t, "/model/anthropic.claude-3-5-haiku-20241022-v1:0/converse-stream", r.URL.Path)
	require.Equal(t, "search", r.Header.Get("X-Team"))
	require.True(t, strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"), r.Header.Get("Authorization"))
	require.Contains(t, r.Header.Get("Authorization"), "/us-east-1/bedrock/aws4_request")
	require.JSONEq(t, `{
	  "messages": [
	    {"role": "user", "content": [{"text": "Weather in Paris?"}]},
	    {"role": "assistant", "content": [{"toolUse": {"toolUseId": "call_1", "name": "get_weather", "input": {"city": "Paris"}}}]},
	    {"role": "user", "content": [{"toolResult": {"toolUseId": "call_1", "content": [{"json": {"temp": 21}}]}}, {"text": "And tomorrow?"}]}
	  ],
	  "system": [{"text": "Be brief."}],
	  "inferenceConfig": {"maxTokens": 256, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]},
	  "toolConfig": {"tools": [{"toolSpec": {"name": "get_weather", "description": "Weather by city",
	    "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}}}}]},
	  "additionalModelRequestFields": {"top_k": 40, "anthropic_beta": ["token-efficient-tools-2025-02-19"]},
	  "guardrailConfig": {"guardrailIdentifier": "gr-abc123", "guardrailVersion": "2"}
	}`, string(<-bodies))
}

func TestAPIKeyIsABearerToken(t *testing.T) {
	srv, reqs, _ := capture(t, true) // the SDK sends a bearer token over HTTPS only
	m, err := bedrock.New("amazon.nova-lite-v1:0", bedrock.WithBaseURL(srv.URL), bedrock.WithRegion("eu-west-1"),
		bedrock.WithAPIKey("ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl"), bedrock.WithHTTPClient(srv.Client()))
	require.NoError(t, err)
	st, err := m.Stream(context.Background(), conformance.Request())
	require.NoError(t, err)
	_, err = wiretest.Collect(st, 100)
	require.NoError(t, err)
	require.Equal(t, "Bearer ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl", (<-reqs).Header.Get("Authorization"))
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	_, err := bedrock.New("amazon.nova-lite-v1:0")
	require.ErrorIs(t, err, bedrock.ErrNoRegion)
	_, err = bedrock.New("amazon.nova-lite-v1:0", bedrock.WithCredentials(creds))
	require.ErrorIs(t, err, bedrock.ErrNoRegion)
	for name, opts := range map[string][]bedrock.Option{
		"bad base URL": {bedrock.WithBaseURL("localhost:1")},
		"bad header":   {bedrock.WithHeader("a b", "c")},
		"guardrail":    {bedrock.WithGuardrail("gr-1", "")},
		"key":          {bedrock.WithKey(" ")},
	} {
		_, err := bedrock.New("amazon.nova-lite-v1:0", append(opts, bedrock.WithRegion("us-east-1"), bedrock.WithCredentials(creds))...)
		require.Error(t, err, name)
	}
	_, err = bedrock.New(" ", bedrock.WithRegion("us-east-1"), bedrock.WithCredentials(creds))
	require.Error(t, err)
}

func TestRegionFromTheEnvironment(t *testing.T) {
	t.Setenv("AWS_REGION", "ap-northeast-1")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	m, err := bedrock.New("amazon.nova-lite-v1:0")
	require.NoError(t, err)
	require.Contains(t, m.RateLimitScope(), "https://bedrock-runtime.ap-northeast-1.amazonaws.com")
}

// A model declared as "*" calls the model each request names, and refuses
// a request that names none.
func TestAnyModelSendsTheRequestsModel(t *testing.T) {
	srv := serve(t, "text")
	m, err := bedrock.New(driver.AnyModelID, bedrock.WithBaseURL(srv.URL), bedrock.WithRegion("us-east-1"),
		bedrock.WithCredentials(creds), bedrock.WithHTTPClient(srv.Client()))
	require.NoError(t, err)
	req := conformance.Request()
	req.ModelID = "us.amazon.nova-pro-v1:0"
	st, err := m.Stream(context.Background(), req)
	require.NoError(t, err)
	_, err = wiretest.Collect(st, 100)
	require.NoError(t, err)
	require.Equal(t, "/model/us.amazon.nova-pro-v1:0/converse-stream", srv.Requests()[0].Path)

	_, err = m.Stream(context.Background(), conformance.Request())
	require.ErrorContains(t, err, "names no model")
}

// sent streams req through a model of id (or the default Claude one) and
// returns the body the loopback endpoint got and the stream's warnings.
func sent(t *testing.T, id string, req *driver.Request) (map[string]any, []abi.Warning) {
	t.Helper()
	srv, _, bodies := capture(t, false)
	if id == "" {
		id = "anthropic.claude-3-5-haiku-20241022-v1:0"
	}
	m, err := bedrock.New(id, bedrock.WithBaseURL(srv.URL), bedrock.WithRegion("us-east-1"),
		bedrock.WithCredentials(creds), bedrock.WithHTTPClient(srv.Client()))
	require.NoError(t, err)
	st, err := m.Stream(context.Background(), req)
	require.NoError(t, err)
	parts, err := wiretest.Collect(st, 100)
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, json.Unmarshal(<-bodies, &body))
	return body, parts[0].Warnings
}

// Options in a request's ProviderOptions entry reach Converse in its own
// fields: the tool choice in toolConfig, a JSON schema in outputConfig, a
// Claude model's thinking budget and top_k in additionalModelRequestFields.
// What Converse would refuse is not sent, with a warning naming it.
func TestOptionsTranslation(t *testing.T) {
	tools := []driver.Tool{{Name: "get_weather", Schema: `{"type":"object"}`}}
	hot, schema := 1.5, map[string]any{"type": "object", "required": []any{"city"}}
	for _, tc := range []struct {
		name     string
		id       string
		req      driver.Request
		want     map[string]any // top-level body fields
		warnings []string       // features warned about
	}{
		{name: "tool choice any", req: driver.Request{Tools: tools, ProviderOptions: map[string]any{"bedrock": bedrock.Options{ToolChoice: "any"}}},
			want: map[string]any{"toolConfig": map[string]any{"toolChoice": map[string]any{"any": map[string]any{}},
				"tools": []any{map[string]any{"toolSpec": map[string]any{"name": "get_weather", "inputSchema": map[string]any{"json": map[string]any{"type": "object"}}}}}}}},
		{name: "tool choice of one tool", req: driver.Request{Tools: tools, ProviderOptions: map[string]any{"bedrock": &bedrock.Options{ToolChoice: "tool", ToolName: "get_weather"}}},
			want: map[string]any{"toolConfig": map[string]any{"toolChoice": map[string]any{"tool": map[string]any{"name": "get_weather"}},
				"tools": []any{map[string]any{"toolSpec": map[string]any{"name": "get_weather", "inputSchema": map[string]any{"json": map[string]any{"type": "object"}}}}}}}},
		{name: "JSON schema", req: driver.Request{ProviderOptions: map[string]any{"bedrock": bedrock.Options{JSONSchema: schema, SchemaName: "city"}}},
			want: map[string]any{"outputConfig": map[string]any{"textFormat": map[string]any{"type": "json_schema",
				"structure": map[string]any{"jsonSchema": map[string]any{"name": "city", "schema": `{"required":["city"],"type":"object"}`}}}}}},
		{name: "thinking budget with room for the answer", req: driver.Request{ProviderOptions: map[string]any{"bedrock": bedrock.Options{ThinkingBudget: 2048, TopK: 20}}},
			want: map[string]any{"additionalModelRequestFields": map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 2048.0}, "top_k": 20.0},
				"inferenceConfig": map[string]any{"maxTokens": 2048.0 + 4096}}},
		{name: "thinking budget within the request's max tokens", req: driver.Request{MaxOutputTokens: 3000, ProviderOptions: map[string]any{"bedrock": bedrock.Options{ThinkingBudget: 1500}}},
			want: map[string]any{"additionalModelRequestFields": map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 1500.0}},
				"inferenceConfig": map[string]any{"maxTokens": 3000.0}}},
		{name: "no thinking or top_k for a model that is not Claude", id: "meta.llama3-70b-instruct-v1:0",
			req:      driver.Request{ProviderOptions: map[string]any{"bedrock": bedrock.Options{ThinkingBudget: 2048, TopK: 20, Fields: map[string]any{"x": 1}}}},
			want:     map[string]any{"additionalModelRequestFields": map[string]any{"x": 1.0}},
			warnings: []string{"thinking", "top_k"}},
		{name: "temperature above 1 sent as 1", req: driver.Request{Temperature: &hot},
			want: map[string]any{"inferenceConfig": map[string]any{"temperature": 1.0}}, warnings: []string{"temperature"}},
		{name: "stop sequences at the limit", req: driver.Request{StopSequences: stops(bedrock.MaxStopSequences)},
			want: map[string]any{"inferenceConfig": map[string]any{"stopSequences": anys(stops(bedrock.MaxStopSequences))}}},
		{name: "more stop sequences than Converse takes: none", req: driver.Request{StopSequences: stops(bedrock.MaxStopSequences + 1)},
			want: map[string]any{}, warnings: []string{"stop"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Messages = conformance.Request().Messages
			body, warnings := sent(t, tc.id, &req)
			for _, k := range []string{"modelId", "messages"} {
				delete(body, k)
			}
			require.Equal(t, tc.want, body)
			var features []string
			for _, w := range warnings {
				features = append(features, w.Feature)
			}
			require.Equal(t, tc.warnings, features)
		})
	}
}

func stops(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("stop-%d", i)
	}
	return out
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func TestOptionsOfTheWrongTypeAreAnError(t *testing.T) {
	srv, _, _ := capture(t, false)
	_, err := model(t, srv).Stream(context.Background(), &driver.Request{Messages: conformance.Request().Messages,
		ProviderOptions: map[string]any{"bedrock": "top_k=5"}})
	require.ErrorContains(t, err, "want map[string]any or bedrock.Options")
	_, err = model(t, srv).Stream(context.Background(), &driver.Request{Messages: conformance.Request().Messages,
		Tools: []driver.Tool{{Name: "f"}}, ProviderOptions: map[string]any{"bedrock": bedrock.Options{ToolChoice: "tool"}}})
	require.ErrorContains(t, err, "names no tool")
}
