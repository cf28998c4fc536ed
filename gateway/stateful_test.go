package gateway

import (
	"context"
	"errors"
	"net/http"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"
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
	for _, u := range []*wireUp{a, b, c} {
		require.Empty(t, u.requests())
	}
}
