package gateway

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit"
)

// wireUp is a loopback upstream that answers each request with the next
// of its answers (the last one again when they run out), in a provider's
// wire format, and records what it got.
type wireUp struct {
	srv     *httptest.Server
	mu      sync.Mutex
	answers []wireAnswer
	got     []wireGot
}

type wireAnswer struct {
	status int
	body   string
	header map[string]string
}

type wireGot struct {
	method string
	path   string // and the query, if any
	header http.Header
	body   map[string]any
}

func newWireUp(t *testing.T, answers ...wireAnswer) *wireUp {
	t.Helper()
	u := &wireUp{answers: answers}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		u.mu.Lock()
		path := r.URL.Path
		if r.URL.RawQuery != "" {
			path += "?" + r.URL.RawQuery
		}
		u.got = append(u.got, wireGot{method: r.Method, path: path, header: r.Header.Clone(), body: body})
		a := u.answers[min(len(u.got), len(u.answers))-1]
		u.mu.Unlock()
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *wireUp) requests() []wireGot {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]wireGot(nil), u.got...)
}

// doorRig serves pol, a policy whose base URLs name wireUps, through a
// gateway.
func doorRig(t *testing.T, pol string, opts ...Option) *rig {
	t.Helper()
	r := &rig{t: t, up: map[string]*upstream{}, logs: &testkit.LogBuffer{}}
	r.serve(pol, opts...)
	return r
}

// Anthropic's wire answers.
var (
	antOverloaded = wireAnswer{status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}
	antInvalid    = wireAnswer{status: 400, body: `{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}`}
	antCount      = func(n int) wireAnswer { return wireAnswer{status: 200, body: fmt.Sprintf(`{"input_tokens":%d}`, n)} }
)

func antModel(name, id string, u *wireUp) string {
	return fmt.Sprintf(`{"name": %q, "provider": "anthropic", "model": %q, "base_url": %q, "api_key_env": "K"}`, name, id, u.srv.URL)
}

func oaiModel(name, id string, u *wireUp, extra string) string {
	return fmt.Sprintf(`{"name": %q, "provider": "openai", "model": %q, "base_url": %q, "api_key_env": "K"%s}`, name, id, u.srv.URL+"/v1", extra)
}

func countParams(model string) anthropic.MessageCountTokensParams {
	return anthropic.MessageCountTokensParams{Model: anthropic.Model(model),
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Capital of France?"))}}
}

func TestCountTokens_FailsOverBetweenTheRoutesAnthropicModels(t *testing.T) {
	a1, a2 := newWireUp(t, antOverloaded), newWireUp(t, antCount(42))
	r := doorRig(t, `{"models": [`+antModel("c1", "claude-one", a1)+`, `+antModel("c2", "claude-two", a2)+`],
		"groups": [{"name": "claude", "models": ["c1", "c2"]}]}`)
	var raw *http.Response
	got, err := r.anth.Messages.CountTokens(context.Background(), countParams("claude"),
		aoption.WithResponseInto(&raw), aoption.WithHeader("anthropic-beta", "token-counting-2024-11-01"))
	require.NoError(t, err)
	require.EqualValues(t, 42, got.InputTokens)
	require.Equal(t, "c2", raw.Header.Get("X-Retryhost-Model"))
	require.Equal(t, "2", raw.Header.Get("X-Retryhost-Attempts"))
	for i, u := range []*wireUp{a1, a2} {
		reqs := u.requests()
		require.Len(t, reqs, 1)
		require.Equal(t, "/v1/messages/count_tokens", reqs[0].path)
		require.Equal(t, []string{"claude-one", "claude-two"}[i], reqs[0].body["model"])
		require.NotEmpty(t, reqs[0].body["messages"])
		require.Contains(t, reqs[0].header.Get("X-Api-Key")+reqs[0].header.Get("Authorization"), "sk-upstream", "the upstream's key, not the client's")
		require.NotEmpty(t, reqs[0].header.Get("Anthropic-Version"))
		require.Equal(t, "token-counting-2024-11-01", reqs[0].header.Get("Anthropic-Beta"))
	}
}

func TestCountTokens_AnswersErrorsInAnthropicsShape(t *testing.T) {
	bad, down, ok := newWireUp(t, antInvalid), newWireUp(t, antOverloaded), newWireUp(t, antCount(7))
	o := newWireUp(t, wireAnswer{status: 200, body: `{}`})
	r := doorRig(t, `{"models": [`+antModel("bad", "claude-x", bad)+`, `+antModel("down", "claude-y", down)+`, `+
		antModel("fine", "claude-z", ok)+`, `+oaiModel("gpt", "gpt-4o", o, "")+`],
		"groups": [{"name": "rejects", "models": ["bad", "fine"]}], "rules": []}`)
	tests := []struct {
		name, model string
		status      int
		typ, msg    string
	}{
		{name: "the upstream's rejection as it came, not failed over", model: "rejects", status: 400, typ: "invalid_request_error", msg: "roles must alternate"},
		{name: "every model down", model: "down", status: 502, typ: "overloaded_error", msg: "HTTP 529"},
		{name: "unknown route", model: "nope", status: 404, typ: "not_found_error", msg: `no route named "nope"`},
		{name: "a route without an Anthropic model", model: "gpt", status: 400, typ: "invalid_request_error", msg: "has no Anthropic model"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.anth.Messages.CountTokens(context.Background(), countParams(tc.model))
			var ae *anthropic.Error
			require.True(t, errors.As(err, &ae), "%v", err)
			require.Equal(t, tc.status, ae.StatusCode, ae.RawJSON())
			var env struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			}
			require.NoError(t, json.Unmarshal([]byte(ae.RawJSON()), &env), ae.RawJSON())
			require.Equal(t, "error", env.Type)
			require.Equal(t, tc.typ, env.Error.Type)
			require.Contains(t, env.Error.Message, tc.msg)
		})
	}
	require.Empty(t, ok.requests(), "a rejected request is not failed over")
	require.Empty(t, o.requests())
}

// OpenAI's wire answers.
var (
	oaiRateLimited = wireAnswer{status: 429, header: map[string]string{"Retry-After": "1"},
		body: `{"error":{"message":"Rate limit reached for text-embedding-3-small","type":"requests","param":null,"code":"rate_limit_exceeded"}}`}
	oaiDown    = wireAnswer{status: 503, body: `{"error":{"message":"The server is overloaded","type":"server_error","param":null,"code":null}}`}
	oaiInvalid = wireAnswer{status: 400, body: `{"error":{"message":"'$.input' is invalid.","type":"invalid_request_error","param":null,"code":null}}`}
)

// embeddingAnswer is OpenAI's answer of vecs, encoded as format says.
func embeddingAnswer(format string, vecs ...[]float32) wireAnswer {
	data := make([]string, len(vecs))
	for i, v := range vecs {
		var enc []byte
		if format == "base64" {
			b := make([]byte, 4*len(v))
			for j, f := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(f))
			}
			enc, _ = json.Marshal(base64.StdEncoding.EncodeToString(b))
		} else {
			enc, _ = json.Marshal(v)
		}
		data[i] = fmt.Sprintf(`{"object":"embedding","index":%d,"embedding":%s}`, i, enc)
	}
	return wireAnswer{status: 200, body: `{"object":"list","data":[` + strings.Join(data, ",") +
		`],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`}
}

// embeddingPolicy declares e1 and e2 (one vector space) and e3 (another)
// over the upstreams, with the group "emb" of e1 and e2 and the group
// "plain" of two models that declare none.
func embeddingPolicy(e1, e2, e3 *wireUp) string {
	space := `, "embedding": {"dimensions": 1536, "family": "text-embedding-3-small"}`
	return `{"models": [` + oaiModel("e1", "text-embedding-3-small", e1, space) + `, ` +
		oaiModel("e2", "text-embedding-3-small-eu", e2, space) + `, ` +
		oaiModel("e3", "text-embedding-3-large", e3, `, "embedding": {"dimensions": 3072, "family": "text-embedding-3-large"}`) + `, ` +
		oaiModel("p1", "embed-a", e1, "") + `, ` + oaiModel("p2", "embed-b", e2, "") + `],
		"groups": [{"name": "emb", "models": ["e1", "e2"]}, {"name": "plain", "models": ["p1", "p2"]}], "rules": []}`
}

func TestEmbeddings_FailsOverWithinOneVectorSpace(t *testing.T) {
	for _, format := range []string{"float", "base64"} {
		t.Run(format, func(t *testing.T) {
			vecs := [][]float32{{0.5, -0.25, 0.125}, {1, 0, -1}}
			e1, e2, e3 := newWireUp(t, oaiRateLimited), newWireUp(t, embeddingAnswer(format, vecs...)), newWireUp(t, oaiDown)
			r := doorRig(t, embeddingPolicy(e1, e2, e3))
			var raw *http.Response
			got, err := r.client.Embeddings.New(context.Background(), oai.EmbeddingNewParams{
				Model:          "emb",
				Input:          oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"Paris", "Lyon"}},
				Dimensions:     oai.Int(3),
				EncodingFormat: oai.EmbeddingNewParamsEncodingFormat(format),
			}, option.WithResponseInto(&raw))
			require.NoError(t, err)
			require.Equal(t, "e2", raw.Header.Get("X-Retryhost-Model"))
			require.Equal(t, "2", raw.Header.Get("X-Retryhost-Attempts"))
			require.Len(t, got.Data, 2)
			for i, d := range got.Data {
				require.EqualValues(t, i, d.Index)
				var vec []float32
				if format == "base64" {
					var s string
					require.NoError(t, json.Unmarshal([]byte(d.JSON.Embedding.Raw()), &s))
					b, err := base64.StdEncoding.DecodeString(s)
					require.NoError(t, err)
					for j := 0; j+4 <= len(b); j += 4 {
						vec = append(vec, math.Float32frombits(binary.LittleEndian.Uint32(b[j:])))
					}
				} else {
					for _, f := range d.Embedding {
						vec = append(vec, float32(f))
					}
				}
				require.Equal(t, vecs[i], vec)
			}
			require.EqualValues(t, 8, got.Usage.TotalTokens)
			for i, u := range []*wireUp{e1, e2} {
				reqs := u.requests()
				require.Len(t, reqs, 1)
				require.Equal(t, "/v1/embeddings", reqs[0].path)
				require.Equal(t, []string{"text-embedding-3-small", "text-embedding-3-small-eu"}[i], reqs[0].body["model"])
				require.Equal(t, []any{"Paris", "Lyon"}, reqs[0].body["input"])
				require.EqualValues(t, 3, reqs[0].body["dimensions"])
				require.Equal(t, format, reqs[0].body["encoding_format"])
				require.Equal(t, "Bearer sk-upstream", reqs[0].header.Get("Authorization"))
			}
			require.Empty(t, e3.requests(), "another vector space is never a fall-back")
		})
	}
}

func TestEmbeddings_SendsEveryInputFormAsItCame(t *testing.T) {
	e1 := newWireUp(t, embeddingAnswer("float", []float32{1}))
	r := doorRig(t, embeddingPolicy(e1, newWireUp(t, oaiDown), newWireUp(t, oaiDown)))
	for _, tc := range []struct {
		name  string
		input oai.EmbeddingNewParamsInputUnion
		want  any
	}{
		{name: "a string", input: oai.EmbeddingNewParamsInputUnion{OfString: oai.String("Paris")}, want: "Paris"},
		{name: "strings", input: oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}}, want: []any{"a", "b"}},
		{name: "tokens", input: oai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{1, 2, 3}}, want: []any{1.0, 2.0, 3.0}},
		{name: "token arrays", input: oai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: [][]int64{{1}, {2, 3}}}, want: []any{[]any{1.0}, []any{2.0, 3.0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.client.Embeddings.New(context.Background(), oai.EmbeddingNewParams{Model: "e1", Input: tc.input})
			require.NoError(t, err)
			reqs := e1.requests()
			require.Equal(t, tc.want, reqs[len(reqs)-1].body["input"])
		})
	}
}

func TestEmbeddings_AnswersErrorsInOpenAIsShape(t *testing.T) {
	e1, e2, e3 := newWireUp(t, oaiInvalid), newWireUp(t, oaiDown), newWireUp(t, oaiDown)
	a := newWireUp(t, antCount(1))
	pol := strings.Replace(embeddingPolicy(e1, e2, e3), `],
		"groups"`, `, `+antModel("claude", "claude-x", a)+`],
		"groups"`, 1)
	r := doorRig(t, pol)
	tests := []struct {
		name, body string
		status     int
		typ, param string
		msg        string
	}{
		{name: "the upstream's rejection as it came, not failed over", body: `{"model": "emb", "input": "x"}`, status: 400, typ: "invalid_request_error", msg: "'$.input' is invalid."},
		{name: "every model down", body: `{"model": "e3", "input": "x"}`, status: 502, typ: "upstream_error", msg: "503"},
		{name: "unknown route", body: `{"model": "nope", "input": "x"}`, status: 404, typ: "invalid_request_error", param: "model", msg: `no route named "nope"`},
		{name: "a group that declares no space", body: `{"model": "plain", "input": "x"}`, status: 400, typ: "invalid_request_error", param: "model", msg: "declare the same embedding"},
		{name: "more dimensions than the space has", body: `{"model": "emb", "input": "x", "dimensions": 2048}`, status: 400, typ: "invalid_request_error", param: "dimensions", msg: "more than the 1536"},
		{name: "an Anthropic route", body: `{"model": "claude", "input": "x"}`, status: 400, typ: "invalid_request_error", param: "model", msg: "no OpenAI-compatible model"},
		{name: "no input", body: `{"model": "emb"}`, status: 400, typ: "invalid_request_error", param: "input", msg: "input is required"},
		{name: "empty input", body: `{"model": "emb", "input": []}`, status: 400, typ: "invalid_request_error", param: "input", msg: "empty array"},
		{name: "mixed input", body: `{"model": "emb", "input": ["a", [1]]}`, status: 400, typ: "invalid_request_error", param: "input[1]", msg: "all strings"},
		{name: "an object input", body: `{"model": "emb", "input": {"text": "a"}}`, status: 400, typ: "invalid_request_error", param: "input", msg: "want a string"},
		{name: "unknown encoding", body: `{"model": "emb", "input": "a", "encoding_format": "int8"}`, status: 400, typ: "invalid_request_error", param: "encoding_format", msg: `want "float" or "base64"`},
		{name: "zero dimensions", body: `{"model": "emb", "input": "a", "dimensions": 0}`, status: 400, typ: "invalid_request_error", param: "dimensions", msg: "positive integer"},
		{name: "no model", body: `{"input": "a"}`, status: 400, typ: "invalid_request_error", param: "model", msg: "model is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := r.rawPost("/v1/embeddings", tc.body, "Authorization", "Bearer client-key")
			require.Equal(t, tc.status, resp.StatusCode, body)
			var env struct {
				Error struct {
					Message, Type string
					Param         *string
				}
			}
			require.NoError(t, json.Unmarshal([]byte(body), &env), body)
			require.Equal(t, tc.typ, env.Error.Type, body)
			require.Contains(t, env.Error.Message, tc.msg)
			if tc.param != "" {
				require.NotNil(t, env.Error.Param, body)
				require.Equal(t, tc.param, *env.Error.Param)
			}
		})
	}
	require.Len(t, e1.requests(), 1)
	require.Empty(t, e2.requests(), "a rejected request is not failed over")
	// openai-go reads the same answer as its *openai.Error.
	_, err := r.client.Embeddings.New(context.Background(), oai.EmbeddingNewParams{Model: "nope", Input: oai.EmbeddingNewParamsInputUnion{OfString: oai.String("x")}})
	var oe *oai.Error
	require.True(t, errors.As(err, &oe), "%v", err)
	require.Equal(t, http.StatusNotFound, oe.StatusCode)
	require.Equal(t, "model_not_found", oe.Code)
}
