package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
	"github.com/retryhost/retryhost/provider/openai"
)

func wire(name string) string {
	return filepath.Join("..", "..", "testdata", "wire", "openai", name+".json")
}

func model(t *testing.T, srv *wiretest.Server, opts ...openai.Option) *openai.Model {
	t.Helper()
	opts = append([]openai.Option{
		openai.WithBaseURL(srv.URL + "/v1"),
		openai.WithAPIKey("sk-test"),
		openai.WithHTTPClient(srv.Client()),
	}, opts...)
	m, err := openai.New("gpt-4o-mini", opts...)
	require.NoError(t, err)
	return m
}

func request() *driver.Request {
	return &driver.Request{Messages: []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: "Hi"}}}}}
}

// wantErr is what a test expects of a *driver.ProviderError.
type wantErr struct {
	status     int
	class      abi.ErrorClass
	typ        string
	retryable  bool
	retryAfter string // the Retry-After header
	retryMS    string // the retry-after-ms header
}

func checkErr(t *testing.T, err error, w *wantErr) {
	t.Helper()
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "openai", pe.Provider)
	require.Equal(t, w.status, pe.Status, "status")
	require.Equal(t, w.class, pe.Class, "class %s", pe.Class)
	require.Equal(t, w.typ, pe.Type, "type")
	require.Equal(t, w.retryable, pe.Retryable, "retryable")
	if w.status != 0 {
		require.Equal(t, w.retryAfter, pe.Header.Get("Retry-After"))
		require.Equal(t, w.retryMS, pe.Header.Get("retry-after-ms"))
		require.NotEmpty(t, pe.Body)
		require.NotEmpty(t, pe.Message)
	}
}

func TestStream(t *testing.T) {
	errTests := map[string]wantErr{
		"rate_limit_429":     {status: 429, class: abi.ClassRateLimit, typ: "requests", retryable: true, retryAfter: "2", retryMS: "1500"},
		"server_error_500":   {status: 500, class: abi.ClassServer, typ: "server_error", retryable: true},
		"overloaded_503":     {status: 503, class: abi.ClassOverloaded, typ: "server_error", retryable: true},
		"overloaded_529":     {status: 529, class: abi.ClassOverloaded, typ: "overloaded", retryable: true},
		"context_length_400": {status: 400, class: abi.ClassContextLength, typ: "invalid_request_error"},
		"auth_401":           {status: 401, class: abi.ClassAuth, typ: "invalid_request_error"},
	}
	tests := []struct {
		name      string
		kinds     string
		text      string
		reasoning string
		finish    abi.FinishReason
		usage     abi.Usage
		tool      *abi.ToolInfo
		openErr   *wantErr // Stream itself fails
		recvErr   *wantErr // Recv fails after these kinds
	}{
		{
			name:   "text",
			kinds:  "stream-start response-metadata text-start text-delta*9 text-end finish",
			text:   "Hello! How can I help you today?",
			finish: abi.FinishReason{Unified: abi.ReasonStop, Raw: "stop"},
			usage:  abi.Usage{InputTokens: 19, OutputTokens: 10, CacheReadTokens: 4},
		},
		{
			name:   "refusal_text",
			kinds:  "stream-start response-metadata text-start text-delta*10 text-end finish",
			text:   "I'm sorry, but I can't help with that.",
			finish: abi.FinishReason{Unified: abi.ReasonStop, Raw: "stop"},
			usage:  abi.Usage{InputTokens: 25, OutputTokens: 11},
		},
		{
			name:   "length",
			kinds:  "stream-start response-metadata text-start text-delta*4 text-end finish",
			text:   "Once upon a time",
			finish: abi.FinishReason{Unified: abi.ReasonLength, Raw: "length"},
			usage:  abi.Usage{InputTokens: 12, OutputTokens: 4},
		},
		{
			name:   "content_filter",
			kinds:  "stream-start response-metadata text-start text-delta*2 text-end finish",
			text:   "Here is",
			finish: abi.FinishReason{Unified: abi.ReasonContentFilter, Raw: "content_filter"},
			usage:  abi.Usage{InputTokens: 30, OutputTokens: 2},
		},
		{
			name:   "tool_call",
			kinds:  "stream-start response-metadata tool-input-start tool-input-delta*7 tool-input-end tool-call finish",
			finish: abi.FinishReason{Unified: abi.ReasonToolCalls, Raw: "tool_calls"},
			usage:  abi.Usage{InputTokens: 81, OutputTokens: 17},
			tool:   &abi.ToolInfo{Name: "get_weather", Input: `{"location":"Paris, France"}`},
		},
		{
			name:      "reasoning_compatible",
			kinds:     "stream-start response-metadata reasoning-start reasoning-delta*2 reasoning-end text-start text-delta*2 text-end finish",
			text:      "Hi!",
			reasoning: "The user says hi.",
			finish:    abi.FinishReason{Unified: abi.ReasonStop, Raw: "stop"},
			usage:     abi.Usage{InputTokens: 8, OutputTokens: 12, ReasoningTokens: 9},
		},
		{
			// A refusal held before content, then content: the refusal
			// is delivered as text, not dropped.
			name:   "refusal_then_content",
			kinds:  "stream-start response-metadata text-start text-delta text-start text-delta text-end*2 finish",
			text:   "I'm sorry, I cannot assist with that request. Here is a safer alternative.",
			finish: abi.FinishReason{Unified: abi.ReasonRefusal, Raw: "refusal"},
			usage:  abi.Usage{InputTokens: 40, OutputTokens: 10},
		},
		{
			name:    "refusal_field",
			kinds:   "stream-start response-metadata",
			recvErr: &wantErr{class: abi.ClassRefusal, typ: "refusal"},
		},
		{
			name:    "stream_error",
			kinds:   "stream-start response-metadata text-start text-delta",
			text:    "The",
			recvErr: &wantErr{class: abi.ClassServer, typ: "server_error", retryable: true},
		},
		{
			name:    "stream_error_first",
			kinds:   "stream-start",
			recvErr: &wantErr{class: abi.ClassServer, typ: "server_error", retryable: true},
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
	for name, w := range errTests {
		tests = append(tests, struct {
			name      string
			kinds     string
			text      string
			reasoning string
			finish    abi.FinishReason
			usage     abi.Usage
			tool      *abi.ToolInfo
			openErr   *wantErr
			recvErr   *wantErr
		}{name: name, openErr: &w})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := wiretest.ServeFile(t, wire(tt.name))
			m := model(t, srv)
			st, err := m.Stream(context.Background(), request())
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
			meta := parts[1].Meta
			if tt.name == "reasoning_compatible" {
				require.Equal(t, "deepseek-reasoner", meta.ModelID)
				return
			}
			require.Equal(t, "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", meta.ID)
			require.Equal(t, "gpt-4o-mini-2024-07-18", meta.ModelID)
			require.Equal(t, time.Unix(1741569952, 0).UTC(), meta.Timestamp)
			if tt.tool != nil {
				var call *abi.Part
				for i := range parts {
					if parts[i].Kind == abi.KindToolCall {
						call = &parts[i]
					}
				}
				require.NotNil(t, call)
				require.Equal(t, "call_DdmO9pD3xa9XTPNJ32zg2hcA", call.ID)
				require.Equal(t, tt.tool, call.Tool)
				require.Equal(t, tt.tool.Input, wiretest.Text(parts, abi.KindToolInputDelta))
				require.Equal(t, tt.tool.Name, parts[2].Tool.Name)
			}
		})
	}
}

func TestStreamRefusalError(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("refusal_field"))
	st, err := model(t, srv).Stream(context.Background(), request())
	require.NoError(t, err)
	_, err = wiretest.Collect(st, 100)
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "I'm sorry, I cannot assist with that request.", pe.Message)
	var re *abi.RefusalError
	require.ErrorAs(t, err, &re, "a declared refusal matches the same condition as a detected one")
	require.Equal(t, pe.Message, re.Text)
}

func TestGenerate(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		finish  abi.FinishReason
		usage   abi.Usage
		tool    *abi.ToolInfo
		wantErr *wantErr
	}{
		{name: "generate_text", text: "Hello! How can I help you today?",
			finish: abi.FinishReason{Unified: abi.ReasonStop, Raw: "stop"}, usage: abi.Usage{InputTokens: 19, OutputTokens: 10}},
		{name: "generate_content_filter", text: "Here is",
			finish: abi.FinishReason{Unified: abi.ReasonContentFilter, Raw: "content_filter"}, usage: abi.Usage{InputTokens: 30, OutputTokens: 2}},
		{name: "generate_tool_call",
			finish: abi.FinishReason{Unified: abi.ReasonToolCalls, Raw: "tool_calls"}, usage: abi.Usage{InputTokens: 81, OutputTokens: 17},
			tool: &abi.ToolInfo{Name: "get_weather", Input: `{"location":"Paris, France"}`}},
		{name: "generate_refusal_field", wantErr: &wantErr{class: abi.ClassRefusal, typ: "refusal"}},
		{name: "rate_limit_429", wantErr: &wantErr{status: 429, class: abi.ClassRateLimit, typ: "requests", retryable: true, retryAfter: "2", retryMS: "1500"}},
		{name: "server_error_500", wantErr: &wantErr{status: 500, class: abi.ClassServer, typ: "server_error", retryable: true}},
		{name: "overloaded_503", wantErr: &wantErr{status: 503, class: abi.ClassOverloaded, typ: "server_error", retryable: true}},
		{name: "context_length_400", wantErr: &wantErr{status: 400, class: abi.ClassContextLength, typ: "invalid_request_error"}},
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
			require.Equal(t, "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG", resp.Meta.ID)
			require.Equal(t, "req_9a8b7c6d5e", resp.Headers.Get("x-request-id"))
			if tt.tool != nil {
				require.Len(t, resp.Content, 1)
				require.Equal(t, abi.KindToolCall, resp.Content[0].Kind)
				require.Equal(t, tt.tool, resp.Content[0].Tool)
			}
		})
	}
}

// A cancelled context mid-stream closes the connection and Recv returns at once.
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
	_, err2 := st.Recv()
	require.Equal(t, err, err2, "Recv repeats the error")
	res, ok := srv.Wait(10 * time.Second)
	require.True(t, ok, "the server never saw the request end")
	require.True(t, res.ClientGone, "the client must close the connection")
	require.False(t, res.Finished)
}

// Close during a blocked Recv unblocks it and closes the connection.
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
	require.NoError(t, st.Close(), "Close is idempotent")
	res, ok := srv.Wait(10 * time.Second)
	require.True(t, ok)
	require.True(t, res.ClientGone)
}

// Stalls end in the context's error once its deadline passes.
func TestStreamStall(t *testing.T) {
	for _, name := range []string{"stall_before_headers", "stall_first_byte", "stall_mid"} {
		t.Run(name, func(t *testing.T) {
			srv := wiretest.ServeFile(t, wire(name))
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			st, err := model(t, srv).Stream(ctx, request())
			if name == "stall_before_headers" {
				require.ErrorIs(t, err, context.DeadlineExceeded)
			} else {
				require.NoError(t, err)
				_, err = wiretest.Collect(st, 100)
				require.ErrorIs(t, err, context.DeadlineExceeded)
			}
			require.Less(t, time.Since(start), 10*time.Second, "did not return")
			res, ok := srv.Wait(10 * time.Second)
			require.True(t, ok)
			require.True(t, res.ClientGone)
		})
	}
}

func TestStreamContextCause(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("stall_first_byte"))
	cause := errors.New("first-content deadline")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 50*time.Millisecond, cause)
	defer cancel()
	st, err := model(t, srv).Stream(ctx, request())
	require.NoError(t, err)
	_, err = wiretest.Collect(st, 10)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, cause)
}

func TestRequestTranslation(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("text"))
	temp := 0.2
	req := &driver.Request{
		System: "Be brief.",
		Messages: []driver.Message{
			{Role: driver.RoleUser, Content: []driver.Content{{Text: "Weather in Paris?"}}},
			{Role: driver.RoleAssistant, Content: []driver.Content{{ToolCallID: "call_1", ToolName: "get_weather", ToolInput: `{"location":"Paris"}`}}},
			{Role: driver.RoleTool, Content: []driver.Content{{ToolCallID: "call_1", ToolResult: `{"temp":21}`}}},
		},
		Tools:           []driver.Tool{{Name: "get_weather", Description: "Weather now", Schema: `{"type":"object","properties":{"location":{"type":"string"}}}`}},
		MaxOutputTokens: 64,
		Temperature:     &temp,
		StopSequences:   []string{"\n\n"},
		Headers:         map[string][]string{"X-Trace": {"abc"}},
		ProviderOptions: map[string]any{"openai": map[string]any{"reasoning_effort": "low"}},
	}
	st, err := model(t, srv, openai.WithStreamUsage(true)).Stream(context.Background(), req)
	require.NoError(t, err)
	_, err = wiretest.Collect(st, 100)
	require.NoError(t, err)
	got := srv.Requests()[0]
	require.Equal(t, "abc", got.Header.Get("X-Trace"))
	require.Equal(t, "Bearer sk-test", got.Header.Get("Authorization"))
	var body map[string]any
	require.NoError(t, json.Unmarshal(got.Body, &body))
	require.Equal(t, "gpt-4o-mini", body["model"])
	require.Equal(t, true, body["stream"])
	require.Equal(t, map[string]any{"include_usage": true}, body["stream_options"])
	require.EqualValues(t, 64, body["max_completion_tokens"])
	require.Equal(t, 0.2, body["temperature"])
	require.Equal(t, []any{"\n\n"}, body["stop"])
	require.Equal(t, "low", body["reasoning_effort"])
	msgs := body["messages"].([]any)
	require.Len(t, msgs, 4)
	require.Equal(t, map[string]any{"role": "system", "content": "Be brief."}, msgs[0])
	require.Equal(t, "tool", msgs[3].(map[string]any)["role"])
	require.Equal(t, "call_1", msgs[3].(map[string]any)["tool_call_id"])
	call := msgs[2].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
	require.Equal(t, "call_1", call["id"])
	tools := body["tools"].([]any)
	fn := tools[0].(map[string]any)["function"].(map[string]any)
	require.Equal(t, "get_weather", fn["name"])
	require.Equal(t, "object", fn["parameters"].(map[string]any)["type"])
}

func TestRetriesOptIn(t *testing.T) {
	tr := &wiretest.Transcript{Status: 500, Headers: map[string]string{"Content-Type": "application/json", "retry-after-ms": "1"},
		Body: `{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`}
	t.Run("off by default", func(t *testing.T) {
		srv := wiretest.Serve(t, tr)
		_, err := model(t, srv).Generate(context.Background(), request())
		require.Error(t, err)
		require.Len(t, srv.Requests(), 1)
	})
	t.Run("WithMaxRetries", func(t *testing.T) {
		srv := wiretest.Serve(t, tr)
		_, err := model(t, srv, openai.WithMaxRetries(2)).Generate(context.Background(), request())
		require.Error(t, err)
		require.Len(t, srv.Requests(), 3)
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		id   string
		opts []openai.Option
	}{
		"empty id":       {id: ""},
		"bad base URL":   {id: "m", opts: []openai.Option{openai.WithBaseURL("localhost:8080")}},
		"negative retry": {id: "m", opts: []openai.Option{openai.WithMaxRetries(-1)}},
		"empty provider": {id: "m", opts: []openai.Option{openai.WithProvider("")}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := openai.New(tc.id, tc.opts...)
			require.Error(t, err)
		})
	}
	m, err := openai.New("llama3", openai.WithProvider("ollama"), openai.WithBaseURL("http://localhost:11434/v1"))
	require.NoError(t, err)
	require.Equal(t, "ollama/llama3", m.Key())
}

func TestBadRequestFailsBeforeNetwork(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("text"))
	m := model(t, srv)
	_, err := m.Stream(context.Background(), &driver.Request{Tools: []driver.Tool{{Name: "x", Schema: "{not json"}}})
	require.ErrorContains(t, err, "schema")
	_, err = m.Generate(context.Background(), &driver.Request{ProviderOptions: map[string]any{"openai": 3}})
	require.ErrorContains(t, err, "ProviderOptions")
	require.Empty(t, srv.Requests())
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

// TestStreamRawChunks: WithRawChunks passes every chunk through as it came,
// before what was mapped from it, and changes nothing else.
func TestStreamRawChunks(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("text"))
	st, err := model(t, srv, openai.WithRawChunks()).Stream(context.Background(), request())
	require.NoError(t, err)
	parts, err := wiretest.Collect(st, 1000)
	require.NoError(t, err)
	var mapped []abi.Part
	raw := 0
	for i, p := range parts {
		if p.Kind != abi.KindRaw {
			mapped = append(mapped, p)
			continue
		}
		raw++
		c, ok := p.Raw.(oai.ChatCompletionChunk)
		require.True(t, ok, "Raw is the SDK's chunk, got %T", p.Raw)
		require.Equal(t, "chat.completion.chunk", string(c.Object))
		if raw == 1 {
			require.Equal(t, abi.KindResponseMeta, parts[i+1].Kind, "the chunk comes before what is mapped from it")
		}
	}
	require.Equal(t, 12, raw, "one raw part per chunk ([DONE] is no chunk)")

	plain := wiretest.ServeFile(t, wire("text"))
	st, err = model(t, plain).Stream(context.Background(), request())
	require.NoError(t, err)
	want, err := wiretest.Collect(st, 1000)
	require.NoError(t, err)
	require.Equal(t, want, mapped)
}

// ProviderOptions fields are top-level fields taken literally (a name with
// a '.' is not a path), raw JSON values go as they are, and a max_tokens
// among them replaces MaxOutputTokens' max_completion_tokens: a gateway
// forwards its client's fields through them unchanged.
func TestProviderOptionsForwardedLiterally(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("text"))
	req := &driver.Request{
		Messages:        []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: "hi"}}}},
		MaxOutputTokens: 64,
		ProviderOptions: map[string]any{"openai": map[string]any{
			"x.vendor":        json.RawMessage(`{"a":[1,2.50,"x"]}`),
			"response_format": json.RawMessage(`{"type":"json_object"}`),
			"max_tokens":      json.RawMessage(`7`),
			"weird*?|#@:key":  true,
		}},
	}
	m := model(t, srv)
	require.Equal(t, "openai", m.Provider())
	st, err := m.Stream(context.Background(), req)
	require.NoError(t, err)
	_, err = wiretest.Collect(st, 100)
	require.NoError(t, err)
	var body map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(srv.Requests()[0].Body, &body))
	require.JSONEq(t, `{"a":[1,2.50,"x"]}`, string(body["x.vendor"]))
	require.JSONEq(t, `{"type":"json_object"}`, string(body["response_format"]))
	require.Equal(t, "7", string(body["max_tokens"]))
	require.Equal(t, "true", string(body["weird*?|#@:key"]))
	require.NotContains(t, body, "max_completion_tokens")
	require.NotContains(t, body, "x")
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
	require.Equal(t, "req_7f3c2b1a9e", h.Header().Get("x-request-id"))
}

// Raw messages and tools in the ProviderOptions entry replace the
// request's own in the body, whole: the request's are not even translated
// (a message the adapter could not send does not fail a request that
// forwards its caller's own).
func TestProviderOptionsMessagesReplaceTheRequests(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("text"))
	req := &driver.Request{
		System: "driver system",
		Messages: []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: "driver text"}}},
			{Role: driver.RoleTool, Content: []driver.Content{{ToolResult: "no id: not sendable"}}}},
		Tools: []driver.Tool{{Name: "t", Schema: "not json"}},
		ProviderOptions: map[string]any{"openai": map[string]any{
			"messages": json.RawMessage(`[{"role":"user","content":[{"type":"text","text":"raw"},{"type":"image_url","image_url":{"url":"data:x"}}]}]`),
			"tools":    json.RawMessage(`[{"type":"function","function":{"name":"raw_tool"}}]`),
		}},
	}
	st, err := model(t, srv).Stream(context.Background(), req)
	require.NoError(t, err)
	_, err = wiretest.Collect(st, 100)
	require.NoError(t, err)
	var body map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(srv.Requests()[0].Body, &body))
	require.JSONEq(t, `[{"role":"user","content":[{"type":"text","text":"raw"},{"type":"image_url","image_url":{"url":"data:x"}}]}]`, string(body["messages"]))
	require.JSONEq(t, `[{"type":"function","function":{"name":"raw_tool"}}]`, string(body["tools"]))
	require.NotContains(t, string(srv.Requests()[0].Body), "driver")
}
