package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
)

// bodyCapture answers every request with an empty stream and keeps the
// bodies it was sent.
type bodyCapture struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (c *bodyCapture) RoundTrip(r *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(r.Body)
	_ = r.Body.Close()
	c.mu.Lock()
	c.bodies = append(c.bodies, b)
	c.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader([]byte("data: [DONE]\n\n"))), ContentLength: -1, Request: r}, nil
}

// sentBody is the body a request goes out with, written by the SDK (sdk)
// or by leanBody; without one, the call's error (a non-streaming call's
// answer here is not a completion: what it makes of it does not matter).
func sentBody(t *testing.T, req *driver.Request, stream, sdk bool, opts ...Option) ([]byte, error) {
	c := &bodyCapture{}
	m, err := New("m-1", append([]Option{WithBaseURL("http://mem/v1"), WithAPIKey("k"),
		WithHTTPClient(&http.Client{Transport: c})}, opts...)...)
	require.NoError(t, err)
	m.sdkBody = sdk
	if stream {
		var st driver.Stream
		if st, err = m.Stream(context.Background(), req); err == nil {
			_ = st.Close()
		}
	} else {
		_, err = m.Generate(context.Background(), req)
	}
	if len(c.bodies) == 0 {
		return nil, err
	}
	return c.bodies[0], nil
}

// A body whose messages (and tools) come raw in the ProviderOptions entry,
// as a gateway forwards them, is written without the SDK's encoder and
// merge: the object sent is the one the SDK path sends, member for member,
// streamed and not, whatever the request's own fields and the model's.
func TestLeanBodyIsTheSDKsObject(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	seed := int64(-42)
	msgs := json.RawMessage("[ {\"role\": \"user\",\n \"content\": \"a <b> & c \\u00e9\"} ]")
	tests := map[string]struct {
		req  driver.Request
		opts []Option
	}{
		"messages only": {req: driver.Request{}},
		"every own field": {req: driver.Request{MaxOutputTokens: 64, Temperature: f(0.7), TopP: f(1), Seed: &seed,
			StopSequences: []string{"\n\n", `"quoted"`, "é"}}},
		"floats encoding/json writes with an exponent": {req: driver.Request{Temperature: f(1e-7), TopP: f(1e21)}},
		"zero and negative floats":                     {req: driver.Request{Temperature: f(0), TopP: f(-0.000001)}},
		"forwarded fields win": {req: driver.Request{MaxOutputTokens: 64, Temperature: f(0.2),
			ProviderOptions: map[string]any{"openai": map[string]any{
				"temperature": json.RawMessage(`0.9`), "max_completion_tokens": json.RawMessage(`64`),
				"stop": json.RawMessage(`"x"`), "model": json.RawMessage(`"forwarded-model"`),
				"stream_options": json.RawMessage(`{"include_usage":false}`)}}}},
		"forwarded max_tokens drops max_completion_tokens": {req: driver.Request{MaxOutputTokens: 64,
			ProviderOptions: map[string]any{"openai": map[string]any{"max_tokens": json.RawMessage(`64`)}}}},
		"legacy max tokens": {req: driver.Request{MaxOutputTokens: 9}, opts: []Option{WithLegacyMaxTokens()}},
		"odd keys and values": {req: driver.Request{ProviderOptions: map[string]any{"openai": map[string]any{
			"x.vendor": json.RawMessage(" {\"a\" : [1, 2.50, \"x\"]} "), "weird*?|#@:key\"\\é": json.RawMessage(`true`),
			"empty": json.RawMessage(nil), "html": json.RawMessage(`"<script>&"`)}}}},
		"raw tools over the request's": {req: driver.Request{Tools: []driver.Tool{{Name: "t", Schema: "not json"}},
			ProviderOptions: map[string]any{"openai": map[string]any{"tools": json.RawMessage(`[{"type":"function","function":{"name":"raw"}}]`)}}}},
		"the model's params win": {req: driver.Request{Temperature: f(0.5), ProviderOptions: map[string]any{"openai": map[string]any{
			"user": json.RawMessage(`"u"`)}}}, opts: []Option{WithParam("temperature", 0.1), WithParam("user", "model's")}},
	}
	for name, tc := range tests {
		for _, stream := range []bool{true, false} {
			t.Run(name, func(t *testing.T) {
				req := tc.req
				fields := map[string]any{"messages": msgs}
				if po, ok := req.ProviderOptions["openai"].(map[string]any); ok {
					for k, v := range po {
						fields[k] = v
					}
				}
				req.ProviderOptions = map[string]any{"openai": fields}
				want, err := sentBody(t, &req, stream, true, tc.opts...)
				require.NoError(t, err)
				got, err := sentBody(t, &req, stream, false, tc.opts...)
				require.NoError(t, err)
				require.JSONEq(t, string(want), string(got))
				require.True(t, json.Valid(got))
			})
		}
	}
}

// A body the lean path cannot write as valid JSON fails as the SDK's does,
// before anything is sent.
func TestLeanBodyRefusesWhatTheSDKRefuses(t *testing.T) {
	nan := 0.0
	nan /= nan
	msgs := json.RawMessage(`[{"role":"user","content":"hi"}]`)
	tests := map[string]driver.Request{
		"invalid raw value": {ProviderOptions: map[string]any{"openai": map[string]any{"messages": msgs, "x": json.RawMessage(`{"a":`)}}},
		"NaN temperature":   {Temperature: &nan, ProviderOptions: map[string]any{"openai": map[string]any{"messages": msgs}}},
	}
	for name, req := range tests {
		t.Run(name, func(t *testing.T) {
			for _, sdk := range []bool{true, false} {
				body, err := sentBody(t, &req, true, sdk)
				require.Error(t, err, "sdk %v", sdk)
				require.Nil(t, body, "sdk %v", sdk)
			}
		})
	}
}
