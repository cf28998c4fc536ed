package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"
)

// Tests written as an outside tester would: a promise of docs/gateway.md, checked through the SDKs a client uses.

// openai-go's client.Models.Get and anthropic-sdk-go's client.Models.Get
// retrieve one route (GET /v1/models/{id}), in the same shape as the list
// (created: the policy's load time, in both formats); an unknown route is
// a 404 in the client's format.
func TestModelRetrievedByID(t *testing.T) {
	r := newRig(t, `"groups": [{"name": "grp", "models": ["primary", "backup"]}], "rules": []`)
	ctx := context.Background()
	list, err := r.client.Models.List(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, list.Data)
	for _, want := range list.Data {
		got, err := r.client.Models.Get(ctx, want.ID)
		require.NoError(t, err, want.ID)
		require.Equal(t, want.ID, got.ID)
		require.Equal(t, want.OwnedBy, got.OwnedBy)
		require.Equal(t, want.Created, got.Created)
		require.EqualValues(t, "model", got.Object)
	}
	_, err = r.client.Models.Get(ctx, "nope")
	var oe *oai.Error
	require.True(t, errors.As(err, &oe), "%v", err)
	require.Equal(t, http.StatusNotFound, oe.StatusCode)
	require.Equal(t, "model_not_found", oe.Code)

	created := time.Unix(list.Data[0].Created, 0).UTC()
	page, err := r.anth.Models.List(ctx, anthropic.ModelListParams{})
	require.NoError(t, err)
	require.Len(t, page.Data, len(list.Data))
	for _, want := range page.Data {
		require.True(t, want.CreatedAt.Equal(created), "%s created_at %v, want the policy's load time %v", want.ID, want.CreatedAt, created)
		got, err := r.anth.Models.Get(ctx, want.ID, anthropic.ModelGetParams{})
		require.NoError(t, err, want.ID)
		require.Equal(t, want.ID, got.ID)
		require.Equal(t, want.DisplayName, got.DisplayName)
		require.True(t, got.CreatedAt.Equal(created))
		require.EqualValues(t, "model", got.Type)
	}
	_, err = r.anth.Models.Get(ctx, "nope", anthropic.ModelGetParams{})
	var ae *anthropic.Error
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, http.StatusNotFound, ae.StatusCode)
	require.Contains(t, ae.RawJSON(), `"not_found_error"`)

	resp, body := r.rawPost("/v1/models/primary", `{}`)
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, body)
}

// SetAPIKeys replaces the keys for the next request; a gateway started
// open starts requiring them; no key, or an empty one, is an error that
// keeps the keys in use.
func TestSetAPIKeys(t *testing.T) {
	r := newRig(t, `"rules": []`) // open
	ctx := context.Background()
	_, err := r.client.Models.List(ctx)
	require.NoError(t, err)
	require.NoError(t, r.gw.SetAPIKeys("client-key"))
	_, err = r.client.Models.List(ctx)
	require.NoError(t, err)
	other := r.newClient("other")
	_, err = other.Models.List(ctx)
	var oe *oai.Error
	require.True(t, errors.As(err, &oe), "%v", err)
	require.Equal(t, http.StatusUnauthorized, oe.StatusCode)

	require.NoError(t, r.gw.SetAPIKeys("other"))
	_, err = other.Models.List(ctx)
	require.NoError(t, err)
	_, err = r.client.Chat.Completions.New(ctx, params("primary"))
	require.True(t, errors.As(err, &oe), "%v", err)
	require.Equal(t, http.StatusUnauthorized, oe.StatusCode)

	require.Error(t, r.gw.SetAPIKeys())
	require.Error(t, r.gw.SetAPIKeys("a", " "))
	_, err = other.Models.List(ctx)
	require.NoError(t, err, "a rejected SetAPIKeys keeps the keys in use")
}

// An Anthropic client (anthropic-version set) that lists or retrieves the
// routes with a wrong key, or the wrong method, gets its refusal in
// Anthropic's error shape, as on /v1/messages.
func TestModelsErrorsInTheClientsFormat(t *testing.T) {
	r := newRig(t, `"rules": []`, WithAPIKeys("client-key"))
	wrong := r.newAnthropicClient("wrong")
	_, err := wrong.Models.List(context.Background(), anthropic.ModelListParams{})
	var ae *anthropic.Error
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, http.StatusUnauthorized, ae.StatusCode)
	require.Contains(t, ae.RawJSON(), `"authentication_error"`)
	_, err = wrong.Models.Get(context.Background(), "primary", anthropic.ModelGetParams{})
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Contains(t, ae.RawJSON(), `"authentication_error"`)

	resp, body := r.rawPost("/v1/models", `{}`, "X-Api-Key", "client-key", "Anthropic-Version", "2023-06-01")
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, body)
	require.JSONEq(t, `{"type":"error","error":{"type":"invalid_request_error","message":"retryhost gateway: use GET"}}`, body)
	// An OpenAI client keeps OpenAI's shape.
	resp, body = r.rawPost("/v1/models", `{}`, "X-Api-Key", "client-key")
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, body)
	require.Contains(t, body, `"method_not_allowed"`)
}

// A request refused before a door's handler (a wrong key, an unknown path)
// still gets its access-log line and its count in requests_total, as the
// README's "one access-log line per request" says; an unknown path answers
// an Anthropic client (message batches, which the gateway does not serve) in
// Anthropic's error shape.
func TestRefusedRequestsAreLogged(t *testing.T) {
	r := newRig(t, `"rules": []`, WithAPIKeys("client-key"))
	resp, body := r.rawPost("/v1/chat/completions", `{}`, "Authorization", "Bearer wrong", "X-Request-Id", "req-401")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, body)
	resp, body = r.rawPost("/v1/messages/batches", `{}`, "X-Api-Key", "client-key",
		"Anthropic-Version", "2023-06-01", "X-Request-Id", "req-404")
	require.Equal(t, http.StatusNotFound, resp.StatusCode, body)
	require.JSONEq(t, `{"type":"error","error":{"type":"not_found_error","message":"retryhost gateway: no endpoint POST /v1/messages/batches"}}`, body)
	resp, body = r.rawPost("/v1/nope", `{}`, "X-Api-Key", "client-key")
	require.Equal(t, http.StatusNotFound, resp.StatusCode, body)
	require.Contains(t, body, `"code":"not_found"`, "an OpenAI client keeps OpenAI's shape")

	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.logs.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		if rec["msg"] == "request" {
			recs = append(recs, rec)
		}
	}
	require.Len(t, recs, 3, r.logs.String())
	want := []struct {
		id, path, outcome string
		status            float64
	}{
		{"req-401", "/v1/chat/completions", "unauthorized", 401},
		{"req-404", "/v1/messages/batches", "not_found", 404},
		{"", "/v1/nope", "not_found", 404},
	}
	for i, w := range want {
		require.Equal(t, w.path, recs[i]["path"])
		require.Equal(t, w.outcome, recs[i]["outcome"])
		require.Equal(t, w.status, recs[i]["status"])
		if w.id != "" {
			require.Equal(t, w.id, recs[i]["request_id"])
		}
	}
}

// Every answer names its request id, in X-Request-Id and, on Anthropic's
// door and model endpoints, in request-id (Anthropic's SDKs read it as a
// response's request id and an error's): the client's X-Request-Id, else
// the gateway's. Also the answers no door reads: a refused key, an
// unknown path, the model list.
func TestEveryAnswerNamesItsRequestID(t *testing.T) {
	r := newRigOf(t, `"rules": []`, []string{"backup"}, WithAPIKeys("client-key"))
	r.up["backup"].play(act{chunks: []string{"Paris."}})
	msg := `{"model":"backup","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	ant := []string{"X-Api-Key", "client-key", "Anthropic-Version", "2023-06-01"}
	tests := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		anthropic                bool
	}{
		{name: "a message", path: "/v1/messages", body: msg, hdr: ant, status: 200, anthropic: true},
		{name: "a rejected message", path: "/v1/messages", body: `{"model":"backup"}`, hdr: ant, status: 400, anthropic: true},
		{name: "a token count refused", path: "/v1/messages/count_tokens", body: `{"model":"primary","messages":[]}`, hdr: ant, status: 400, anthropic: true},
		{name: "a wrong key on messages", path: "/v1/messages", body: msg, hdr: []string{"X-Api-Key", "wrong"}, status: 401, anthropic: true},
		{name: "an unknown path, Anthropic's client", path: "/v1/messages/batches", body: `{}`, hdr: ant, status: 404, anthropic: true},
		{name: "the models, Anthropic's client", method: http.MethodGet, path: "/v1/models", hdr: ant, status: 200, anthropic: true},
		{name: "a chat completion refused", path: "/v1/chat/completions", body: `{"model":"nope","messages":[]}`, hdr: []string{"Authorization", "Bearer client-key"}, status: 400},
		{name: "a wrong key on chat", path: "/v1/chat/completions", body: `{}`, hdr: []string{"Authorization", "Bearer wrong"}, status: 401},
		{name: "an unknown path", path: "/v1/nope", body: `{}`, hdr: []string{"Authorization", "Bearer client-key"}, status: 404},
		{name: "the models", method: http.MethodGet, path: "/v1/models/primary", hdr: []string{"Authorization", "Bearer client-key"}, status: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, client := range []string{"", "req-from-client"} {
				req, err := http.NewRequest(cmp.Or(tc.method, http.MethodPost), r.srv.URL+tc.path, strings.NewReader(tc.body))
				require.NoError(t, err)
				for i := 0; i+1 < len(tc.hdr); i += 2 {
					req.Header.Set(tc.hdr[i], tc.hdr[i+1])
				}
				if client != "" {
					req.Header.Set("X-Request-Id", client)
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				require.Equal(t, tc.status, resp.StatusCode)
				id := resp.Header.Get("X-Request-Id")
				require.NotEmpty(t, id)
				if client != "" {
					require.Equal(t, client, id)
				}
				if tc.anthropic {
					require.Equal(t, id, resp.Header.Get("Request-Id"))
				} else {
					require.Empty(t, resp.Header.Get("Request-Id"), "OpenAI's shape has no request-id")
				}
			}
		})
	}
}
