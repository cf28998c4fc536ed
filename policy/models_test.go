package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/policy"
)

// seen is one request a loopback server received.
type seen struct {
	Path, Query string
	Header      http.Header
	Body        map[string]any
}

// server answers like an OpenAI-compatible or Anthropic server (by path),
// or with status when it is not 200, and records what it received.
type server struct {
	*httptest.Server
	mu     sync.Mutex
	status int
	got    []seen
}

func newServer(t *testing.T, status int) *server {
	s := &server{status: status}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		data, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(data, &body)
		s.mu.Lock()
		s.got = append(s.got, seen{Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if s.status != http.StatusOK {
			w.WriteHeader(s.status)
			fmt.Fprint(w, `{"error": {"message": "unavailable", "type": "server_error"}}`)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/messages") {
			fmt.Fprintf(w, `{"id": "msg_1", "type": "message", "role": "assistant", "model": %q, "content": [{"type": "text", "text": "hi from %s"}],
			  "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 2}}`, body["model"], r.Host)
			return
		}
		fmt.Fprintf(w, `{"id": "c1", "object": "chat.completion", "created": 1, "model": %q,
		  "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi from %s"}, "finish_reason": "stop"}]}`, body["model"], r.Host)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.got...)
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

var question = &driver.Request{Messages: []driver.Message{driver.UserText("hi")}, Temperature: ptr(0.9)}

func ptr[T any](v T) *T { return &v }

// TestTwoDeploymentsOfOneModel: gpt-4o in two regions is two models with
// one provider and model id and two names; a rule switches from one to the
// other by name, and the request really moves to the second server. Before
// names were keys this failed with "two different models share the key
// openai/gpt-4o" at line 1:1.
func TestTwoDeploymentsOfOneModel(t *testing.T) {
	ctx := context.Background()
	eu, us := newServer(t, http.StatusServiceUnavailable), newServer(t, http.StatusOK)
	p, err := policy.Parse(ctx, []byte(`models:
  - {name: gpt-4o-eu, provider: openai, model: gpt-4o, base_url: "`+eu.URL+`/v1", api_key_env: EU_KEY}
  - {name: gpt-4o-us, provider: openai, model: gpt-4o, base_url: "`+us.URL+`/v1", api_key_env: US_KEY}
rules:
  - {when: {status: [503]}, action: switch, model: gpt-4o-us}
`), policy.Options{Name: "p.yaml", Getenv: env(map[string]string{"EU_KEY": "eu-key", "US_KEY": "us-key"})})
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	var tried []string
	resp, err := driver.Do(ctx, p.Runner, func(ctx context.Context, c *driver.Call) (*driver.Response, error) {
		tried = append(tried, c.Model.Key())
		return c.Model.Generate(ctx, c.Request(question))
	})
	require.NoError(t, err)
	require.Equal(t, []string{"gpt-4o-eu", "gpt-4o-us"}, tried)
	require.Equal(t, "hi from "+strings.TrimPrefix(us.URL, "http://"), resp.Text())
	require.Len(t, eu.requests(), 1)
	require.Equal(t, "Bearer eu-key", eu.requests()[0].Header.Get("Authorization"), "each deployment its own key")
	require.Equal(t, "Bearer us-key", us.requests()[0].Header.Get("Authorization"))

	// The same name twice is the mistake, pointed at the second entry.
	_, err = policy.Parse(ctx, []byte(`{"models": [
  {"name": "gpt-4o", "provider": "openai", "model": "gpt-4o", "api_key_env": "EU_KEY"},
  {"name": "gpt-4o", "provider": "azure", "deployment": "gpt4o", "api_version": "2024-10-21", "base_url": "https://x.openai.azure.com", "api_key_env": "US_KEY"}
]}`), policy.Options{Name: "p.json", Getenv: env(map[string]string{"EU_KEY": "k", "US_KEY": "k"})})
	require.EqualError(t, err, `p.json: line 3:12: models[1].name: duplicate model name "gpt-4o" (models[0] has it): the name is the model's key, so give each deployment its own`)
}

// TestModelHeadersAndParams: a model's headers and params reach the wire
// on both adapters, and a param overrides the request's own field.
func TestModelHeadersAndParams(t *testing.T) {
	ctx := context.Background()
	oai, ant := newServer(t, http.StatusOK), newServer(t, http.StatusOK)
	p, err := policy.Parse(ctx, []byte(`models:
  - name: router
    provider: openrouter
    model: meta-llama/llama-3-70b
    base_url: `+oai.URL+`/api/v1
    api_key_env: OR_KEY
    headers: {HTTP-Referer: "https://example.com", X-Title: my-app}
    params: {temperature: 0.2, max_completion_tokens: 64, provider: {order: [groq]}}
  - name: claude-b
    provider: anthropic
    model: claude-sonnet-4-5
    base_url: `+ant.URL+`
    api_key_env: ANT_KEY_B
    headers: {anthropic-beta: "x-beta"}
    params: {temperature: 0.1, top_k: 5}
`), policy.Options{Name: "p.yaml", Getenv: env(map[string]string{"OR_KEY": "k1", "ANT_KEY_B": "k2"})})
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	for _, name := range []string{"router", "claude-b"} {
		_, err := p.Models[name].Generate(ctx, question)
		require.NoError(t, err, name)
	}
	o := oai.requests()[0]
	require.Equal(t, "/api/v1/chat/completions", o.Path)
	require.Equal(t, "https://example.com", o.Header.Get("HTTP-Referer"))
	require.Equal(t, "my-app", o.Header.Get("X-Title"))
	require.Equal(t, 0.2, o.Body["temperature"], "the param overrides the request's 0.9")
	require.Equal(t, 64.0, o.Body["max_completion_tokens"])
	require.Equal(t, map[string]any{"order": []any{"groq"}}, o.Body["provider"])
	require.Equal(t, "meta-llama/llama-3-70b", o.Body["model"])

	a := ant.requests()[0]
	require.Equal(t, "/v1/messages", a.Path)
	require.Equal(t, "x-beta", a.Header.Get("anthropic-beta"))
	require.Contains(t, a.Header.Get("X-Api-Key")+a.Header.Get("Authorization"), "k2", "its own account's key")
	require.Equal(t, 0.1, a.Body["temperature"])
	require.Equal(t, 5.0, a.Body["top_k"])
	provider, id := driver.Describe(p.Models["claude-b"])
	require.Equal(t, []string{"anthropic", "claude-sonnet-4-5"}, []string{provider, id})
}

// TestAzureAndLocalServers: Azure OpenAI's deployment and api-version
// shape (the key in api-key, never a bearer token, so an OpenAI key in the
// environment does not travel to Azure), and a local vLLM or Ollama server
// without a key, which gets no Authorization header either.
func TestAzureAndLocalServers(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-openai-must-not-leak")
	ctx := context.Background()
	az, local := newServer(t, http.StatusOK), newServer(t, http.StatusOK)
	p, err := policy.Parse(ctx, []byte(`models:
  - {name: azure-eu, provider: azure, model: gpt-4o, deployment: prod-gpt4o, api_version: 2024-10-21, base_url: "`+az.URL+`", api_key_env: AZ_KEY}
  - {name: local, provider: vllm, model: llama3, base_url: "`+local.URL+`/v1"}
`), policy.Options{Name: "p.yaml", Getenv: env(map[string]string{"AZ_KEY": "az-key"})})
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	for _, name := range []string{"azure-eu", "local"} {
		_, err := p.Models[name].Generate(ctx, question)
		require.NoError(t, err, name)
	}
	a := az.requests()[0]
	require.Equal(t, "/openai/deployments/prod-gpt4o/chat/completions", a.Path)
	require.Equal(t, "api-version=2024-10-21", a.Query)
	require.Equal(t, "az-key", a.Header.Get("Api-Key"))
	require.Empty(t, a.Header.Get("Authorization"))
	provider, id := driver.Describe(p.Models["azure-eu"])
	require.Equal(t, []string{"azure", "gpt-4o"}, []string{provider, id})

	l := local.requests()[0]
	require.Equal(t, "/v1/chat/completions", l.Path)
	require.Empty(t, l.Header.Get("Authorization"), "no key named: none sent, not the environment's OpenAI key")
}

// TestModelMistakes: what a provider needs is checked with the field's
// place, and a key pasted into api_key_env is never echoed.
func TestModelMistakes(t *testing.T) {
	const secret = "sk-proj-abc123SECRET456"
	tests := []struct{ name, model, want string }{
		{"key pasted as the env name", `{name: m, provider: openai, model: gpt-4o, api_key_env: ` + secret + `}`,
			"line 1:66: models[0].api_key_env: not an environment variable name"},
		{"key made of name characters", `{name: m, provider: openai, model: gpt-4o, api_key_env: sk_live_51HqLyjWDarjtT1zdp7dc}`,
			"models[0].api_key_env: not an environment variable name"},
		{"azure needs a deployment", `{name: m, provider: azure, api_version: v, base_url: "https://x.openai.azure.com", api_key_env: K}`,
			"models[0].deployment: required for provider azure"},
		{"azure needs an endpoint", `{name: m, provider: azure, deployment: d, api_version: v, api_key_env: K}`,
			"models[0].base_url: required for provider azure: the resource's endpoint"},
		{"deployment only for azure", `{name: m, provider: openai, model: gpt-4o, deployment: d, api_key_env: K}`,
			"models[0].deployment: only for provider azure"},
		{"vertex needs a project", `{name: m, provider: vertex, model: gemini-2.5-flash, location: us-central1}`,
			"models[0].project: required for provider vertex: a Google Cloud project id"},
		{"vertex needs a location", `{name: m, provider: vertex, model: gemini-2.5-flash, project: my-project}`,
			"models[0].location: required for provider vertex: a Vertex AI location (such as us-central1, or global)"},
		{"vertex location not an id", `{name: m, provider: vertex, model: gemini-2.5-flash, project: my-project, location: "us central"}`,
			`models[0].location: "us central" is not a Vertex AI location`},
		{"project only for vertex", `{name: m, provider: gemini, model: gemini-2.5-flash, api_key_env: K, project: my-project}`,
			"models[0].project: only for provider vertex"},
		{"vllm needs a base url", `{name: m, provider: vllm, model: llama3}`, "models[0].base_url: required for provider vllm"},
		{"bad base url", `{name: m, provider: ollama, model: llama3, base_url: "localhost:11434"}`, `models[0].base_url: "localhost:11434" is not an absolute http(s) URL`},
		{"named key env unset", `{name: m, provider: ollama, model: llama3, api_key_env: K2}`, "models[0].api_key_env: environment variable K2 is not set"},
		{"bad header", `{name: m, provider: openai, model: gpt-4o, api_key_env: K, headers: {"a b": x}}`, `models[0].headers.a b: not a valid header name`},
		{"param path", `{name: m, provider: openai, model: gpt-4o, api_key_env: K, params: {a.b: 1}}`, `models[0].params.a.b: not a top-level field name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.Parse(context.Background(), []byte("models: ["+tt.model+"]"), policy.Options{Name: "p.yaml", Getenv: env(map[string]string{"K": "k"})})
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), secret)
			require.NotContains(t, err.Error(), "sk_live")
			verr := policy.Validate(context.Background(), []byte("models: ["+tt.model+"]"), policy.Options{Name: "p.yaml"})
			if tt.name != "named key env unset" {
				require.ErrorContains(t, verr, tt.want, "Validate finds it too")
				require.NotContains(t, verr.Error(), secret)
			} else {
				require.NoError(t, verr, "Validate reads no key")
			}
		})
	}
}

// TestMaxTokensParamReplacesTheRequests: a max_tokens param on an
// OpenAI-compatible model replaces the request's MaxOutputTokens instead of
// sending both fields, which servers reject.
func TestMaxTokensParamReplacesTheRequests(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, http.StatusOK)
	p, err := policy.Parse(ctx, []byte(`models:
  - {name: m, provider: vllm, model: llama3, base_url: "`+srv.URL+`/v1", params: {max_tokens: 32}}
`), policy.Options{Name: "p.yaml"})
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	_, err = p.Models["m"].Generate(ctx, &driver.Request{Messages: []driver.Message{driver.UserText("hi")}, MaxOutputTokens: 500})
	require.NoError(t, err)
	body := srv.requests()[0].Body
	require.Equal(t, 32.0, body["max_tokens"])
	require.NotContains(t, body, "max_completion_tokens")
}

// TestResponsesAPI: `api: responses` sends an OpenAI-compatible model's
// requests to the Responses API; any other value, or the field on a
// provider that has no such API, is an error at its place.
func TestResponsesAPI(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, http.StatusOK)
	p, err := policy.Parse(ctx, []byte(`models:
  - {name: r, provider: vllm, model: llama3, api: responses, base_url: "`+srv.URL+`/v1"}
  - {name: c, provider: vllm, model: llama3, api: chat, base_url: "`+srv.URL+`/v1"}
`), policy.Options{Name: "p.yaml"})
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	_, _ = p.Models["r"].Generate(ctx, question) // the test server answers in the chat shape
	_, err = p.Models["c"].Generate(ctx, question)
	require.NoError(t, err)
	got := srv.requests()
	require.Len(t, got, 2)
	require.Equal(t, "/v1/responses", got[0].Path)
	require.Equal(t, "/v1/chat/completions", got[1].Path)

	for _, tc := range []struct{ model, want string }{
		{`{name: m, provider: openai, model: gpt-4o, api_key_env: K, api: completions}`, `models[0].api: "completions" is not an API (want chat or responses)`},
		{`{name: m, provider: anthropic, model: claude, api_key_env: K, api: responses}`, "models[0].api: responses is only for providers openai, openrouter, vllm and ollama"},
		{`{name: m, provider: azure, deployment: d, api_version: v, base_url: "https://x.openai.azure.com", api_key_env: K, api: responses}`, "models[0].api: responses is only for"},
	} {
		_, err := policy.Parse(ctx, []byte("models:\n  - "+tc.model+"\n"), policy.Options{Name: "p.yaml", Getenv: env(map[string]string{"K": "k"})})
		require.ErrorContains(t, err, tc.want, tc.model)
	}
}

// TestUpstreamJSON: `upstream_json: true` has an OpenAI-compatible model
// ask for a non-streamed answer for the requests that commit at their end
// (and only those), and the answer comes back as parts; on a provider or
// an API that is always streamed it is an error at its place, in Parse
// and in Validate.
func TestUpstreamJSON(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, http.StatusOK)
	p, err := policy.Parse(ctx, []byte(`models:
  - {name: j, provider: vllm, model: llama3, upstream_json: true, base_url: "`+srv.URL+`/v1"}
  - {name: s, provider: vllm, model: llama3, base_url: "`+srv.URL+`/v1"}
`), policy.Options{Name: "p.yaml"})
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	st, err := p.Models["j"].Stream(driver.CommitAtEnd(ctx), question)
	require.NoError(t, err)
	var text strings.Builder
	for {
		part, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		text.WriteString(part.Delta)
	}
	require.NoError(t, st.Close())
	require.Contains(t, text.String(), "hi from")
	for _, name := range []string{"j", "s"} { // streamed: the test server's JSON ends them, unread here
		for _, ctx := range []context.Context{ctx, driver.CommitAtEnd(ctx)} {
			if name == "j" && driver.CommitsAtEnd(ctx) {
				continue
			}
			if st, err := p.Models[name].Stream(ctx, question); err == nil {
				require.NoError(t, st.Close())
			}
		}
	}
	got := srv.requests()
	require.Len(t, got, 4)
	require.Equal(t, false, got[0].Body["stream"], "non-streamed")
	for _, g := range got[1:] {
		require.Equal(t, true, g.Body["stream"], "streamed")
	}

	for _, tc := range []struct{ model, want string }{
		{`{name: m, provider: anthropic, model: claude, api_key_env: K, upstream_json: true}`, "models[0].upstream_json: only for the OpenAI-compatible providers"},
		{`{name: m, provider: openai, model: gpt-4o, api_key_env: K, api: responses, upstream_json: true}`, "models[0].upstream_json: only for api chat"},
	} {
		_, err := policy.Parse(ctx, []byte("models:\n  - "+tc.model+"\n"), policy.Options{Name: "p.yaml", Getenv: env(map[string]string{"K": "k"})})
		require.ErrorContains(t, err, tc.want, tc.model)
		err = policy.Validate(ctx, []byte("models:\n  - "+tc.model+"\n"), policy.Options{Name: "p.yaml"})
		require.ErrorContains(t, err, tc.want, tc.model)
	}
}

// TestAnyModelID: a model whose id is "*" sends the id each request names
// (driver.Request.ModelID), on both adapters; azure, whose deployment
// names the model, refuses it.
func TestAnyModelID(t *testing.T) {
	ctx := context.Background()
	oai, ant := newServer(t, http.StatusOK), newServer(t, http.StatusOK)
	p, err := policy.Parse(ctx, []byte(`models:
  - {name: any, provider: vllm, model: "*", base_url: "`+oai.URL+`/v1"}
  - {name: claude, provider: anthropic, model: "*", base_url: "`+ant.URL+`", api_key_env: K}
`), policy.Options{Name: "p.yaml", Getenv: env(map[string]string{"K": "k"})})
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	for name, s := range map[string]*server{"any": oai, "claude": ant} {
		req := *question
		req.ModelID = "asked-for"
		_, err := p.Models[name].Generate(ctx, &req)
		require.NoError(t, err, name)
		require.Equal(t, "asked-for", s.requests()[0].Body["model"], name)
		_, err = p.Models[name].Generate(ctx, question)
		require.ErrorContains(t, err, `the model's id is "*" and the request names none`, name)
	}
	_, err = policy.Parse(ctx, []byte(`{"models": [{"name": "az", "provider": "azure", "model": "*", "deployment": "d", "api_version": "2024-10-21", "base_url": "https://x.openai.azure.com", "api_key_env": "K"}]}`),
		policy.Options{Name: "p.json", Getenv: env(map[string]string{"K": "k"})})
	require.ErrorContains(t, err, `models[0].model: "*" is not for provider azure`)
}

// A vertex model with an express-mode key needs no project: the key
// names it, sent in x-goog-api-key, and the path has none. Without a key
// it takes the Application Default Credentials, and a load without any
// says so.
func TestVertexModel(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, http.StatusServiceUnavailable)
	p, err := policy.Parse(ctx, []byte(`{"models": [{"name": "flash", "provider": "vertex", "model": "gemini-2.5-flash",
	  "api_key_env": "K", "base_url": "`+srv.URL+`"}]}`), policy.Options{Getenv: env(map[string]string{"K": "express-key"})})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(ctx) })
	prov, id := driver.Describe(p.Models["flash"])
	require.Equal(t, "vertex", prov)
	require.Equal(t, "gemini-2.5-flash", id)
	_, err = p.Models["flash"].Generate(ctx, &driver.Request{Messages: []driver.Message{driver.UserText("hi")}})
	require.Error(t, err)
	got := srv.requests()
	require.NotEmpty(t, got)
	require.Equal(t, "/v1beta1/publishers/google/models/gemini-2.5-flash:generateContent", got[0].Path)
	require.Equal(t, "express-key", got[0].Header.Get("X-Goog-Api-Key"))

	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", t.TempDir()+"/none.json")
	_, err = policy.Parse(ctx, []byte(`{"models": [{"name": "flash", "provider": "vertex", "model": "gemini-2.5-flash",
	  "project": "my-project", "location": "us-central1", "base_url": "`+srv.URL+`"}]}`), policy.Options{})
	require.ErrorContains(t, err, "models[0]: gemini: Vertex AI without an API key needs Application Default Credentials")
}
