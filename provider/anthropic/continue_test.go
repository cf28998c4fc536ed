package anthropic_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/anthropic"
)

// cutAfterText is a Messages stream that reports its input tokens, sends
// text and ends without message_stop (the connection cut).
const cutAfterText = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"m\",\"usage\":{\"input_tokens\":11,\"output_tokens\":1}}}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello \"}}\n\n"

func TestContinue_prefillsTheAssistantTurn(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, cutAfterText)
	}))
	defer srv.Close()
	m, err := anthropic.New("claude-x", anthropic.WithBaseURL(srv.URL), anthropic.WithAPIKey("k"), anthropic.WithMaxRetries(0))
	require.NoError(t, err)

	req := request()
	req.Continue = &driver.Continuation{Text: "Hello wor ld \n", Prompt: "unused"}
	s, err := m.Stream(t.Context(), req)
	require.NoError(t, err)
	for {
		if _, err = s.Recv(); err != nil {
			break
		}
	}
	require.NotErrorIs(t, err, io.EOF, "the stream was cut")
	u, ok := s.(driver.UsageReporter)
	require.True(t, ok)
	require.Equal(t, int64(11), u.UsageSoFar().InputTokens, "a cut stream still reports its input tokens")
	require.NoError(t, s.Close())

	var body struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"messages"`
	}
	mu.Lock()
	require.NoError(t, json.Unmarshal(bodies[0], &body))
	mu.Unlock()
	require.Len(t, body.Messages, 2)
	require.Equal(t, "assistant", body.Messages[1].Role)
	require.Equal(t, "Hello wor ld", body.Messages[1].Content[0].Text, "no trailing white space: the API refuses it")
	require.Len(t, req.Messages, 1, "the caller's request is not modified")

	req.ProviderOptions = map[string]any{"anthropic": map[string]any{"thinking": json.RawMessage(`{"type":"enabled","budget_tokens":1024}`)}}
	_, err = m.Stream(t.Context(), req)
	require.True(t, errors.Is(err, driver.ErrCannotContinue), "%v", err)
}
