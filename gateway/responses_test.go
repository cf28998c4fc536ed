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
)

func responsesParams(model string) responses.ResponseNewParams {
	return responses.ResponseNewParams{Model: model, Instructions: oai.String("Answer briefly."),
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("Capital of France?")}}
}

func TestResponses_FailsOverLikeChatCompletions(t *testing.T) {
	// primary (OpenAI-compatible) is down; backup (Anthropic) answers: the
	// client reads one response object either way.
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "whole", true: "streamed"}[stream], func(t *testing.T) {
			r := newRigOf(t, "", []string{"backup"})
			r.up["primary"].play(act{status: http.StatusServiceUnavailable})
			r.up["backup"].play(act{chunks: []string{"Paris", " is the capital."}})
			var raw *http.Response
			var got *responses.Response
			if stream {
				s := r.client.Responses.NewStreaming(context.Background(), responsesParams("primary"), option.WithResponseInto(&raw))
				var (
					seq   int64 = -1
					types []string
					delta string
				)
				for s.Next() {
					ev := s.Current()
					require.Greater(t, ev.SequenceNumber, seq, "sequence numbers increase")
					seq = ev.SequenceNumber
					types = append(types, ev.Type)
					if ev.Type == "response.output_text.delta" {
						delta += ev.Delta
					}
					if ev.Type == "response.completed" {
						resp := ev.Response
						got = &resp
					}
				}
				require.NoError(t, s.Err())
				require.NoError(t, s.Close())
				require.Equal(t, "Paris is the capital.", delta)
				require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}, types[:4])
				require.Equal(t, []string{"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}, types[len(types)-4:])
				require.EqualValues(t, 0, seq-int64(len(types)-1), "one sequence number per event, from 0")
			} else {
				var err error
				got, err = r.client.Responses.New(context.Background(), responsesParams("primary"), option.WithResponseInto(&raw))
				require.NoError(t, err)
			}
			require.NotNil(t, got)
			require.Equal(t, "backup", raw.Header.Get("X-Retryhost-Model"))
			require.Equal(t, responses.ResponseStatusCompleted, got.Status)
			require.Equal(t, "Paris is the capital.", got.OutputText())
			require.Equal(t, "backup", got.Model, "the model that answered, as the chat door names it")
			hits := r.up["backup"].requests()
			require.NotEmpty(t, hits)
			require.Equal(t, "/v1/messages", hits[len(hits)-1].path)
			require.Contains(t, string(hits[len(hits)-1].body["system"]), `"Answer briefly."`)
		})
	}
}

func TestResponses_FunctionCallsRoundTrip(t *testing.T) {
	r := newRig(t, `"rules": []`)
	r.up["primary"].play(act{chunks: []string{"It is sunny."}})
	p := responses.ResponseNewParams{Model: "primary",
		Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "weather",
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}},
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("Weather in Paris?", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(`{"city":"Paris"}`, "call_1", "weather"),
			func() responses.ResponseInputItemUnionParam {
				out := responses.ResponseInputItemParamOfFunctionCallOutput("sunny")
				out.OfFunctionCallOutput.CallID = oai.String("call_1")
				return out
			}(),
		}}}
	got, err := r.client.Responses.New(context.Background(), p)
	require.NoError(t, err)
	require.Equal(t, "It is sunny.", got.OutputText())
	hits := r.up["primary"].requests()
	var msgs []map[string]any
	require.NoError(t, json.Unmarshal(hits[len(hits)-1].body["messages"], &msgs))
	require.Len(t, msgs, 3)
	require.Equal(t, "assistant", msgs[1]["role"])
	require.Equal(t, "tool", msgs[2]["role"])
	require.Equal(t, "call_1", msgs[2]["tool_call_id"])
	require.Contains(t, string(hits[len(hits)-1].body["tools"]), `"weather"`)
}

func TestResponses_AnswersErrorsInOpenAIsShape(t *testing.T) {
	r := newRigOf(t, `"rules": []`, []string{"backup"})
	r.up["primary"].play(act{status: http.StatusServiceUnavailable})
	tests := []struct {
		name   string
		p      responses.ResponseNewParams
		status int
		param  string
		msg    string
	}{
		{name: "previous_response_id", p: func() responses.ResponseNewParams {
			p := responsesParams("backup")
			p.PreviousResponseID = oai.String("resp_1")
			return p
		}(), status: 400, param: "previous_response_id", msg: "is not one OpenAI account"},
		{name: "store", p: func() responses.ResponseNewParams {
			p := responsesParams("backup")
			p.Store = oai.Bool(true)
			return p
		}(), status: 400, param: "store", msg: "is not one OpenAI account"},
		{name: "background", p: func() responses.ResponseNewParams {
			p := responsesParams("backup")
			p.Background = oai.Bool(true)
			return p
		}(), status: 400, param: "background", msg: "is not one OpenAI account"},
		{name: "an unsupported field", p: func() responses.ResponseNewParams {
			p := responsesParams("backup")
			p.Truncation = responses.ResponseNewParamsTruncationAuto
			return p
		}(), status: 400, param: "truncation", msg: "not supported"},
		{name: "an item_reference", p: func() responses.ResponseNewParams {
			p := responsesParams("backup")
			p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
				responses.ResponseInputItemParamOfMessage("Capital of France?", responses.EasyInputMessageRoleUser),
				responses.ResponseInputItemParamOfItemReference("msg_1"),
			}}
			return p
		}(), status: 400, param: "input[1]", msg: "is not one OpenAI account"},
		{name: "unknown route", p: responsesParams("nope"), status: 404, param: "model", msg: `no route named "nope"`},
		{name: "the upstream down", p: responsesParams("primary"), status: 502},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.client.Responses.New(context.Background(), tc.p)
			var oe *oai.Error
			require.True(t, errors.As(err, &oe), "%v", err)
			require.Equal(t, tc.status, oe.StatusCode, oe.RawJSON())
			require.Equal(t, tc.param, oe.Param)
			require.Contains(t, oe.Message, tc.msg)
		})
	}
	require.Empty(t, r.up["backup"].requests())
}

// The request's own fallbacks run on /v1/responses as on the other doors,
// whole and streamed, and are never sent upstream; a bad chain is a 400
// naming the link.
func TestResponses_TakesTheRequestsOwnFallbacks(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "whole", true: "streamed"}[stream], func(t *testing.T) {
			r := newRigOf(t, `"rules": []`, []string{"third"})
			r.up["primary"].play(act{status: http.StatusServiceUnavailable})
			r.up["backup"].play(act{status: http.StatusTooManyRequests})
			r.up["third"].play(act{chunks: []string{"Paris."}})
			var raw *http.Response
			chain := option.WithJSONSet("fallbacks", []string{"backup", "third"})
			var got *responses.Response
			if stream {
				s := r.client.Responses.NewStreaming(context.Background(), responsesParams("primary"), chain, option.WithResponseInto(&raw))
				for s.Next() {
					if ev := s.Current(); ev.Type == "response.completed" {
						resp := ev.Response
						got = &resp
					}
				}
				require.NoError(t, s.Err())
			} else {
				var err error
				got, err = r.client.Responses.New(context.Background(), responsesParams("primary"), chain, option.WithResponseInto(&raw))
				require.NoError(t, err)
			}
			require.NotNil(t, got)
			require.Equal(t, "Paris.", got.OutputText())
			require.Equal(t, "third", got.Model)
			require.Equal(t, "third", raw.Header.Get("X-Retryhost-Model"))
			require.Equal(t, "3", raw.Header.Get("X-Retryhost-Attempts"))
			hits := r.up["third"].requests()
			require.NotEmpty(t, hits)
			require.NotContains(t, hits[len(hits)-1].body, "fallbacks")
		})
	}
	r := newRig(t, `"rules": []`)
	for _, tc := range []struct {
		name, chain, param string
	}{
		{name: "an empty name", chain: `["backup", ""]`, param: "fallbacks[1]"},
		{name: "not a list", chain: `"backup"`, param: "fallbacks"},
		{name: "an unknown route", chain: `["nope"]`, param: "fallbacks[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.client.Responses.New(context.Background(), responsesParams("primary"), option.WithJSONSet("fallbacks", json.RawMessage(tc.chain)))
			var oe *oai.Error
			require.True(t, errors.As(err, &oe), "%v", err)
			require.Equal(t, tc.param, oe.Param, oe.RawJSON())
		})
	}
	require.Empty(t, r.up["primary"].requests(), "a bad chain reaches no upstream")
}

func TestResponses_StopsAndFailuresAfterCommit(t *testing.T) {
	r := newRig(t, `"rules": []`)
	r.up["primary"].play(act{chunks: []string{"Paris"}, finish: "length"})
	got, err := r.client.Responses.New(context.Background(), responsesParams("primary"))
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusIncomplete, got.Status)
	require.Equal(t, "max_output_tokens", string(got.IncompleteDetails.Reason))

	r.up["primary"].play(act{chunks: []string{"Paris"}, cut: true})
	s := r.client.Responses.NewStreaming(context.Background(), responsesParams("primary"))
	var last responses.ResponseStreamEventUnion
	for s.Next() {
		last = s.Current()
	}
	require.NoError(t, s.Err())
	require.NoError(t, s.Close())
	require.Equal(t, "error", last.Type, "the Responses API's error event ends the stream, no response.completed")
	require.Equal(t, "stream_failed", last.Code)
	require.NotEmpty(t, last.Message)
}
