package openai

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
)

func continueModel(t *testing.T, rec *recorder, opts ...Option) *Model {
	t.Helper()
	m, err := New("m-1", append([]Option{WithBaseURL(rec.srv.URL), WithAPIKey("sk-test"), WithMaxRetries(0)}, opts...)...)
	require.NoError(t, err)
	return m
}

func sentMessages(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var b struct {
		Messages []map[string]any `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(body, &b))
	return b.Messages
}

func TestContinue_sendsThePartialAnswerAndThePrompt(t *testing.T) {
	cont := &driver.Continuation{Text: "The quick brown fo", Prompt: "go on"}
	for _, tc := range []struct {
		name string
		req  *driver.Request
		opts []Option
		want []map[string]any
	}{
		{"built messages", &driver.Request{Messages: []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: "hi"}}}}, Continue: cont}, nil,
			[]map[string]any{{"role": "user", "content": "hi"}, {"role": "assistant", "content": "The quick brown fo"}, {"role": "user", "content": "go on"}}},
		{"forwarded messages", func() *driver.Request { r := gatewayRequest(); r.Continue = cont; return r }(), nil,
			[]map[string]any{{"role": "user", "content": "hi"}, {"role": "assistant", "content": "The quick brown fo"}, {"role": "user", "content": "go on"}}},
		{"prefix", &driver.Request{Messages: []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: "hi"}}}}, Continue: cont}, []Option{WithAssistantPrefix()},
			[]map[string]any{{"role": "user", "content": "hi"}, {"role": "assistant", "content": "The quick brown fo", "prefix": true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder(t)
			m := continueModel(t, rec, tc.opts...)
			s, err := m.Stream(t.Context(), tc.req)
			require.NoError(t, err)
			_, _ = driverDrain(s)
			require.Equal(t, tc.want, sentMessages(t, rec.last(t).body))
		})
	}
	// The caller's forwarded messages are not modified.
	r := gatewayRequest()
	r.Continue = cont
	rec := newRecorder(t)
	s, err := continueModel(t, rec).Stream(t.Context(), r)
	require.NoError(t, err)
	_, _ = driverDrain(s)
	require.JSONEq(t, `[{"role":"user","content":"hi"}]`, string(r.ProviderOptions["openai"].(map[string]any)["messages"].(json.RawMessage)))
}

func TestContinue_refusesWhatASplicedAnswerWouldBreak(t *testing.T) {
	for name, field := range map[string]any{
		"n":               json.RawMessage(`2`),
		"logprobs":        json.RawMessage(`true`),
		"top_logprobs":    3,
		"response_format": json.RawMessage(`{"type":"json_schema","json_schema":{"name":"x","schema":{}}}`),
	} {
		t.Run(name, func(t *testing.T) {
			rec := newRecorder(t)
			r := gatewayRequest()
			r.ProviderOptions["openai"].(map[string]any)[name] = field
			r.Continue = &driver.Continuation{Text: "x", Prompt: "go on"}
			_, err := continueModel(t, rec).Stream(t.Context(), r)
			require.True(t, errors.Is(err, driver.ErrCannotContinue), "%v", err)
			r.Continue = nil
			s, err := continueModel(t, rec).Stream(t.Context(), r)
			require.NoError(t, err, "the same request without a continuation is sent")
			require.NoError(t, s.Close())
		})
	}
}

func driverDrain(s driver.Stream) (n int, err error) {
	defer s.Close()
	for {
		if _, err = s.Recv(); err != nil {
			return n, err
		}
		n++
	}
}
