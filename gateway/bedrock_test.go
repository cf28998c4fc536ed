package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit"
)

// bedrockUpstream answers every call as Bedrock would with a recorded
// transcript: its body (a Converse answer or an error), or its events as
// an AWS event stream (ConverseStream). It records the paths it was asked
// and the bodies it got.
func bedrockUpstream(t *testing.T, transcript string) (*httptest.Server, chan string, *bodyLog) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "wire", "bedrock", transcript+".json"))
	require.NoError(t, err)
	var tr struct {
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
		Events  []struct {
			Event string          `json:"event"`
			Data  json.RawMessage `json:"data"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal(b, &tr))
	body := []byte(tr.Body)
	if len(tr.Events) > 0 {
		var stream bytes.Buffer
		enc := eventstream.NewEncoder()
		for _, e := range tr.Events {
			var msg eventstream.Message
			msg.Headers.Set(":event-type", eventstream.StringValue(e.Event))
			msg.Headers.Set(":message-type", eventstream.StringValue("event"))
			msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
			var data bytes.Buffer
			require.NoError(t, json.Compact(&data, e.Data))
			msg.Payload = data.Bytes()
			require.NoError(t, enc.Encode(&stream, msg))
		}
		body = stream.Bytes()
	}
	paths, log := make(chan string, 16), &bodyLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		log.add(b)
		select {
		case paths <- r.URL.Path:
		default:
		}
		for k, v := range tr.Headers {
			w.Header().Set(k, v)
		}
		w.WriteHeader(max(tr.Status, http.StatusOK))
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv, paths, log
}

// bedrockRig serves a policy whose route name is a Bedrock model
// answering transcript, beside the OpenAI-compatible primary and backup,
// under the default rules.
func bedrockRig(t *testing.T, name, transcript string) (*rig, chan string) {
	t.Helper()
	return bedrockRigOf(t, name, transcript, "openai", defaultRules)
}

// bedrockRigOf is bedrockRig with the other model of provider other
// (openai or anthropic) and rules.
func bedrockRigOf(t *testing.T, name, transcript, other, rules string) (*rig, chan string) {
	t.Helper()
	awsEnv(t)
	r := &rig{t: t, up: map[string]*upstream{}, logs: &testkit.LogBuffer{}}
	var models []string
	var paths chan string
	for _, n := range []string{"primary", "backup"} {
		if n == name {
			var srv *httptest.Server
			srv, paths, _ = bedrockUpstream(t, transcript)
			models = append(models, fmt.Sprintf(`{"name": %q, "provider": "bedrock", "model": "anthropic.claude-3-5-haiku-20241022-v1:0", "region": "us-east-1", "base_url": %q}`,
				n, srv.URL))
			continue
		}
		u := newUpstream(n)
		r.up[n] = u
		base := u.url()
		if other == "anthropic" {
			base = u.srv.URL
		}
		models = append(models, fmt.Sprintf(`{"name": %q, "provider": %q, "model": "up-%s", "base_url": %q, "api_key_env": "UPSTREAM_KEY"}`, n, other, n, base))
	}
	r.serve(fmt.Sprintf(`{"models": [%s], %s}`, strings.Join(models, ", "), rules))
	return r, paths
}

// awsEnv gives the Bedrock adapter, which signs with the AWS default
// chain's credentials, static ones from the environment, and no files.
func awsEnv(t *testing.T) {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// An OpenAI client's streamed chat completion is answered by a Bedrock
// model over ConverseStream, text, finish and usage translated.
func TestBedrockStreamsToOpenAIClient(t *testing.T) {
	r, paths := bedrockRig(t, "primary", "text")
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Hello, world.", got.text)
	require.Equal(t, "stop", got.finish)
	require.Equal(t, map[string]bool{"primary": true}, got.models)
	require.NotNil(t, got.usage)
	require.Equal(t, int64(17), got.usage.PromptTokens)
	require.Equal(t, int64(7), got.usage.CompletionTokens)
	require.Equal(t, "/model/anthropic.claude-3-5-haiku-20241022-v1:0/converse-stream", <-paths)
}

// An OpenAI client's non-streamed chat completion is answered by a
// Bedrock model.
func TestBedrockAnswersOpenAIClientWhole(t *testing.T) {
	r, _ := bedrockRig(t, "primary", "text")
	c, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "Hello, world.", c.Choices[0].Message.Content)
	require.Equal(t, "stop", c.Choices[0].FinishReason)
	require.Equal(t, "primary", c.Model)
}

// A Bedrock answer its content filter withheld fails over, as a refusal,
// to an OpenAI-compatible model.
func TestBedrockContentFilterFailsOverToOpenAI(t *testing.T) {
	r, _ := bedrockRig(t, "primary", "content_filtered")
	r.up["backup"].play(act{chunks: []string{"Paris", "."}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Paris.", got.text)
	require.Equal(t, map[string]bool{"backup": true}, got.models)
}

// An OpenAI-compatible model's overload fails over to a Bedrock model,
// for an OpenAI client and for an Anthropic one.
func TestOpenAIFailsOverToBedrock(t *testing.T) {
	r, _ := bedrockRig(t, "backup", "text")
	r.up["primary"].play(act{status: 503})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Hello, world.", got.text)
	require.Equal(t, map[string]bool{"backup": true}, got.models)

	r.up["primary"].play(act{status: 503})
	m, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
	require.NoError(t, err)
	require.Equal(t, "backup", string(m.Model))
	require.Equal(t, "Hello, world.", m.Content[0].Text)
}

// switchOnRateLimit moves a throttled or overloaded request to the other
// model at once.
const switchOnRateLimit = `"rules": [{"when": {"class": ["rate-limit", "overloaded"]}, "action": "switch", "model": "backup"}]`

// A throttled Bedrock model (ThrottlingException, 429) fails over to an
// Anthropic model, for an OpenAI client.
func TestBedrockThrottlingFailsOverToAnthropic(t *testing.T) {
	r, _ := bedrockRigOf(t, "primary", "throttling_429", "anthropic", switchOnRateLimit)
	r.up["backup"].play(act{chunks: []string{"Paris", "."}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Paris.", got.text)
	require.Equal(t, map[string]bool{"backup": true}, got.models)
}

// An overloaded Anthropic model fails over to a Bedrock model, for an
// Anthropic client.
func TestAnthropicFailsOverToBedrock(t *testing.T) {
	r, _ := bedrockRigOf(t, "backup", "text", "anthropic", switchOnRateLimit)
	r.up["primary"].play(act{status: 529})
	m, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
	require.NoError(t, err)
	require.Equal(t, "backup", string(m.Model))
	require.Equal(t, "Hello, world.", m.Content[0].Text)
}

// A Bedrock guardrail that intervenes before any content of the model's
// (ConverseStream's messageStop guardrail_intervened, no text) fails over
// as a refusal to an OpenAI-compatible model, for a streamed request and
// for one answered whole.
func TestBedrockStreamedGuardrailFailsOverToOpenAI(t *testing.T) {
	r, paths := bedrockRig(t, "primary", "guardrail_no_content")
	r.up["backup"].play(act{chunks: []string{"Paris", "."}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Paris.", got.text)
	require.Equal(t, map[string]bool{"backup": true}, got.models)
	require.Equal(t, "/model/anthropic.claude-3-5-haiku-20241022-v1:0/converse-stream", <-paths)

	r.up["backup"].play(act{chunks: []string{"Paris", "."}})
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "backup", cc.Model)
	require.Equal(t, "Paris.", cc.Choices[0].Message.Content)
}

// A guardrail that intervenes after its blocked message came as text is a
// content-filter finish: a request answered whole is judged at its end,
// so a finish rule moves it to another model before the client sees the
// message; a stream has committed on the text and gets it, finish
// content_filter.
func TestBedrockGuardrailAfterTextIsAContentFilterFinish(t *testing.T) {
	r, _ := bedrockRigOf(t, "primary", "guardrail_after_text", "openai",
		`"rules": [{"when": {"finish": ["content-filter"]}, "action": "switch", "model": "backup"}]`)
	r.up["backup"].play(act{chunks: []string{"Paris", "."}})
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "backup", cc.Model)
	require.Equal(t, "Paris.", cc.Choices[0].Message.Content)

	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Sorry, the model cannot answer this question.", got.text)
	require.Equal(t, "content_filter", got.finish)
	require.Equal(t, map[string]bool{"primary": true}, got.models)
}
