package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
	"github.com/retryhost/retryhost/provider/internal/conformance"
)

// fixedTransport answers every request with one response and keeps the
// last request body.
type fixedTransport struct {
	status int
	header http.Header
	body   func() io.ReadCloser
	length int64

	mu   sync.Mutex
	sent []byte
}

func (f *fixedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(r.Body)
	_ = r.Body.Close()
	f.mu.Lock()
	f.sent = b
	f.mu.Unlock()
	h := f.header.Clone()
	return &http.Response{StatusCode: f.status, Header: h, Body: f.body(), ContentLength: f.length, Request: r}, nil
}

func bytesBody(b []byte) func() io.ReadCloser {
	return func() io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }
}

// answerModel is a model over t, with WithUpstreamJSON and WithChunkFields.
func answerModel(t *testing.T, tr http.RoundTripper, opts ...Option) *Model {
	t.Helper()
	opts = append([]Option{WithBaseURL("http://mem/v1"), WithAPIKey("k"), WithHTTPClient(&http.Client{Transport: tr}), WithChunkFields(), WithUpstreamJSON()}, opts...)
	m, err := New("m", opts...)
	require.NoError(t, err)
	return m
}

// run opens a stream of m (committing at its end when atEnd) and
// describes its parts; err is the stream's error, or Stream's.
func run(t *testing.T, m *Model, atEnd bool) ([]string, error) {
	t.Helper()
	ctx := context.Background()
	if atEnd {
		ctx = driver.CommitAtEnd(ctx)
	}
	st, err := m.Stream(ctx, &driver.Request{})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var out []string
	for {
		p, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, describe(&p))
	}
}

// answerBodies returns the chat.completion of an answer and the event
// stream of the same answer in one chunk: the message as the delta, each
// tool call with its index.
func answerBodies(t *testing.T, top, choice, message map[string]any) (completion, stream []byte) {
	t.Helper()
	build := func(object, msgKey string, msg map[string]any) []byte {
		ch := map[string]any{"index": 0, msgKey: msg}
		for k, v := range choice {
			ch[k] = v
		}
		o := map[string]any{"id": "chatcmpl-1", "object": object, "created": 1700000000, "model": "m-1", "choices": []any{ch}}
		for k, v := range top {
			o[k] = v
		}
		b, err := json.Marshal(o)
		require.NoError(t, err)
		return b
	}
	completion = build("chat.completion", "message", message)
	delta := map[string]any{}
	for k, v := range message {
		delta[k] = v
	}
	if tcs, ok := message["tool_calls"].([]map[string]any); ok {
		var indexed []map[string]any
		for i, tc := range tcs {
			c := map[string]any{"index": i}
			for k, v := range tc {
				c[k] = v
			}
			indexed = append(indexed, c)
		}
		delta["tool_calls"] = indexed
	}
	stream = append(append([]byte("data: "), build("chat.completion.chunk", "delta", delta)...), "\n\ndata: [DONE]\n\n"...)
	return completion, stream
}

// A non-streamed answer (WithUpstreamJSON, a request that commits at its
// end) gives the parts, in the order, a one-chunk stream of the same
// answer gives, and fails where that stream fails, with the same error.
func TestUpstreamJSONSamePartsAsStream(t *testing.T) {
	usage := map[string]any{"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13,
		"prompt_tokens_details": map[string]any{"cached_tokens": 2}, "completion_tokens_details": map[string]any{"reasoning_tokens": 1}}
	stop := map[string]any{"finish_reason": "stop"}
	for _, tc := range []struct {
		name                string
		top, choice, msg    map[string]any
		wantErr             string // in both errors; "" for none
		wantParts, wantPart string // a part both must have
	}{
		{name: "text, fields, logprobs, usage",
			top: map[string]any{"system_fingerprint": "fp_1", "service_tier": "default", "usage": usage},
			choice: map[string]any{"finish_reason": "stop",
				"logprobs": map[string]any{"content": []any{map[string]any{"token": "Hi", "logprob": -0.5, "bytes": []int{72, 105}, "top_logprobs": []any{}}}, "refusal": nil}},
			msg:      map[string]any{"role": "assistant", "content": "Hi there"},
			wantPart: `LogprobsContent:[{"bytes":[72,105],"logprob":-0.5,"token":"Hi","top_logprobs":[]}]`},
		{name: "tool calls",
			top: map[string]any{"usage": usage}, choice: map[string]any{"finish_reason": "tool_calls"},
			msg: map[string]any{"role": "assistant", "content": nil, "tool_calls": []map[string]any{
				{"id": "call_a", "type": "function", "function": map[string]any{"name": "get", "arguments": `{"q":1}`}},
				{"id": "call_b", "type": "function", "function": map[string]any{"name": "put", "arguments": ""}},
			}},
			wantPart: `tool={Name:put Input:{} `},
		{name: "reasoning then text", choice: stop,
			msg:      map[string]any{"role": "assistant", "content": "42", "reasoning_content": "think"},
			wantPart: `delta="think"`},
		{name: "refusal alone", choice: stop,
			msg:     map[string]any{"role": "assistant", "content": nil, "refusal": "I can't help with that."},
			wantErr: "I can't help with that."},
		{name: "refusal after text", choice: stop,
			msg:      map[string]any{"role": "assistant", "content": "Well", "refusal": "no"},
			wantPart: `id="refusal-0" delta="no"`},
		{name: "no finish", choice: map[string]any{"finish_reason": nil},
			msg:     map[string]any{"role": "assistant", "content": "Hi"},
			wantErr: adapter.ErrTruncated.Error()},
		{name: "no choices", top: map[string]any{"choices": []any{}},
			wantErr: adapter.ErrTruncated.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			completion, stream := answerBodies(t, tc.top, tc.choice, tc.msg)
			sse := &fixedTransport{status: 200, header: http.Header{"Content-Type": {"text/event-stream"}}, body: bytesBody(stream), length: -1}
			want, wantErr := run(t, answerModel(t, sse), false)
			js := &fixedTransport{status: 200, header: http.Header{"Content-Type": {"application/json"}}, body: bytesBody(completion), length: int64(len(completion))}
			got, gotErr := run(t, answerModel(t, js), true)
			require.Equal(t, want, got)
			sdk := answerModel(t, js)
			sdk.sdkChunks = true // the SDK's decoding of the completion, not the lean one
			gotSDK, sdkErr := run(t, sdk, true)
			require.Equal(t, want, gotSDK)
			require.Equal(t, fmt.Sprint(gotErr), fmt.Sprint(sdkErr))
			if tc.wantErr != "" {
				require.ErrorContains(t, wantErr, tc.wantErr)
				require.Equal(t, wantErr.Error(), gotErr.Error())
				var w, g *driver.ProviderError
				require.ErrorAs(t, wantErr, &w)
				require.ErrorAs(t, gotErr, &g)
				require.Equal(t, w.Class, g.Class)
				require.Equal(t, w.Retryable, g.Retryable)
			} else {
				require.NoError(t, wantErr)
				require.NoError(t, gotErr)
				require.Contains(t, strings.Join(got, "\n"), tc.wantPart)
				require.Contains(t, got[len(got)-1], "finish=")
			}
			require.Contains(t, string(sse.sent), `"stream":true`)
			var sent map[string]any
			require.NoError(t, json.Unmarshal(js.sent, &sent))
			require.Equal(t, false, sent["stream"], "asked for a non-streamed answer: %s", js.sent)
			require.NotContains(t, sent, "stream_options")
		})
	}
}

// A request that commits at its first content is streamed as before, with
// WithUpstreamJSON or without.
func TestUpstreamJSONOnlyAtEnd(t *testing.T) {
	_, stream := answerBodies(t, nil, map[string]any{"finish_reason": "stop"}, map[string]any{"content": "Hi"})
	sse := &fixedTransport{status: 200, header: http.Header{"Content-Type": {"text/event-stream"}}, body: bytesBody(stream), length: -1}
	parts, err := run(t, answerModel(t, sse), false)
	require.NoError(t, err)
	require.Contains(t, strings.Join(parts, "\n"), `delta="Hi"`)
	require.Contains(t, string(sse.sent), `"stream":true`)
}

// cutBody returns its bytes, then err.
type cutBody struct {
	r   io.Reader
	err error
}

func (c *cutBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == io.EOF {
		return n, c.err
	}
	return n, err
}
func (c *cutBody) Close() error { return nil }

// Upstream errors map as the streamed path maps them: the same status,
// class, retryability, type and Retry-After for the same answer to a
// streamed and to a non-streamed request; a body cut, or not JSON, fails
// as a cut stream (network, retryable).
func TestUpstreamJSONErrors(t *testing.T) {
	jsonCT := http.Header{"Content-Type": {"application/json"}}
	errBody := []byte(`{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limit_exceeded"}}`)
	for _, tc := range []struct {
		name   string
		status int
		header http.Header
		body   func() io.ReadCloser
		class  abi.ErrorClass
		retry  bool
		same   bool // the streamed path gives the same error
	}{
		{"429 with Retry-After", 429, http.Header{"Content-Type": {"application/json"}, "Retry-After": {"7"}}, bytesBody(errBody), abi.ClassRateLimit, true, true},
		{"500", 500, jsonCT, bytesBody([]byte(`{"error":{"message":"boom","type":"server_error"}}`)), abi.ClassServer, true, true},
		{"502 HTML", 502, http.Header{"Content-Type": {"text/html"}}, bytesBody([]byte(`<html>bad gateway</html>`)), abi.ClassServer, true, true},
		{"400", 400, jsonCT, bytesBody([]byte(`{"error":{"message":"bad","type":"invalid_request_error"}}`)), abi.ClassClient, false, true},
		{"200 with an error object", 200, jsonCT, bytesBody([]byte(`{"error":{"message":"overloaded","type":"server_error"}}`)), abi.ClassServer, true, true},
		{"body cut", 200, jsonCT, func() io.ReadCloser {
			return &cutBody{r: strings.NewReader(`{"id":"c","choices":[{"index":0,"mess`), err: io.ErrUnexpectedEOF}
		}, abi.ClassNetwork, true, false},
		{"body not JSON", 200, jsonCT, bytesBody([]byte(`{"id":"c","choices":[{"index":0,"message":{"content":"Hi"}`)), abi.ClassNetwork, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := &fixedTransport{status: tc.status, header: tc.header, body: tc.body, length: -1}
			_, err := run(t, answerModel(t, js), true)
			var pe *driver.ProviderError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.class, pe.Class, "%v", err)
			require.Equal(t, tc.retry, pe.Retryable)
			if !tc.same {
				return
			}
			_, serr := run(t, answerModel(t, &fixedTransport{status: tc.status, header: tc.header, body: tc.body, length: -1}), false)
			var se *driver.ProviderError
			require.ErrorAs(t, serr, &se)
			require.Equal(t, se.Status, pe.Status)
			require.Equal(t, se.Type, pe.Type)
			require.Equal(t, se.Message, pe.Message)
			require.Equal(t, se.Header.Get("Retry-After"), pe.Header.Get("Retry-After"))
		})
	}
}

// The body is read through MaxAnswer: a Content-Length over it fails
// before any read, a body of unknown length fails as it passes it; both
// with the adapter's limit error (class server, not retryable).
func TestUpstreamJSONCap(t *testing.T) {
	jsonCT := http.Header{"Content-Type": {"application/json"}}
	for _, tc := range []struct {
		name   string
		length int64
		read   int64 // at most this many bytes read
	}{
		{"Content-Length over it", MaxAnswer + 1, 0},
		{"unknown length", -1, MaxAnswer + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &countingBody{r: io.LimitReader(zeros{}, MaxAnswer+10<<20)}
			js := &fixedTransport{status: 200, header: jsonCT, body: func() io.ReadCloser { return body }, length: tc.length}
			_, err := run(t, answerModel(t, js), true)
			pe := conformance.RequireLimit(t, err)
			require.Contains(t, pe.Message, "openai.MaxAnswer")
			require.LessOrEqual(t, body.n, tc.read, "not read past the cap")
		})
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

type countingBody struct {
	r io.Reader
	n int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
func (c *countingBody) Close() error { return nil }

// WithUpstreamJSON is refused with the options it cannot serve.
func TestUpstreamJSONRefusedWith(t *testing.T) {
	for name, opt := range map[string]Option{"WithResponsesAPI": WithResponsesAPI(), "WithRawChunks": WithRawChunks()} {
		_, err := New("m", WithUpstreamJSON(), opt)
		require.ErrorContains(t, err, "WithUpstreamJSON", name)
		require.ErrorContains(t, err, name)
	}
	_, err := New("m", WithUpstreamJSON(), WithChunkFields())
	require.NoError(t, err)
}

// completionSeeds are completions the lean decoder takes and ones it must
// hand to the SDK.
var completionSeeds = []string{
	`{"id":"chatcmpl-1","object":"chat.completion","created":1741569952,"model":"gpt-4o","system_fingerprint":"fp_1","service_tier":"default","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \"there\"\n\u00e9","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":3}}}`,
	`{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},{"id":"call_2","type":"function","function":{"name":"g","arguments":""}}]},"finish_reason":"tool_calls"}]}`,
	`{"choices":[{"index":0,"message":{"content":"x","reasoning_content":"think","reasoning":"other"},"finish_reason":"stop"},{"index":1,"message":{"content":"second"}}]}`,
	`{"choices":[{"index":0,"message":{"refusal":"no"},"logprobs":{"content":null,"refusal":[{"token":"no","logprob":-1}]},"finish_reason":"stop"}]}`,
	`{"choices":[{"index":0,"message":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-0.1,"bytes":[72,105],"top_logprobs":[]}],"refusal":null},"finish_reason":"stop"}]}`,
	`{"choices":[{"index":0,"delta":{"content":"a chunk's shape"},"finish_reason":"stop"}]}`,
	`{"choices":[{"index":0,"message":{"tool_calls":[{"index":5,"id":"c","function":{"name":"f"}}]}}]}`,
	`{"error":{"message":"overloaded","type":"server_error"}}`,
	`{"choices":[{"index":0,"message":{"content":5}}]}`,
	`{"choices":[{"index":0,"message":null,"finish_reason":"length"}]}`,
	`{"choices":null,"usage":null}`,
	`{"c\u0068oices":[]}`,
	`{"choices":[]} x`,
}

// FuzzCompletionDecoders is the differential check of the lean completion
// decoder: for any data it accepts, the SDK decodes the same answer (with
// no error member); data the SDK rejects it rejects too.
func FuzzCompletionDecoders(f *testing.F) {
	for _, s := range completionSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var lean chunk
		ok := decodeCompletion(data, &lean)
		var cc oai.ChatCompletion
		err := json.Unmarshal(data, &cc)
		if !ok {
			return // the SDK decodes it
		}
		require.NoError(t, err, "the lean decoder took what the SDK rejects: %q", data)
		require.False(t, cc.JSON.ExtraFields["error"].Valid() || cc.JSON.ExtraFields["error"].Raw() != "", "an error member was taken: %q", data)
		var slow chunk
		slow.fromCompletion(&cc)
		require.Equal(t, norm(slow), norm(lean), "data %q", data)
	})
}

func TestCompletionDecodersAgreeOnSeeds(t *testing.T) {
	accepted := 0
	for _, s := range completionSeeds {
		var lean chunk
		if !decodeCompletion([]byte(s), &lean) {
			continue
		}
		accepted++
		var cc oai.ChatCompletion
		require.NoError(t, json.Unmarshal([]byte(s), &cc), s)
		var slow chunk
		slow.fromCompletion(&cc)
		require.Equal(t, norm(slow), norm(lean), s)
	}
	require.GreaterOrEqual(t, accepted, 8, "the common completions take the lean path")
	for _, s := range []string{`{"error":{"message":"x"}}`, `{"choices":[{"index":0,"message":{"content":5}}]}`, `{"c\u0068oices":[]}`, `{"choices":[]} x`} {
		require.False(t, decodeCompletion([]byte(s), &chunk{}), "handed to the SDK: %s", s)
	}
}

// A compatible server that answers a non-streamed request (WithUpstreamJSON)
// with a stream anyway gives the parts that stream gives when asked for:
// its events are read as a stream's, not failed as a bad JSON body.
func TestUpstreamJSONAnsweredWithAStream(t *testing.T) {
	_, stream := answerBodies(t, map[string]any{"system_fingerprint": "fp_1"}, map[string]any{"finish_reason": "stop"},
		map[string]any{"role": "assistant", "content": "Hi there"})
	sse := func() *fixedTransport {
		return &fixedTransport{status: 200, header: http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}, body: bytesBody(stream), length: -1}
	}
	want, err := run(t, answerModel(t, sse()), false)
	require.NoError(t, err)
	tr := sse()
	got, err := run(t, answerModel(t, tr), true)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Contains(t, string(tr.sent), `"stream":false`)
}
