package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// OpenAI's wire answers of the Responses API.
var (
	oaiStored = wireAnswer{status: 200, body: `{"id":"resp_2","object":"response","created_at":1,"status":"queued","model":"gpt-4.1","output":[],"previous_response_id":"resp_1","store":true,"background":true}`}
	oaiEvents = wireAnswer{status: 200, header: map[string]string{"Content-Type": "text/event-stream"}, body: "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_3\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[]}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Lyon.\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_3\",\"object\":\"response\",\"status\":\"completed\",\"output\":[]}}\n\n"}
)

// statefulParams asks, after the stored response resp_1, for one more
// answer, stored and in the background.
func statefulParams(model string) responses.ResponseNewParams {
	p := responsesParams(model)
	p.PreviousResponseID = oai.String("resp_1")
	p.Store = oai.Bool(true)
	p.Background = oai.Bool(true)
	p.Truncation = responses.ResponseNewParamsTruncationAuto // any field: the account checks them
	return p
}

// A stateful Responses request goes, as it came, to the route's one
// OpenAI account, and fails over between that account's models (the
// stored response is the account's, which each reaches).
func TestResponses_StatefulGoesToTheRoutesOneAccount(t *testing.T) {
	acct := newWireUp(t, oaiDown, oaiStored, oaiEvents)
	r := doorRig(t, `{"models": [`+oaiModel("down", "gpt-4o", acct, "")+`, `+oaiModel("up", "gpt-4.1", acct, `, "api": "responses"`)+`],
		"groups": [{"name": "account", "models": ["down", "up"]}], "rules": []}`)
	var raw *http.Response
	got, err := r.client.Responses.New(context.Background(), statefulParams("account"), option.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Equal(t, "resp_2", got.ID)
	require.Equal(t, "resp_1", got.PreviousResponseID)
	require.Equal(t, "up", raw.Header.Get("X-Retryhost-Model"))
	require.Equal(t, "2", raw.Header.Get("X-Retryhost-Attempts"))
	reqs := acct.requests()
	require.Len(t, reqs, 2)
	for i, q := range reqs {
		require.Equal(t, "POST /v1/responses", q.method+" "+q.path)
		require.Equal(t, []string{"gpt-4o", "gpt-4.1"}[i], q.body["model"])
		require.Equal(t, "resp_1", q.body["previous_response_id"])
		require.Equal(t, true, q.body["store"])
		require.Equal(t, true, q.body["background"])
		require.Equal(t, "auto", q.body["truncation"])
		require.Equal(t, "Bearer sk-upstream", q.header.Get("Authorization"), "the account's key, not the client's")
	}

	// Streamed, the account's events come through as they came.
	s := r.client.Responses.NewStreaming(context.Background(), statefulParams("up"))
	var types []string
	var text string
	for s.Next() {
		ev := s.Current()
		types = append(types, ev.Type)
		text += ev.Delta
	}
	require.NoError(t, s.Err())
	require.NoError(t, s.Close())
	require.Equal(t, []string{"response.created", "response.output_text.delta", "response.completed"}, types)
	require.Equal(t, "Lyon.", text)
	last := acct.requests()[2]
	require.Equal(t, true, last.body["stream"])
	require.Equal(t, "resp_1", last.body["previous_response_id"])
}

// An item_reference input item (typed, or with its optional type left
// out) names an item the account stored: the request goes to the one
// account as it came, like one with previous_response_id; a message item
// that has an id of its own is no reference.
func TestResponses_ItemReferenceGoesToTheAccount(t *testing.T) {
	acct := newWireUp(t, oaiStored)
	r := doorRig(t, `{"models": [`+oaiModel("up", "gpt-4.1", acct, "")+`], "rules": []}`)
	for i, item := range []string{`{"type": "item_reference", "id": "msg_1"}`, `{"id": "msg_1"}`} {
		p := responsesParams("up")
		p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("Capital of France?", responses.EasyInputMessageRoleUser)}}
		got, err := r.client.Responses.New(context.Background(), p, option.WithJSONSet("input.1", json.RawMessage(item)))
		require.NoError(t, err)
		require.Equal(t, "resp_2", got.ID)
		reqs := acct.requests()
		require.Len(t, reqs, i+1)
		require.Equal(t, "POST /v1/responses", reqs[i].method+" "+reqs[i].path)
		input, _ := reqs[i].body["input"].([]any)
		require.Len(t, input, 2, "sent as it came")
		require.Equal(t, "msg_1", input[1].(map[string]any)["id"])
	}
	require.Equal(t, "", itemReference(json.RawMessage(`[{"type": "message", "id": "msg_1", "role": "assistant", "content": "Paris."}]`)))
	require.Equal(t, "", itemReference(json.RawMessage(`[{"id": "msg_1", "role": "assistant", "content": "Paris."}]`)))
	require.Equal(t, "input[1]", itemReference(json.RawMessage(`[{"role": "user", "content": "hi"}, {"id": "msg_1"}]`)))
}

// A stateful request's own fallbacks that name routes of its account
// are its fail-over; the field itself is the gateway's and is not sent.
func TestResponses_StatefulFallsBackWithinTheAccount(t *testing.T) {
	acct := newWireUp(t, oaiDown, oaiStored)
	r := doorRig(t, `{"models": [`+oaiModel("down", "gpt-4o", acct, "")+`, `+oaiModel("up", "gpt-4.1", acct, "")+`], "rules": []}`)
	var raw *http.Response
	got, err := r.client.Responses.New(context.Background(), statefulParams("down"),
		option.WithJSONSet("fallbacks", []string{"up"}), option.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Equal(t, "resp_2", got.ID)
	require.Equal(t, "up", raw.Header.Get("X-Retryhost-Model"))
	reqs := acct.requests()
	require.Len(t, reqs, 2)
	for _, q := range reqs {
		require.NotContains(t, q.body, "fallbacks")
		require.Equal(t, "resp_1", q.body["previous_response_id"])
	}
}

// A stateful request on a route that is not one OpenAI account is a 400
// in OpenAI's shape saying why, and reaches no upstream.
func TestResponses_StatefulRefusedOffOneAccount(t *testing.T) {
	a, b, c := newWireUp(t, oaiStored), newWireUp(t, oaiStored), newWireUp(t, antCount(1))
	r := doorRig(t, `{"models": [`+oaiModel("a", "gpt-4.1", a, "")+`, `+oaiModel("b", "gpt-4.1", b, "")+`, `+antModel("claude", "claude-x", c)+`, `+
		`{"name": "compat", "provider": "vllm", "model": "llama", "base_url": "`+a.srv.URL+`/v1"}],
		"groups": [{"name": "two-accounts", "models": ["a", "b"]}, {"name": "with-claude", "models": ["a", "claude"]}], "rules": []}`)
	for _, route := range []string{"two-accounts", "with-claude", "claude", "compat"} {
		for _, field := range []string{"previous_response_id", "store", "background"} {
			t.Run(route+"/"+field, func(t *testing.T) {
				p := responsesParams(route)
				switch field {
				case "previous_response_id":
					p.PreviousResponseID = oai.String("resp_1")
				case "store":
					p.Store = oai.Bool(true)
				case "background":
					p.Background = oai.Bool(true)
				}
				_, err := r.client.Responses.New(context.Background(), p)
				var oe *oai.Error
				require.True(t, errors.As(err, &oe), "%v", err)
				require.Equal(t, http.StatusBadRequest, oe.StatusCode, oe.RawJSON())
				require.Equal(t, field, oe.Param)
				require.Equal(t, "invalid_request_error", oe.Type)
				require.Contains(t, oe.Message, `route "`+route+`" is not one OpenAI account`)
				require.Contains(t, oe.Message, "stored by the one upstream account that answers it")
			})
		}
	}
	t.Run("fallbacks to another account", func(t *testing.T) {
		_, err := r.client.Responses.New(context.Background(), statefulParams("a"), option.WithJSONSet("fallbacks", []string{"b"}))
		var oe *oai.Error
		require.True(t, errors.As(err, &oe), "%v", err)
		require.Equal(t, http.StatusBadRequest, oe.StatusCode, oe.RawJSON())
		require.Equal(t, "previous_response_id", oe.Param)
		require.Contains(t, oe.Message, `fallbacks[0]: route "b" is another OpenAI account than route "a"'s`)
	})
	t.Run("fallbacks to another provider", func(t *testing.T) {
		_, err := r.client.Responses.New(context.Background(), statefulParams("a"), option.WithJSONSet("fallbacks", []string{"claude"}))
		var oe *oai.Error
		require.True(t, errors.As(err, &oe), "%v", err)
		require.Equal(t, http.StatusBadRequest, oe.StatusCode, oe.RawJSON())
		require.Contains(t, oe.Message, `fallbacks[0]: route "claude" is not one OpenAI account`)
	})
	for _, u := range []*wireUp{a, b, c} {
		require.Empty(t, u.requests())
	}
}

// The calls on a stored response (retrieve, resume its stream, list its
// input items, cancel, delete) go to the account that stores it, with
// their query; the policy's one OpenAI account needs no route named.
func TestResponses_StoredResponseCallsGoToTheAccount(t *testing.T) {
	cancelled := wireAnswer{status: 200, body: `{"id":"resp_2","object":"response","created_at":1,"status":"cancelled","model":"gpt-4.1","output":[]}`}
	acct := newWireUp(t, oaiStored, oaiEvents, wireAnswer{status: 200, body: `{"object":"list","data":[],"first_id":"","last_id":"","has_more":false}`},
		cancelled, wireAnswer{status: 200, body: `{"id":"resp_2","object":"response","deleted":true}`}, oaiDown, cancelled)
	claude := newWireUp(t, antCount(1))
	r := doorRig(t, `{"models": [`+oaiModel("down", "gpt-4o", acct, "")+`, `+oaiModel("up", "gpt-4.1", acct, "")+`, `+antModel("claude", "claude-x", claude)+`],
		"groups": [{"name": "account", "models": ["down", "up"]}], "rules": []}`)
	ctx := context.Background()

	got, err := r.client.Responses.Get(ctx, "resp_2", responses.ResponseGetParams{})
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusQueued, got.Status)
	s := r.client.Responses.GetStreaming(ctx, "resp_2", responses.ResponseGetParams{StartingAfter: oai.Int(0)})
	var types []string
	for s.Next() {
		types = append(types, s.Current().Type)
	}
	require.NoError(t, s.Err())
	require.NoError(t, s.Close())
	require.Equal(t, []string{"response.created", "response.output_text.delta", "response.completed"}, types)
	_, err = r.client.Responses.InputItems.List(ctx, "resp_2", responses.InputItemListParams{Limit: oai.Int(5)})
	require.NoError(t, err)
	got, err = r.client.Responses.Cancel(ctx, "resp_2")
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCancelled, got.Status)
	require.NoError(t, r.client.Responses.Delete(ctx, "resp_2"))
	var raw *http.Response
	_, err = r.client.Responses.Cancel(ctx, "resp_2", option.WithResponseInto(&raw)) // the first model's 503 fails over within the account
	require.NoError(t, err)
	require.Equal(t, "2", raw.Header.Get("X-Retryhost-Attempts"))

	var calls []string
	for _, q := range acct.requests() {
		require.Equal(t, "Bearer sk-upstream", q.header.Get("Authorization"), "the account's key, not the client's")
		calls = append(calls, q.method+" "+q.path)
	}
	require.Equal(t, []string{
		"GET /v1/responses/resp_2",
		"GET /v1/responses/resp_2?starting_after=0",
		"GET /v1/responses/resp_2/input_items?limit=5",
		"POST /v1/responses/resp_2/cancel",
		"DELETE /v1/responses/resp_2",
		"POST /v1/responses/resp_2/cancel",
		"POST /v1/responses/resp_2/cancel",
	}, calls)
	require.Equal(t, true, acct.requests()[1].body["stream"], "the stream's resumption asked for as the client asked")
	require.Empty(t, claude.requests())
}

// With several accounts the call names its route in X-Retryhost-Route;
// without, or naming a route that is not one account, it is a 400, and
// with no account at all a 404, in OpenAI's shape.
func TestResponses_StoredResponseCallsNameTheirAccount(t *testing.T) {
	a, b, c := newWireUp(t, oaiStored), newWireUp(t, oaiStored), newWireUp(t, antCount(1))
	r := doorRig(t, `{"models": [`+oaiModel("a", "gpt-4.1", a, "")+`, `+oaiModel("b", "gpt-4.1", b, "")+`, `+antModel("claude", "claude-x", c)+`], "rules": []}`)
	ctx := context.Background()
	_, err := r.client.Responses.Get(ctx, "resp_2", responses.ResponseGetParams{}, option.WithHeader("X-Retryhost-Route", "b"))
	require.NoError(t, err)
	require.Len(t, b.requests(), 1)
	require.Empty(t, a.requests())

	only := doorRig(t, `{"models": [`+antModel("claude", "claude-x", c)+`], "rules": []}`)
	for _, tc := range []struct {
		name   string
		rig    *rig
		route  string
		status int
		msg    string
	}{
		{"two accounts, none named", r, "", 400, `the routes reach 2 OpenAI accounts: name the route whose account stores the response in the X-Retryhost-Route header`},
		{"a route of another provider", r, "claude", 400, `X-Retryhost-Route: route "claude" is not one OpenAI account`},
		{"an unknown route", r, "nope", 404, `X-Retryhost-Route: no route named "nope"`},
		{"no account", only, "", 404, "no route of this gateway stores responses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []option.RequestOption
			if tc.route != "" {
				opts = append(opts, option.WithHeader("X-Retryhost-Route", tc.route))
			}
			_, err := tc.rig.client.Responses.Get(ctx, "resp_2", responses.ResponseGetParams{}, opts...)
			var oe *oai.Error
			require.True(t, errors.As(err, &oe), "%v", err)
			require.Equal(t, tc.status, oe.StatusCode, oe.RawJSON())
			require.Contains(t, oe.Message, tc.msg)
		})
	}
	req, err := http.NewRequest(http.MethodGet, r.srv.URL+"/v1/responses/%2E%2E/cancel", nil)
	require.NoError(t, err)
	req.Method = http.MethodPost
	req.Header.Set("Authorization", "Bearer client-key")
	req.Header.Set("X-Retryhost-Route", "b")
	resp, err := r.hc.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "a dot segment is no response id")
	req, err = http.NewRequest(http.MethodPut, r.srv.URL+"/v1/responses/resp_2", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer client-key")
	resp, err = r.hc.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Equal(t, "GET, DELETE", resp.Header.Get("Allow"))
	require.Len(t, b.requests(), 1)
	require.Empty(t, a.requests())
	require.Empty(t, c.requests())
}

// A response the account does not have is the account's 404, its
// message as the account wrote it.
func TestResponses_StoredResponseNotFoundIsTheAccounts(t *testing.T) {
	acct := newWireUp(t, wireAnswer{status: 404, body: `{"error":{"message":"Response with id 'resp_x' not found.","type":"invalid_request_error","param":null,"code":null}}`})
	r := doorRig(t, `{"models": [`+oaiModel("up", "gpt-4.1", acct, "")+`], "rules": []}`)
	_, err := r.client.Responses.Get(context.Background(), "resp_x", responses.ResponseGetParams{})
	var oe *oai.Error
	require.True(t, errors.As(err, &oe), "%v", err)
	require.Equal(t, http.StatusNotFound, oe.StatusCode, oe.RawJSON())
	require.Contains(t, oe.Message, "Response with id 'resp_x' not found.")
}

// A call on a stored response has a server span named by its method.
func TestResponses_StoredResponseSpanNamesItsMethod(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	acct := newWireUp(t, oaiStored)
	r := doorRig(t, `{"models": [`+oaiModel("up", "gpt-4.1", acct, "")+`], "rules": []}`, WithTracerProvider(tp))
	_, err := r.client.Responses.Get(context.Background(), "resp_2", responses.ResponseGetParams{})
	require.NoError(t, err)
	spans := rec.Ended()
	require.Len(t, spans, 1)
	require.Equal(t, "GET /v1/responses/{id}", spans[0].Name())
	require.Equal(t, "/v1/responses/{id}", spanAttrs(spans[0])["http.route"].AsString())
}
