package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit"
)

// withDefaultsScale runs the policy defaults the gateway gives (backoff,
// cooldown, deadlines) at f times their length.
func withDefaultsScale(f float64) Option {
	return func(c *config) error { c.defaultsScale = f; return nil }
}

// newPassRig starts upstreams primary and backup (Anthropic ones for the
// names in anthropic) and a gateway over a policy of the two as "*"
// models, with extra (fields after "models") and nothing else: the
// gateway's defaults, at a hundredth of their length.
func newPassRig(t *testing.T, extra string, anthropic []string, opts ...Option) *rig {
	t.Helper()
	r := &rig{t: t, up: map[string]*upstream{}, logs: &testkit.LogBuffer{}}
	var models []string
	for _, n := range []string{"primary", "backup"} {
		u := newUpstream(n)
		r.up[n] = u
		spec := fmt.Sprintf(`{"name": %q, "provider": "vllm", "model": "*", "base_url": %q}`, n, u.url())
		if slices.Contains(anthropic, n) {
			spec = fmt.Sprintf(`{"name": %q, "provider": "anthropic", "model": "*", "base_url": %q, "api_key_env": "UPSTREAM_KEY"}`, n, u.srv.URL)
		}
		models = append(models, spec)
	}
	pol := fmt.Sprintf(`{"models": [%s]%s}`, strings.Join(models, ", "), extra)
	r.serve(pol, append([]Option{withDefaultsScale(0.01)}, opts...)...)
	return r
}

// sentModel is the "model" of the i-th request upstream u received.
func sentModel(t *testing.T, u *upstream, i int) string {
	t.Helper()
	hits := u.requests()
	require.Greater(t, len(hits), i)
	var m string
	require.NoError(t, json.Unmarshal(hits[i].body["model"], &m))
	return m
}

// A policy of "*" models alone forwards any model name a client sends:
// the upstream gets that name, the answer names it, and the headers name
// the policy's model that served it.
func TestPassThroughForwardsTheClientsModel(t *testing.T) {
	r := newPassRig(t, "", nil)
	r.up["primary"].play(act{chunks: []string{"Par", "is"}})
	var raw *http.Response
	s := r.client.Chat.Completions.NewStreaming(context.Background(), params("gpt-4o-mini"), option.WithResponseInto(&raw))
	var text string
	models := map[string]bool{}
	for s.Next() {
		models[s.Current().Model] = true
		for _, ch := range s.Current().Choices {
			text += ch.Delta.Content
		}
	}
	require.NoError(t, s.Err())
	require.Equal(t, "Paris", text)
	require.Equal(t, map[string]bool{"gpt-4o-mini": true}, models)
	require.Equal(t, "gpt-4o-mini", sentModel(t, r.up["primary"], 0))
	require.Equal(t, "primary", raw.Header.Get("X-Retryhost-Model"))
	require.Empty(t, r.up["backup"].requests())

	// Non-streaming, and a route's own name: it is the name sent.
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "primary", cc.Model)
	require.Equal(t, "primary", sentModel(t, r.up["primary"], 1))

	// The metrics label an implicit route "*", whatever the client named.
	require.Eventually(t, func() bool {
		return strings.Contains(r.metricsText(), `retryhost_gateway_requests_total{code="200",outcome="ok",route="*"} 1`)
	}, 5*time.Second, 10*time.Millisecond)
	require.Contains(t, r.logs.String(), `"route":"gpt-4o-mini"`)

	// GET /v1/models/{id} answers for any name.
	m, err := r.client.Models.Get(context.Background(), "gpt-4o-mini")
	require.NoError(t, err)
	require.Equal(t, "gpt-4o-mini", m.ID)
}

// With no rules, the gateway's own fail over: a 5xx, a 404 (the model is
// not there) and a 401 (the upstream refuses the gateway's key) move the
// request to the next model with the same name; a 400 of the request's
// own (a context length) is the client's answer, from one upstream.
func TestPassThroughFailsOverWithoutRules(t *testing.T) {
	r := newPassRig(t, "", nil)
	for _, c := range []struct {
		name string
		a    act
	}{
		{"503", act{status: 503}},
		{"404 model not found", act{status: 404, body: `{"error":{"message":"The model 'm' does not exist","type":"invalid_request_error","code":"model_not_found"}}`}},
		{"401", act{status: 401}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r.up["primary"].reset()
			r.up["backup"].reset()
			r.up["primary"].play(c.a)
			r.up["backup"].play(act{chunks: []string{"backup answers"}})
			got := r.stream("some-model")
			require.NoError(t, got.err)
			require.Equal(t, "backup answers", got.text)
			require.Equal(t, map[string]bool{"some-model": true}, got.models)
			require.Equal(t, "some-model", sentModel(t, r.up["backup"], 0))
			require.Len(t, r.up["primary"].requests(), 1)
		})
	}
	r.up["primary"].reset()
	r.up["backup"].reset()
	r.up["primary"].play(act{status: 400, body: `{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}`})
	_, err := r.client.Chat.Completions.New(context.Background(), params("some-model"))
	var apiErr *oai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.Equal(t, "context_length_exceeded", apiErr.Code)
	require.Len(t, r.up["primary"].requests(), 1)
	require.Empty(t, r.up["backup"].requests())
}

// The same through the Messages door, to an Anthropic "*" upstream that
// fails over to an OpenAI-compatible one: each gets the client's model.
func TestPassThroughMessagesDoor(t *testing.T) {
	r := newPassRig(t, "", []string{"primary"})
	r.up["primary"].play(act{status: 529})
	r.up["backup"].play(act{chunks: []string{"backup answers"}})
	msg, err := r.anth.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "claude-x", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	require.NoError(t, err)
	require.Equal(t, "backup answers", msg.Content[0].Text)
	require.Equal(t, anthropic.Model("claude-x"), msg.Model)
	require.Equal(t, "claude-x", sentModel(t, r.up["primary"], 0))
	require.Equal(t, "claude-x", sentModel(t, r.up["backup"], 0))
}

// A request's own fallbacks may name models no route has: each link sends
// its own name.
func TestPassThroughFallbacksNameModels(t *testing.T) {
	r := newPassRig(t, `, "rules": []`, nil)
	r.up["primary"].play(act{status: 503}, act{chunks: []string{"second link"}})
	_, body := r.rawStream(`{"model":"first","stream":true,"fallbacks":["second"],"messages":[{"role":"user","content":"hi"}]}`)
	require.Contains(t, body, `"model":"second"`)
	require.Equal(t, "first", sentModel(t, r.up["primary"], 0))
	require.Equal(t, "second", sentModel(t, r.up["primary"], 1))

	// A 404 (the model is not there) moves on to them too.
	r.up["primary"].play(act{status: 404, body: `{"error":{"message":"The model 'first' does not exist","type":"invalid_request_error","code":"model_not_found"}}`},
		act{chunks: []string{"second link"}})
	resp, body := r.rawStream(`{"model":"first","stream":true,"fallbacks":["second"],"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `"model":"second"`)
}

// A policy whose start is not a "*" model has no implicit route: an
// unknown name is a 404, as ever.
func TestNoImplicitRouteWithoutAnyModel(t *testing.T) {
	r := newRig(t, "")
	_, err := r.client.Chat.Completions.New(context.Background(), params("gpt-4o-mini"))
	var apiErr *oai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	require.Equal(t, "model_not_found", apiErr.Code)
}
