package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/anthropic"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

func wire(name string) string {
	return filepath.Join("..", "..", "testdata", "wire", "anthropic", name+".json")
}

func model(t *testing.T, srv *wiretest.Server, opts ...anthropic.Option) *anthropic.Model {
	t.Helper()
	opts = append([]anthropic.Option{
		anthropic.WithBaseURL(srv.URL),
		anthropic.WithAPIKey("sk-ant-test"),
		anthropic.WithHTTPClient(srv.Client()),
	}, opts...)
	m, err := anthropic.New("claude-sonnet-4-5", opts...)
	require.NoError(t, err)
	return m
}

func request() *driver.Request {
	return &driver.Request{Messages: []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: "Hi"}}}}}
}

type wantErr struct {
	status     int
	class      abi.ErrorClass
	typ        string
	retryable  bool
	retryAfter string
}

func checkErr(t *testing.T, err error, w *wantErr) {
	t.Helper()
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "anthropic", pe.Provider)
	require.Equal(t, w.status, pe.Status, "status")
	require.Equal(t, w.class, pe.Class, "class %s", pe.Class)
	require.Equal(t, w.typ, pe.Type, "type")
	require.Equal(t, w.retryable, pe.Retryable, "retryable")
	require.NotEmpty(t, pe.Message)
	if w.status != 0 {
		require.Equal(t, w.retryAfter, pe.Header.Get("Retry-After"))
		require.NotEmpty(t, pe.Body)
	}
}

var httpErrors = map[string]wantErr{
	"rate_limit_429":      {status: 429, class: abi.ClassRateLimit, typ: "rate_limit_error", retryable: true, retryAfter: "7"},
	"server_error_500":    {status: 500, class: abi.ClassServer, typ: "api_error", retryable: true},
	"overloaded_529":      {status: 529, class: abi.ClassOverloaded, typ: "overloaded_error", retryable: true},
	"prompt_too_long_400": {status: 400, class: abi.ClassContextLength, typ: "invalid_request_error"},
	"auth_401":            {status: 401, class: abi.ClassAuth, typ: "authentication_error"},
}

func TestStream(t *testing.T) {
	type streamCase struct {
		name      string
		kinds     string
		text      string
		reasoning string
		finish    abi.FinishReason
		usage     abi.Usage
		tool      *abi.ToolInfo
		openErr   *wantErr
		recvErr   *wantErr
	}
	stop := abi.FinishReason{Unified: abi.ReasonStop, Raw: "end_turn"}
	tests := []streamCase{
		{
			name:   "text",
			kinds:  "stream-start response-metadata text-start text-delta*3 text-end finish",
			text:   "Hello! How can I help you today?",
			finish: stop,
			usage:  abi.Usage{InputTokens: 135, OutputTokens: 12, CacheReadTokens: 100, CacheWriteTokens: 10},
		},
		{
			name:   "refusal_text",
			kinds:  "stream-start response-metadata text-start text-delta*3 text-end finish",
			text:   "I'm sorry, but I can't help with that.",
			finish: stop,
			usage:  abi.Usage{InputTokens: 18, OutputTokens: 11},
		},
		{
			name:   "max_tokens",
			kinds:  "stream-start response-metadata text-start text-delta*2 text-end finish",
			text:   "Once upon a time",
			finish: abi.FinishReason{Unified: abi.ReasonLength, Raw: "max_tokens"},
			usage:  abi.Usage{InputTokens: 12, OutputTokens: 4},
		},
		{
			name:      "thinking",
			kinds:     "stream-start response-metadata reasoning-start reasoning-delta*2 reasoning-end text-start text-delta text-end finish",
			text:      "Hi there!",
			reasoning: "The user greets me. Answer briefly.",
			finish:    stop,
			usage:     abi.Usage{InputTokens: 40, OutputTokens: 30, ReasoningTokens: 20},
		},
		{
			name:   "tool_use",
			kinds:  "stream-start response-metadata text-start text-delta text-end tool-input-start tool-input-delta*3 tool-input-end tool-call finish",
			text:   "Okay, let's check the weather.",
			finish: abi.FinishReason{Unified: abi.ReasonToolCalls, Raw: "tool_use"},
			usage:  abi.Usage{InputTokens: 472, OutputTokens: 89},
			tool:   &abi.ToolInfo{Name: "get_weather", Input: `{"location": "San Francisco, CA"}`},
		},
		{
			name:   "refusal_stop_after_text",
			kinds:  "stream-start response-metadata text-start text-delta text-end finish",
			text:   "Sure, the first step",
			finish: abi.FinishReason{Unified: abi.ReasonRefusal, Raw: "refusal"},
			usage:  abi.Usage{InputTokens: 30, OutputTokens: 5},
		},
		{name: "refusal_stop", kinds: "stream-start response-metadata", recvErr: &wantErr{class: abi.ClassRefusal, typ: "refusal"}},
		// An empty block is not content; the refusal
		// after it is still an error the driver can fail over on.
		{name: "refusal_stop_after_empty_text", kinds: "stream-start response-metadata text-start text-end",
			recvErr: &wantErr{class: abi.ClassRefusal, typ: "refusal"}},
		{name: "refusal_stop_after_empty_thinking", kinds: "stream-start response-metadata reasoning-start reasoning-end",
			recvErr: &wantErr{class: abi.ClassRefusal, typ: "refusal"}},
		{
			name:    "overloaded_event",
			kinds:   "stream-start response-metadata text-start text-delta",
			text:    "Hello",
			recvErr: &wantErr{class: abi.ClassOverloaded, typ: "overloaded_error", retryable: true},
		},
		{
			name:    "overloaded_event_first",
			kinds:   "stream-start response-metadata",
			recvErr: &wantErr{class: abi.ClassOverloaded, typ: "overloaded_error", retryable: true},
		},
		{
			name:    "api_error_event",
			kinds:   "stream-start response-metadata",
			recvErr: &wantErr{class: abi.ClassServer, typ: "api_error", retryable: true},
		},
		// An error event that says nothing is a
		// retryable server fault, not an unclassified error.
		{
			name:    "error_event_no_data",
			kinds:   "stream-start response-metadata",
			recvErr: &wantErr{class: abi.ClassServer, retryable: true},
		},
		{
			name:    "error_event_not_json",
			kinds:   "stream-start response-metadata",
			recvErr: &wantErr{class: abi.ClassServer, retryable: true},
		},
		{
			name:    "cut",
			kinds:   "stream-start response-metadata text-start text-delta*2",
			text:    "The answer",
			recvErr: &wantErr{class: abi.ClassNetwork, retryable: true},
		},
		{
			name:    "truncated",
			kinds:   "stream-start response-metadata text-start text-delta*2",
			text:    "The answer",
			recvErr: &wantErr{class: abi.ClassNetwork, retryable: true},
		},
	}
	for name, w := range httpErrors {
		tests = append(tests, streamCase{name: name, openErr: &w})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := wiretest.ServeFile(t, wire(tt.name))
			st, err := model(t, srv).Stream(context.Background(), request())
			if tt.openErr != nil {
				require.Nil(t, st)
				checkErr(t, err, tt.openErr)
				require.Len(t, srv.Requests(), 1, "the SDK must not retry")
				return
			}
			require.NoError(t, err)
			parts, err := wiretest.Collect(st, 1000)
			require.Equal(t, tt.kinds, wiretest.Kinds(parts))
			require.Equal(t, tt.text, wiretest.Text(parts, abi.KindTextDelta))
			require.Equal(t, tt.reasoning, wiretest.Text(parts, abi.KindReasoningDelta))
			if tt.recvErr != nil {
				checkErr(t, err, tt.recvErr)
				require.Nil(t, wiretest.Finish(parts))
				return
			}
			require.NoError(t, err)
			f := wiretest.Finish(parts)
			require.NotNil(t, f)
			require.Equal(t, tt.finish, f.Reason)
			require.Equal(t, tt.usage, f.Usage)
			require.Equal(t, "msg_01XFDUDYJgAACzvnptvVoYEL", parts[1].Meta.ID)
			require.Equal(t, "claude-sonnet-4-5-20250929", parts[1].Meta.ModelID)
			if tt.tool != nil {
				var call *abi.Part
				for i := range parts {
					if parts[i].Kind == abi.KindToolCall {
						call = &parts[i]
					}
				}
				require.NotNil(t, call)
				require.Equal(t, "toolu_01T1x1fJ34qAmk2tNTrN7Up6", call.ID)
				require.Equal(t, tt.tool, call.Tool)
				require.Equal(t, tt.tool.Input, wiretest.Text(parts, abi.KindToolInputDelta))
			}
		})
	}
}

func TestStreamRefusalError(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("refusal_stop"))
	st, err := model(t, srv).Stream(context.Background(), request())
	require.NoError(t, err)
	_, err = wiretest.Collect(st, 100)
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "This request was declined by a safety classifier.", pe.Message)
	var re *abi.RefusalError
	require.ErrorAs(t, err, &re)
}

func TestGenerate(t *testing.T) {
	type genCase struct {
		name    string
		text    string
		finish  abi.FinishReason
		usage   abi.Usage
		tool    *abi.ToolInfo
		wantErr *wantErr
	}
	tests := []genCase{
		{name: "generate_text", text: "Hello! How can I help you today?",
			finish: abi.FinishReason{Unified: abi.ReasonStop, Raw: "end_turn"}, usage: abi.Usage{InputTokens: 25, OutputTokens: 12}},
		{name: "generate_max_tokens", text: "Once upon a time",
			finish: abi.FinishReason{Unified: abi.ReasonLength, Raw: "max_tokens"}, usage: abi.Usage{InputTokens: 12, OutputTokens: 4}},
		{name: "generate_tool_use", text: "Okay, let's check the weather.",
			finish: abi.FinishReason{Unified: abi.ReasonToolCalls, Raw: "tool_use"}, usage: abi.Usage{InputTokens: 472, OutputTokens: 89},
			tool: &abi.ToolInfo{Name: "get_weather", Input: `{"location":"San Francisco, CA"}`}},
		{name: "generate_refusal_stop", wantErr: &wantErr{class: abi.ClassRefusal, typ: "refusal"}},
		{name: "generate_refusal_after_empty_blocks", wantErr: &wantErr{class: abi.ClassRefusal, typ: "refusal"}},
	}
	for name, w := range httpErrors {
		tests = append(tests, genCase{name: name, wantErr: &w})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := wiretest.ServeFile(t, wire(tt.name))
			resp, err := model(t, srv).Generate(context.Background(), request())
			require.Len(t, srv.Requests(), 1, "the SDK must not retry")
			if tt.wantErr != nil {
				require.Nil(t, resp)
				checkErr(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.text, resp.Text())
			require.Equal(t, tt.finish, resp.Finish)
			require.Equal(t, tt.usage, resp.Usage)
			require.Equal(t, "msg_01XFDUDYJgAACzvnptvVoYEL", resp.Meta.ID)
			require.Equal(t, "req_011CSHoEeqs5C35K2UUqR7Fy", resp.Headers.Get("request-id"))
			if tt.tool != nil {
				last := resp.Content[len(resp.Content)-1]
				require.Equal(t, abi.KindToolCall, last.Kind)
				require.Equal(t, "toolu_01T1x1fJ34qAmk2tNTrN7Up6", last.ID)
				require.Equal(t, tt.tool, last.Tool)
			}
		})
	}
}

func TestStreamCancelClosesConnection(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("stall_mid"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := model(t, srv).Stream(ctx, request())
	require.NoError(t, err)
	defer st.Close()
	for {
		p, err := st.Recv()
		require.NoError(t, err)
		if p.Kind == abi.KindTextDelta && p.Delta == " answer" {
			break
		}
	}
	cancel()
	start := time.Now()
	_, err = st.Recv()
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 10*time.Second, "Recv hung")
	res, ok := srv.Wait(10 * time.Second)
	require.True(t, ok, "the server never saw the request end")
	require.True(t, res.ClientGone, "the client must close the connection")
	require.False(t, res.Finished)
}

func TestStreamCloseUnblocksRecv(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("stall_mid"))
	st, err := model(t, srv).Stream(context.Background(), request())
	require.NoError(t, err)
	for i := 0; i < 5; i++ { // stream-start … the two text deltas
		_, err := st.Recv()
		require.NoError(t, err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := st.Recv()
		errc <- err
	}()
	require.NoError(t, st.Close())
	select {
	case err := <-errc:
		require.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Recv did not return after Close")
	}
	res, ok := srv.Wait(10 * time.Second)
	require.True(t, ok)
	require.True(t, res.ClientGone)
}

func TestStreamStall(t *testing.T) {
	for _, name := range []string{"stall_before_headers", "stall_first_byte", "stall_mid"} {
		t.Run(name, func(t *testing.T) {
			srv := wiretest.ServeFile(t, wire(name))
			cause := errors.New("first-content deadline")
			ctx, cancel := context.WithTimeoutCause(context.Background(), 100*time.Millisecond, cause)
			defer cancel()
			start := time.Now()
			st, err := model(t, srv).Stream(ctx, request())
			if name == "stall_before_headers" {
				require.Nil(t, st)
			} else {
				require.NoError(t, err)
				_, err = wiretest.Collect(st, 100)
			}
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.ErrorIs(t, err, cause)
			require.Less(t, time.Since(start), 10*time.Second, "did not return")
			res, ok := srv.Wait(10 * time.Second)
			require.True(t, ok)
			require.True(t, res.ClientGone)
		})
	}
}

func TestRequestTranslation(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("text"))
	temp := 0.2
	seed := int64(7)
	req := &driver.Request{
		System: "Be brief.",
		Messages: []driver.Message{
			{Role: driver.RoleUser, Content: []driver.Content{{Text: "Weather in Paris?"}}},
			{Role: driver.RoleAssistant, Content: []driver.Content{{Text: "Checking."}, {ToolCallID: "toolu_1", ToolName: "get_weather", ToolInput: `{"location":"Paris"}`}}},
			{Role: driver.RoleTool, Content: []driver.Content{{ToolCallID: "toolu_1", ToolResult: `{"temp":21}`}}},
		},
		Tools: []driver.Tool{{Name: "get_weather", Description: "Weather now",
			Schema: `{"type":"object","properties":{"location":{"type":"string"}},"required":["location"],"additionalProperties":false}`}},
		Temperature:     &temp,
		Seed:            &seed,
		StopSequences:   []string{"END"},
		Headers:         map[string][]string{"X-Trace": {"abc"}},
		ProviderOptions: map[string]any{"anthropic": map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 1024}}},
	}
	st, err := model(t, srv).Stream(context.Background(), req)
	require.NoError(t, err)
	parts, err := wiretest.Collect(st, 100)
	require.NoError(t, err)
	require.Equal(t, []abi.Warning{{Type: "unsupported", Feature: "seed", Message: "the Messages API has no seed; it was not sent"}}, parts[0].Warnings)
	got := srv.Requests()[0]
	require.Equal(t, "abc", got.Header.Get("X-Trace"))
	require.Equal(t, "Bearer sk-ant-test", got.Header.Get("Authorization"))
	var body map[string]any
	require.NoError(t, json.Unmarshal(got.Body, &body))
	require.Equal(t, "claude-sonnet-4-5", body["model"])
	require.Equal(t, true, body["stream"])
	require.EqualValues(t, anthropic.DefaultMaxTokens, body["max_tokens"])
	require.Equal(t, 0.2, body["temperature"])
	require.NotContains(t, body, "seed")
	require.Equal(t, []any{"END"}, body["stop_sequences"])
	require.Equal(t, map[string]any{"type": "enabled", "budget_tokens": float64(1024)}, body["thinking"])
	require.Equal(t, []any{map[string]any{"type": "text", "text": "Be brief."}}, body["system"])
	msgs := body["messages"].([]any)
	require.Len(t, msgs, 3)
	asst := msgs[1].(map[string]any)["content"].([]any)
	require.Equal(t, "tool_use", asst[1].(map[string]any)["type"])
	require.Equal(t, map[string]any{"location": "Paris"}, asst[1].(map[string]any)["input"])
	res := msgs[2].(map[string]any)
	require.Equal(t, "user", res["role"])
	require.Equal(t, "toolu_1", res["content"].([]any)[0].(map[string]any)["tool_use_id"])
	tool := body["tools"].([]any)[0].(map[string]any)
	schema := tool["input_schema"].(map[string]any)
	require.Equal(t, "object", schema["type"])
	require.Equal(t, []any{"location"}, schema["required"])
	require.Equal(t, false, schema["additionalProperties"])
}

func TestRetriesOptIn(t *testing.T) {
	tr := &wiretest.Transcript{Status: 529, Headers: map[string]string{"Content-Type": "application/json", "retry-after-ms": "1"},
		Body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}
	t.Run("off by default", func(t *testing.T) {
		srv := wiretest.Serve(t, tr)
		_, err := model(t, srv).Generate(context.Background(), request())
		require.Error(t, err)
		require.Len(t, srv.Requests(), 1)
	})
	t.Run("WithMaxRetries", func(t *testing.T) {
		srv := wiretest.Serve(t, tr)
		_, err := model(t, srv, anthropic.WithMaxRetries(2)).Generate(context.Background(), request())
		require.Error(t, err)
		require.Len(t, srv.Requests(), 3)
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		id   string
		opts []anthropic.Option
	}{
		"empty id":        {id: ""},
		"bad base URL":    {id: "m", opts: []anthropic.Option{anthropic.WithBaseURL("api.anthropic.com")}},
		"negative retry":  {id: "m", opts: []anthropic.Option{anthropic.WithMaxRetries(-1)}},
		"zero max tokens": {id: "m", opts: []anthropic.Option{anthropic.WithDefaultMaxTokens(0)}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := anthropic.New(tc.id, tc.opts...)
			require.Error(t, err)
		})
	}
	m, err := anthropic.New("claude-haiku-4-5")
	require.NoError(t, err)
	require.Equal(t, "anthropic/claude-haiku-4-5", m.Key())
}

// One Model serves concurrent streams (run with -race).
func TestConcurrentStreams(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("text"))
	m := model(t, srv)
	const n = 8
	errs := make(chan error, n)
	texts := make(chan string, n)
	for i := 0; i < n; i++ {
		go func() {
			st, err := m.Stream(context.Background(), request())
			if err != nil {
				errs <- err
				return
			}
			parts, err := wiretest.Collect(st, 1000)
			errs <- err
			texts <- wiretest.Text(parts, abi.KindTextDelta)
		}()
	}
	for i := 0; i < n; i++ {
		require.NoError(t, <-errs)
		require.Equal(t, "Hello! How can I help you today?", <-texts)
	}
	require.Len(t, srv.Requests(), n)
}

// A server that is not there is a retryable network error, not a hang.
func TestConnectionRefused(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("text"))
	m := model(t, srv)
	srv.Close()
	for name, call := range map[string]func() error{
		"stream":   func() error { _, err := m.Stream(context.Background(), request()); return err },
		"generate": func() error { _, err := m.Generate(context.Background(), request()); return err },
	} {
		t.Run(name, func(t *testing.T) {
			var pe *driver.ProviderError
			require.ErrorAs(t, call(), &pe)
			require.Equal(t, abi.ClassNetwork, pe.Class)
			require.True(t, pe.Retryable)
			require.Zero(t, pe.Status)
		})
	}
}

// TestStreamServerToolAndCitations: a web search the provider runs itself
// reaches the caller as a provider-executed tool call, its result (the raw
// JSON, and a source per page found), and the answer's citations as sources.
func TestStreamServerToolAndCitations(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("web_search"))
	st, err := model(t, srv).Stream(context.Background(), request())
	require.NoError(t, err)
	parts, err := wiretest.Collect(st, 1000)
	require.NoError(t, err)
	require.Equal(t, "stream-start response-metadata text-start text-delta text-end "+
		"tool-input-start tool-input-delta tool-input-end tool-call tool-result source*2 "+
		"text-start source text-delta text-end finish", wiretest.Kinds(parts))
	const id = "srvtoolu_014hJH82Qum7Td6UV8gDXThB"
	byKind := func(k abi.PartKind) []abi.Part {
		var out []abi.Part
		for _, p := range parts {
			if p.Kind == k {
				out = append(out, p)
			}
		}
		return out
	}
	call := byKind(abi.KindToolCall)[0]
	require.Equal(t, id, call.ID)
	require.Equal(t, &abi.ToolInfo{Name: "web_search", Input: `{"query": "weather NYC today"}`, ProviderExecuted: true}, call.Tool)
	res := byKind(abi.KindToolResult)[0]
	require.Equal(t, id, res.ID)
	require.Equal(t, "web_search", res.Tool.Name)
	require.True(t, res.Tool.ProviderExecuted)
	require.False(t, res.Tool.IsError)
	require.True(t, json.Valid([]byte(res.Tool.Result)))
	require.Contains(t, res.Tool.Result, `"url":"https://world-weather.info/forecast/usa/new_york/may-2025/"`)
	var sources []abi.Source
	for _, p := range byKind(abi.KindSource) {
		sources = append(sources, *p.Source)
	}
	accu := abi.Source{URL: "https://www.accuweather.com/en/us/new-york/10021/weather-forecast/349727", Title: "New York, NY Weather Forecast | AccuWeather"}
	require.Equal(t, []abi.Source{
		{URL: "https://world-weather.info/forecast/usa/new_york/may-2025/", Title: "Weather in New York City in May 2025"},
		accu, // found by the search
		accu, // cited by the answer
	}, sources)
	require.Equal(t, "I'll search for the weather.It is sunny in New York today, with a high of 68°F.", wiretest.Text(parts, abi.KindTextDelta))
}

// TestGenerateServerToolAndCitations: the non-streaming call maps a server
// tool's call and result and the text's citations as the stream does.
func TestGenerateServerToolAndCitations(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("generate_web_search"))
	resp, err := model(t, srv).Generate(context.Background(), request())
	require.NoError(t, err)
	var kinds []string
	for _, p := range resp.Content {
		kinds = append(kinds, p.Kind.String())
	}
	require.Equal(t, []string{"tool-call", "tool-result", "source", "text-delta", "source"}, kinds)
	const id = "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE"
	require.Equal(t, &abi.ToolInfo{Name: "web_search", Input: `{"query":"claude shannon birth date"}`, ProviderExecuted: true}, resp.Content[0].Tool)
	res := resp.Content[1]
	require.Equal(t, id, res.ID)
	require.Equal(t, "web_search", res.Tool.Name)
	require.False(t, res.Tool.IsError)
	require.True(t, json.Valid([]byte(res.Tool.Result)))
	wiki := &abi.Source{URL: "https://en.wikipedia.org/wiki/Claude_Shannon", Title: "Claude Shannon - Wikipedia"}
	require.Equal(t, wiki, resp.Content[2].Source)
	require.Equal(t, wiki, resp.Content[4].Source)
	require.Equal(t, "Claude Shannon was born on April 30, 1916, in Petoskey, Michigan", resp.Text())
}

// TestStreamRawChunks: WithRawChunks passes every event the SDK decodes
// through as it came (the SDK drops pings), before what was mapped from it,
// and changes nothing else.
func TestStreamRawChunks(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("text"))
	st, err := model(t, srv, anthropic.WithRawChunks()).Stream(context.Background(), request())
	require.NoError(t, err)
	parts, err := wiretest.Collect(st, 1000)
	require.NoError(t, err)
	var mapped []abi.Part
	var events []string
	for i, p := range parts {
		if p.Kind != abi.KindRaw {
			mapped = append(mapped, p)
			continue
		}
		ev, ok := p.Raw.(ant.MessageStreamEventUnion)
		require.True(t, ok, "Raw is the SDK's event, got %T", p.Raw)
		events = append(events, ev.Type)
		if ev.Type == "message_start" {
			require.Equal(t, abi.KindResponseMeta, parts[i+1].Kind, "the event comes before what is mapped from it")
		}
	}
	require.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta",
		"content_block_delta", "content_block_stop", "message_delta", "message_stop"}, events)

	plain := wiretest.ServeFile(t, wire("text"))
	st, err = model(t, plain).Stream(context.Background(), request())
	require.NoError(t, err)
	want, err := wiretest.Collect(st, 1000)
	require.NoError(t, err)
	require.Equal(t, want, mapped)
}

// An error event whose data is not JSON keeps the text as its message.
func TestStreamErrorEventNotJSON(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("error_event_not_json"))
	st, err := model(t, srv).Stream(context.Background(), request())
	require.NoError(t, err)
	_, err = wiretest.Collect(st, 100)
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "upstream connect error or disconnect/reset before headers", pe.Message)
	require.Equal(t, "upstream connect error or disconnect/reset before headers", string(pe.Body))
}

// A byte-order mark opening the body and CR or CRLF line
// endings (each allowed by the SSE spec) give the same parts as the plain
// transcript, through the real SDK client: no first event lost, no line
// left unsplit.
func TestStreamFraming(t *testing.T) {
	collect := func(t *testing.T, name string) []abi.Part {
		srv := wiretest.ServeFile(t, wire(name))
		st, err := model(t, srv).Stream(context.Background(), request())
		require.NoError(t, err)
		parts, err := wiretest.Collect(st, 1000)
		require.NoError(t, err)
		return parts
	}
	want := collect(t, "text")
	require.NotNil(t, wiretest.Finish(want))
	for _, name := range []string{"text_bom", "text_crlf", "text_cr", "text_mixed"} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, want, collect(t, name))
		})
	}
}

// The stream exposes the HTTP response headers, so a caller can log the
// provider's request id.
func TestStreamHeader(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("text"))
	st, err := model(t, srv).Stream(context.Background(), request())
	require.NoError(t, err)
	defer st.Close()
	h, ok := st.(interface{ Header() http.Header })
	require.True(t, ok, "%T has no Header method", st)
	require.Equal(t, "req_011CSHoEeqs5C35K2UUqR7Fy", h.Header().Get("request-id"))
}

// With the SDK's own tracing opted in, the body normaliser keeps the SDK's
// span following the decoded events: the span records what only events
// carry (the output token count of message_delta), and ends once.
func TestStreamFramingKeepsSDKTracing(t *testing.T) {
	for _, name := range []string{"text", "text_mixed"} {
		t.Run(name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
			srv := wiretest.ServeFile(t, wire(name))
			m := model(t, srv, anthropic.WithRequestOptions(option.WithTracerProvider(tp), option.WithOpenTelemetryTraces(true)))
			st, err := m.Stream(context.Background(), request())
			require.NoError(t, err)
			parts, err := wiretest.Collect(st, 1000)
			require.NoError(t, err)
			require.Equal(t, "Hello! How can I help you today?", wiretest.Text(parts, abi.KindTextDelta))
			spans := exp.GetSpans()
			require.Len(t, spans, 1)
			var out int64 = -1
			for _, kv := range spans[0].Attributes {
				if kv.Key == "gen_ai.usage.output_tokens" {
					out = kv.Value.AsInt64()
				}
			}
			require.Equal(t, int64(12), out, "the span followed the events")
		})
	}
}

// ProviderOptions fields are top-level fields taken literally (a name with
// a '.' or another sjson path character is not a path) and raw JSON values
// go as they are, replacing the request's own mapping (messages, system):
// a gateway forwards its client's fields through them unchanged.
func TestProviderOptionsForwardedLiterally(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("text"))
	req := request()
	req.ProviderOptions = map[string]any{"anthropic": map[string]any{
		"x.vendor":       json.RawMessage(`{"a":[1,2.50,"x"]}`),
		"system":         json.RawMessage(`[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}]`),
		"weird*?|#@:key": true,
	}}
	st, err := model(t, srv).Stream(context.Background(), req)
	require.NoError(t, err)
	_, err = wiretest.Collect(st, 100)
	require.NoError(t, err)
	var body map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(srv.Requests()[0].Body, &body))
	require.JSONEq(t, `{"a":[1,2.50,"x"]}`, string(body["x.vendor"]))
	require.JSONEq(t, `[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}]`, string(body["system"]))
	require.Equal(t, "true", string(body["weird*?|#@:key"]))
	require.NotContains(t, body, "x")
}

// TestStreamUnmappedEvents: WithUnmappedEvents passes every event but the
// text, thinking and tool-input deltas of their own blocks (their parts
// carry them whole), each before what was mapped from it, and changes
// nothing else; on a stream with every kind of block, one newer than the
// SDK and the adapter among them, interleaved with a text block.
func TestStreamUnmappedEvents(t *testing.T) {
	collect := func(opts ...anthropic.Option) []abi.Part {
		srv := wiretest.ServeFile(t, wire("blocks"))
		st, err := model(t, srv, opts...).Stream(context.Background(), request())
		require.NoError(t, err)
		parts, err := wiretest.Collect(st, 1000)
		require.NoError(t, err)
		return parts
	}
	plain := collect()
	for name, opt := range map[string]anthropic.Option{"raw": anthropic.WithRawChunks(), "unmapped": anthropic.WithUnmappedEvents()} {
		t.Run(name, func(t *testing.T) {
			parts := collect(opt)
			var mapped []abi.Part
			var events []string
			for _, p := range parts {
				if p.Kind != abi.KindRaw {
					mapped = append(mapped, p)
					continue
				}
				ev, ok := p.Raw.(ant.MessageStreamEventUnion)
				require.True(t, ok, "Raw is the SDK's event, got %T", p.Raw)
				e := ev.Type
				if e == "content_block_delta" {
					e = ev.Delta.Type
				}
				events = append(events, e+"@"+strconv.FormatInt(ev.Index, 10))
			}
			require.Equal(t, plain, mapped)
			all := []string{"message_start@0",
				"content_block_start@0", "content_block_stop@0",
				"content_block_start@1", "thinking_delta@1", "signature_delta@1", "content_block_stop@1",
				"content_block_start@2", "input_json_delta@2", "input_json_delta@2", "content_block_stop@2",
				"content_block_start@3", "content_block_stop@3",
				"content_block_start@4", "citations_delta@4", "text_delta@4",
				"content_block_start@5", "reading_delta@5", "citations_delta@4", "reading_delta@5", "text_delta@4",
				"content_block_stop@5", "content_block_stop@4",
				"content_block_start@6", "signature_delta@6", "content_block_stop@6",
				"content_block_start@7", "text_delta@7", "content_block_stop@7",
				"message_delta@0", "message_stop@0"}
			if name == "unmapped" {
				all = slices.DeleteFunc(all, func(e string) bool {
					return strings.HasPrefix(e, "text_delta@") || strings.HasPrefix(e, "thinking_delta@") || strings.HasPrefix(e, "input_json_delta@")
				})
			}
			require.Equal(t, all, events)
		})
	}
	// What the parts make of it: the redacted block an empty reasoning
	// block, the newer block nothing, the citations sources.
	var kinds []string
	for _, p := range plain {
		kinds = append(kinds, p.Kind.String()+":"+p.ID)
	}
	require.Equal(t, []string{"stream-start:", "response-metadata:msg_01Bk7xWf3TDnh5ZAz1oT4V2Q",
		"reasoning-start:0", "reasoning-end:0",
		"reasoning-start:1", "reasoning-delta:1", "reasoning-end:1",
		"tool-input-start:srvtoolu_01WYG3ziw53XMcoyKL4XcZmE", "tool-input-delta:srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
		"tool-input-end:srvtoolu_01WYG3ziw53XMcoyKL4XcZmE", "tool-call:srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
		"tool-result:srvtoolu_01WYG3ziw53XMcoyKL4XcZmE", "source:srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
		"text-start:4", "source:4", "text-delta:4", "source:4", "text-delta:4", "text-end:4",
		"reasoning-start:6", "reasoning-end:6",
		"text-start:7", "text-delta:7", "text-end:7", "finish:"}, kinds)
}

// A temperature in OpenAI's range but above the Messages API's is sent as
// the API's maximum, with a warning; one in range goes as it is, unwarned.
func TestTemperatureAboveRangeIsClamped(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in, sent float64
		warned   bool
	}{
		{"above", 1.5, 1, true},
		{"at the maximum", 1, 1, false},
		{"in range", 0.7, 0.7, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := wiretest.ServeFile(t, wire("text"))
			temp := tc.in
			req := &driver.Request{Messages: []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: "hi"}}}},
				Temperature: &temp}
			st, err := model(t, srv).Stream(context.Background(), req)
			require.NoError(t, err)
			parts, err := wiretest.Collect(st, 100)
			require.NoError(t, err)
			var body map[string]any
			require.NoError(t, json.Unmarshal(srv.Requests()[0].Body, &body))
			require.Equal(t, tc.sent, body["temperature"])
			if tc.warned {
				require.Equal(t, []abi.Warning{{Type: "compatibility", Feature: "temperature",
					Message: "temperature 1.5 is above the Messages API's maximum of 1; 1 was sent"}}, parts[0].Warnings)
			} else {
				require.Empty(t, parts[0].Warnings)
			}
		})
	}
}
