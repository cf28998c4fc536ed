package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
)

// bedrockServer answers ConverseStream with the events of the recorded
// Bedrock transcript text, framed as an AWS event stream, and records the
// requests' paths and signatures.
func bedrockServer(t *testing.T) (*httptest.Server, chan *http.Request) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "wire", "bedrock", "text.json"))
	require.NoError(t, err)
	var tr struct {
		Events []struct {
			Event string          `json:"event"`
			Data  json.RawMessage `json:"data"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal(b, &tr))
	var body bytes.Buffer
	enc := eventstream.NewEncoder()
	for _, e := range tr.Events {
		var msg eventstream.Message
		msg.Headers.Set(":event-type", eventstream.StringValue(e.Event))
		msg.Headers.Set(":message-type", eventstream.StringValue("event"))
		msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
		var data bytes.Buffer
		require.NoError(t, json.Compact(&data, e.Data))
		msg.Payload = data.Bytes()
		require.NoError(t, enc.Encode(&body, msg))
	}
	reqs := make(chan *http.Request, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		reqs <- r
		w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		_, _ = w.Write(body.Bytes())
	}))
	t.Cleanup(srv.Close)
	return srv, reqs
}

// serve reaches a Bedrock model a policy file names, for an OpenAI
// client, streamed and not: the region from AWS_REGION, the calls signed
// with the AWS chain's credentials (static ones from the environment).
func TestServeBedrockModel(t *testing.T) {
	t.Setenv("RETRYHOST_API_KEYS", "")
	t.Setenv("AWS_REGION", "eu-central-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	up, reqs := bedrockServer(t)
	pol := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(pol, []byte(`{"models": [{"name": "claude", "provider": "bedrock",
	  "model": "anthropic.claude-3-5-haiku-20241022-v1:0", "base_url": "`+up.URL+`"}]}`), 0o600))
	base, stderr, stop := startServe(t, "--policy", pol, "--watch=false")
	client := oai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	params := oai.ChatCompletionNewParams{Model: "claude", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Hi")}}

	s := client.Chat.Completions.NewStreaming(context.Background(), params)
	var text, finish string
	for s.Next() {
		for _, ch := range s.Current().Choices {
			text += ch.Delta.Content
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	require.NoError(t, s.Err(), stderr.String())
	require.NoError(t, s.Close())
	require.Equal(t, "Hello, world.", text)
	require.Equal(t, "stop", finish)
	r := <-reqs
	require.Equal(t, "/model/anthropic.claude-3-5-haiku-20241022-v1:0/converse-stream", r.URL.Path)
	require.Contains(t, r.Header.Get("Authorization"), "Credential=AKIDEXAMPLE/")
	require.Contains(t, r.Header.Get("Authorization"), "/eu-central-1/bedrock/aws4_request")

	c, err := client.Chat.Completions.New(context.Background(), params)
	require.NoError(t, err, stderr.String())
	require.Equal(t, "Hello, world.", c.Choices[0].Message.Content)
	require.Equal(t, int64(17), c.Usage.PromptTokens)
	require.Equal(t, int64(7), c.Usage.CompletionTokens)
	<-reqs
	require.Equal(t, exitOK, stop())
}
