package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

// TestToolCallIDsAreUnique: tool calls an upstream gave one id (some
// OpenAI-compatible servers do), or an empty id beside one spelled like
// the id made for it, stay as many calls as the upstream sent, each with
// an id of its own. Parts name their call by id: the gateway merged two
// such calls into one, a stream's name and arguments run together
// ("ab", `{}{"z":1}`), a non-streamed answer's first call dropped.
func TestToolCallIDsAreUnique(t *testing.T) {
	type call struct{ id, name, args string }
	for _, tc := range []struct {
		name  string
		calls []call // as the upstream sends them, index by index
		want  []string
	}{
		{"same id twice", []call{{"call_1", "a", "{}"}, {"call_1", "b", `{"z":1}`}}, []string{"call_1", "call_1_1"}},
		{"empty id beside its made id", []call{{"", "a", "{}"}, {"call_0", "b", "{}"}}, []string{"call_0", "call_0_1"}},
		{"no ids", []call{{"", "a", "{}"}, {"", "b", "{}"}}, []string{"call_0", "call_1"}},
		{"distinct ids", []call{{"call_A", "a", "{}"}, {"call_B", "b", "{}"}}, []string{"call_A", "call_B"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chunk := func(delta, finish string) wiretest.Event {
				return wiretest.Event{Data: json.RawMessage(fmt.Sprintf(
					`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}`, delta, finish))}
			}
			events := []wiretest.Event{chunk(`{"role":"assistant","content":null}`, "null")}
			var msgCalls []map[string]any
			for i, c := range tc.calls {
				id := ""
				if c.id != "" {
					id = fmt.Sprintf(`"id":%q,`, c.id)
				}
				events = append(events,
					chunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,%s"type":"function","function":{"name":%q,"arguments":""}}]}`, i, id, c.name), "null"),
					chunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":%q}}]}`, i, c.args), "null"))
				msgCalls = append(msgCalls, map[string]any{"id": c.id, "type": "function", "function": map[string]any{"name": c.name, "arguments": c.args}})
			}
			events = append(events, chunk(`{}`, `"tool_calls"`), wiretest.Event{Data: json.RawMessage(`"[DONE]"`)})
			srv := wiretest.Serve(t, &wiretest.Transcript{Headers: map[string]string{"Content-Type": "text/event-stream"}, Events: events})
			s, err := model(t, srv).Stream(context.Background(), request())
			require.NoError(t, err)
			parts, err := wiretest.Collect(s, 1000)
			require.NoError(t, err)
			check := func(parts []abi.Part) {
				t.Helper()
				var ids []string
				for _, p := range parts {
					if p.Kind == abi.KindToolCall {
						ids = append(ids, p.ID)
						require.Equal(t, tc.calls[len(ids)-1].name, p.Tool.Name)
						require.Equal(t, tc.calls[len(ids)-1].args, p.Tool.Input)
					}
				}
				require.Equal(t, tc.want, ids)
			}
			check(parts)
			for _, p := range parts { // every delta names its own call
				if p.Kind == abi.KindToolInputStart {
					require.Contains(t, tc.want, p.ID)
				}
			}

			body, err := json.Marshal(map[string]any{"id": "c", "object": "chat.completion", "created": 1, "model": "m",
				"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": nil, "tool_calls": msgCalls}, "finish_reason": "tool_calls"}}})
			require.NoError(t, err)
			srv = wiretest.Serve(t, &wiretest.Transcript{Headers: map[string]string{"Content-Type": "application/json"}, Body: string(body)})
			resp, err := model(t, srv).Generate(context.Background(), request())
			require.NoError(t, err)
			check(resp.Content)
		})
	}
}
