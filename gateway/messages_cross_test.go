package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"
)

// Tool use streams as content_block_start (tool_use) and input_json_delta
// events to an Anthropic client, from an Anthropic upstream and from an
// OpenAI one (recorded transcripts); non-streaming, as a tool_use block.
func TestMessagesToolUse(t *testing.T) {
	r := newRigOf(t, "", []string{"primary"}) // backup: OpenAI
	for _, c := range []struct {
		route, transcript, text, id, input string
	}{
		{"primary", "anthropic/tool_use.json", "Okay, let's check the weather.", "toolu_01T1x1fJ34qAmk2tNTrN7Up6", `{"location": "San Francisco, CA"}`},
		{"backup", "openai/tool_call.json", "", "call_DdmO9pD3xa9XTPNJ32zg2hcA", `{"location":"Paris, France"}`},
	} {
		t.Run(c.transcript, func(t *testing.T) {
			r.up[c.route].play(act{transcript: c.transcript})
			got := r.anthStream(msgParams(c.route))
			require.NoError(t, got.err)
			require.NoError(t, got.accumErr)
			require.True(t, got.sawStop)
			require.Contains(t, got.events, "content_block_delta")
			require.Equal(t, anthropic.StopReasonToolUse, got.msg.StopReason)
			require.Equal(t, c.route, string(got.msg.Model))
			blocks := got.msg.Content
			if c.text != "" {
				require.Equal(t, "text", blocks[0].Type)
				require.Equal(t, c.text, blocks[0].Text)
				blocks = blocks[1:]
			}
			require.Len(t, blocks, 1)
			require.Equal(t, "tool_use", blocks[0].Type)
			require.Equal(t, c.id, blocks[0].ID)
			require.Equal(t, "get_weather", blocks[0].Name)
			require.JSONEq(t, c.input, string(blocks[0].Input))

			// On the wire: the block opens empty and its input streams as deltas.
			r.up[c.route].play(act{transcript: c.transcript})
			resp, body := r.rawMessages(`{"model":"` + c.route + `","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"weather?"}]}`)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			require.Contains(t, body, `"content_block":{"type":"tool_use","id":"`+c.id+`","name":"get_weather","input":{}}`)
			names, data := sseEvents(body)
			deltas := 0
			for i := range names {
				var ev struct {
					Delta struct{ Type string } `json:"delta"`
				}
				_ = json.Unmarshal([]byte(data[i]), &ev)
				if ev.Delta.Type == "input_json_delta" {
					deltas++
				}
			}
			require.Greater(t, deltas, 1, "the input is relayed as it streams, not at the end")

			r.up[c.route].play(act{transcript: c.transcript})
			m, err := r.anth.Messages.New(context.Background(), msgParams(c.route))
			require.NoError(t, err)
			require.Equal(t, anthropic.StopReasonToolUse, m.StopReason)
			last := m.Content[len(m.Content)-1]
			require.Equal(t, "tool_use", last.Type)
			require.Equal(t, c.id, last.ID)
			require.JSONEq(t, c.input, string(last.Input))
		})
	}
}

// An Anthropic upstream's tool_use reaches an OpenAI client as tool_calls,
// streamed and not.
func TestChatToolCallsFromAnthropicUpstream(t *testing.T) {
	r := newRigOf(t, "", []string{"primary"})
	r.up["primary"].play(act{transcript: "anthropic/tool_use.json"})
	s := r.client.Chat.Completions.NewStreaming(context.Background(), params("primary"))
	var acc oai.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	require.NoError(t, s.Err())
	s.Close()
	require.Len(t, acc.Choices, 1)
	msg := acc.Choices[0].Message
	require.Equal(t, "Okay, let's check the weather.", msg.Content)
	require.Len(t, msg.ToolCalls, 1)
	require.Equal(t, "toolu_01T1x1fJ34qAmk2tNTrN7Up6", msg.ToolCalls[0].ID)
	require.Equal(t, "get_weather", msg.ToolCalls[0].Function.Name)
	require.JSONEq(t, `{"location": "San Francisco, CA"}`, msg.ToolCalls[0].Function.Arguments)
	require.Equal(t, "tool_calls", acc.Choices[0].FinishReason)
	require.Equal(t, "primary", acc.Model)

	r.up["primary"].play(act{transcript: "anthropic/tool_use.json"})
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "tool_calls", cc.Choices[0].FinishReason)
	require.Equal(t, "get_weather", cc.Choices[0].Message.ToolCalls[0].Function.Name)
	require.EqualValues(t, 472, cc.Usage.PromptTokens)
	require.EqualValues(t, 89, cc.Usage.CompletionTokens)
}

// A tool call without arguments from an Anthropic upstream (its tool_use
// opens with "input":{} and its only input_json_delta is empty) streams to
// an OpenAI client as arguments "{}", as the non-streamed answer has them
// and as OpenAI sends them: an accumulated "" is no JSON to the client.
func TestChatToolCallWithoutArgumentsFromAnthropicUpstream(t *testing.T) {
	r := newRigOf(t, `"rules": []`, []string{"primary"})
	var sse strings.Builder
	for _, ev := range []string{
		`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-x","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_9","name":"now","input":{}}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":3}}`,
		`{"type":"message_stop"}`,
	} {
		var head struct{ Type string }
		require.NoError(t, json.Unmarshal([]byte(ev), &head))
		sse.WriteString("event: " + head.Type + "\ndata: " + ev + "\n\n")
	}
	play := act{status: http.StatusOK, ctype: "text/event-stream", body: sse.String()}
	r.up["primary"].play(play)
	s := r.client.Chat.Completions.NewStreaming(context.Background(), params("primary"))
	var acc oai.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	require.NoError(t, s.Err())
	s.Close()
	require.Len(t, acc.Choices, 1)
	require.Len(t, acc.Choices[0].Message.ToolCalls, 1)
	require.Equal(t, "now", acc.Choices[0].Message.ToolCalls[0].Function.Name)
	require.Equal(t, "{}", acc.Choices[0].Message.ToolCalls[0].Function.Arguments, "streamed")

	r.up["primary"].play(play)
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "{}", cc.Choices[0].Message.ToolCalls[0].Function.Arguments, "not streamed")
}

// An OpenAI-compatible model's text before its tool call (or before a late
// refusal) is a text block closed before the next block opens, as
// Anthropic's API streams blocks one after the other: the OpenAI adapter
// ends its text only at the end of the stream.
func TestMessagesTextBlockClosedBeforeTheNextOpens(t *testing.T) {
	r := newRigOf(t, `"rules": []`, nil)
	chunk := func(delta, finish string) string {
		return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":` + delta +
			`,"finish_reason":` + finish + `}]}` + "\n\n"
	}
	for name, body := range map[string]string{
		"tool call": chunk(`{"role":"assistant","content":"Checking."}`, "null") +
			chunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]}`, "null") +
			chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":1}"}}]}`, "null") +
			chunk(`{}`, `"tool_calls"`) + "data: [DONE]\n\n",
		"late refusal": chunk(`{"role":"assistant","content":"Sure, "}`, "null") + chunk(`{"refusal":"I can't."}`, "null") +
			chunk(`{}`, `"stop"`) + "data: [DONE]\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			r.up["primary"].play(act{status: http.StatusOK, ctype: "text/event-stream", body: body})
			resp, out := r.rawMessages(`{"model":"primary","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, http.StatusOK, resp.StatusCode, out)
			names, data := sseEvents(out)
			open := -1
			starts := 0
			for i, n := range names {
				var ev struct{ Index int }
				require.NoError(t, json.Unmarshal([]byte(data[i]), &ev), data[i])
				switch n {
				case "content_block_start":
					require.Equal(t, -1, open, "block %d opens while block %d is open:\n%s", ev.Index, open, out)
					open = ev.Index
					starts++
				case "content_block_delta":
					require.Equal(t, open, ev.Index, out)
				case "content_block_stop":
					require.Equal(t, open, ev.Index, out)
					open = -1
				}
			}
			require.Equal(t, 2, starts, out)
			r.up["primary"].play(act{status: http.StatusOK, ctype: "text/event-stream", body: body})
			got := r.anthStream(msgParams("primary"))
			require.NoError(t, got.err)
			require.NoError(t, got.accumErr)
			require.Len(t, got.msg.Content, 2)
		})
	}
}

// The results of parallel tool calls, one Chat Completions "tool" message
// each, reach an Anthropic upstream as one user message of tool_result
// blocks, as Anthropic's API asks for parallel tool use (results split
// over several user turns teach the model to stop calling tools in
// parallel).
func TestChatParallelToolResultsToAnthropicInOneMessage(t *testing.T) {
	r := newRigOf(t, `"rules": []`, []string{"primary"})
	resp, out := r.rawPost("/v1/chat/completions", `{"model":"primary","messages":[{"role":"user","content":"Weather in Paris and Lyon?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}},
			{"id":"call_2","type":"function","function":{"name":"w","arguments":"{\"city\":\"Lyon\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"18C"},{"role":"tool","tool_call_id":"call_2","content":"20C"},
		{"role":"user","content":"Thanks."}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	require.JSONEq(t, `[{"role":"user","content":[{"type":"text","text":"Weather in Paris and Lyon?"}]},
		{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"w","input":{"city":"Paris"}},{"type":"tool_use","id":"call_2","name":"w","input":{"city":"Lyon"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":[{"type":"text","text":"18C"}],"is_error":false},
			{"type":"tool_result","tool_use_id":"call_2","content":[{"type":"text","text":"20C"}],"is_error":false}]},
		{"role":"user","content":[{"type":"text","text":"Thanks."}]}]`, string(r.up["primary"].requests()[0].body["messages"]))
}

// An Anthropic answer its safety classifier stopped after it started
// (stop_reason "refusal", no refusal text) ends for an OpenAI client with
// finish_reason "content_filter", as /v1/messages maps OpenAI's
// content_filter to "refusal", not with "stop", which would pass the cut
// answer off as complete.
func TestChatAnthropicRefusalStopIsContentFilter(t *testing.T) {
	r := newRigOf(t, `"rules": []`, []string{"primary"})
	r.up["primary"].play(act{transcript: "anthropic/refusal_stop_after_text.json"})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Sure, the first step", got.text)
	require.Equal(t, "content_filter", got.finish)

	r.up["primary"].play(act{transcript: "anthropic/refusal_stop_after_text.json"})
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "content_filter", cc.Choices[0].FinishReason)
}

// A route that fails over to a model of the other API still answers in the
// client's format: /v1/messages from an OpenAI model, /v1/chat/completions
// from an Anthropic one.
func TestCrossProviderFailOver(t *testing.T) {
	r := newRigOf(t, "", []string{"backup"}) // primary, third: OpenAI; backup: Anthropic
	r.up["primary"].play(act{status: 503})
	r.up["backup"].play(act{chunks: []string{"Paris", "."}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Paris.", got.text)
	require.Equal(t, map[string]bool{"backup": true}, got.models)
	require.Equal(t, "stop", got.finish)
	require.NotNil(t, got.usage)
	require.EqualValues(t, 135, got.usage.PromptTokens, "the whole prompt: 25 + 100 cache reads + 10 cache writes")
	require.EqualValues(t, 2, got.usage.CompletionTokens)
	require.EqualValues(t, 100, got.usage.PromptTokensDetails.CachedTokens)

	r2 := newRigOf(t, "", []string{"primary", "third"}) // backup: OpenAI
	r2.up["primary"].play(act{status: 529})
	r2.up["backup"].play(act{preamble: true, chunks: []string{"Paris", "."}})
	ag := r2.anthStream(msgParams("primary"))
	require.NoError(t, ag.err)
	require.NoError(t, ag.accumErr)
	require.True(t, ag.sawStop)
	require.Equal(t, "Paris.", ag.text)
	require.Equal(t, "backup", string(ag.msg.Model))
	require.Equal(t, anthropic.StopReasonEndTurn, ag.msg.StopReason)
	require.EqualValues(t, 11, ag.msg.Usage.InputTokens)
	require.EqualValues(t, 2, ag.msg.Usage.OutputTokens)
	r2.up["primary"].play(act{status: 529})
	m, err := r2.anth.Messages.New(context.Background(), msgParams("primary"))
	require.NoError(t, err)
	require.Equal(t, "backup", string(m.Model))
	require.Equal(t, "Paris.", m.Content[0].Text)
}

// An upstream of the other API gets what it can of the request: the
// driver's fields (system, messages and tool turns, tools, stop, max
// tokens, sampling) and the translated tool choice and end-user id; not
// the fields that mean nothing to it.
func TestCrossProviderRequestFields(t *testing.T) {
	r := newRigOf(t, `"rules": []`, []string{"primary"}) // backup: OpenAI
	chat := `{"model":"primary","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Weather?"},
			{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
			{"role":"tool","tool_call_id":"call_1","content":"21C"}],
		"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather now","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],
		"tool_choice":"required","parallel_tool_calls":false,"user":"u-1","stop":["END"],"max_tokens":99,"temperature":0.5,
		"response_format":{"type":"json_object"},"logprobs":true}`
	resp, out := r.rawStream(chat)
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	got := r.up["primary"].requests()[0].body
	require.JSONEq(t, `[{"type":"text","text":"Be brief."}]`, string(got["system"]))
	require.JSONEq(t, `[{"role":"user","content":[{"type":"text","text":"Weather?"}]},
		{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":[{"type":"text","text":"21C"}],"is_error":false}]}]`, string(got["messages"]))
	require.JSONEq(t, `[{"name":"get_weather","description":"Weather now","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]`, string(got["tools"]))
	require.JSONEq(t, `{"type":"any","disable_parallel_tool_use":true}`, string(got["tool_choice"]))
	require.JSONEq(t, `{"user_id":"u-1"}`, string(got["metadata"]))
	require.JSONEq(t, `["END"]`, string(got["stop_sequences"]))
	require.Equal(t, "99", string(got["max_tokens"]))
	require.Equal(t, "0.5", string(got["temperature"]))
	for _, k := range []string{"response_format", "logprobs", "user", "parallel_tool_calls", "stop"} {
		require.NotContains(t, got, k, "an OpenAI-only field")
	}

	msgs := `{"model":"backup","max_tokens":99,"system":"Be brief.","stop_sequences":["END"],"top_k":5,"thinking":{"type":"enabled","budget_tokens":1024},
		"metadata":{"user_id":"u-1"},"tool_choice":{"type":"tool","name":"get_weather","disable_parallel_tool_use":true},
		"tools":[{"name":"get_weather","description":"Weather now","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
		"messages":[{"role":"user","content":"Weather?"},
			{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"21C"},{"type":"text","text":"And tomorrow?"}]}]}`
	resp, out = r.rawMessages(msgs)
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	got = r.up["backup"].requests()[0].body
	require.JSONEq(t, `[{"role":"system","content":"Be brief."},{"role":"user","content":"Weather?"},
		{"role":"assistant","content":"Checking.","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"toolu_1","content":"21C"},{"role":"user","content":"And tomorrow?"}]`, string(got["messages"]))
	require.JSONEq(t, `{"type":"function","function":{"name":"get_weather"}}`, string(got["tool_choice"]))
	require.Equal(t, "false", string(got["parallel_tool_calls"]))
	require.Equal(t, `"u-1"`, string(got["user"]), "metadata.user_id is the end-user id")
	require.JSONEq(t, `["END"]`, string(got["stop"]))
	require.Equal(t, "99", string(got["max_completion_tokens"]))
	var tools []struct {
		Type     string
		Function struct{ Name string }
	}
	require.NoError(t, json.Unmarshal(got["tools"], &tools))
	require.Equal(t, "get_weather", tools[0].Function.Name)
	for _, k := range []string{"top_k", "thinking", "metadata", "system", "stop_sequences", "max_tokens"} {
		require.NotContains(t, got, k, "an Anthropic-only field")
	}

	// The end-user id goes without a tool choice too; a metadata without
	// one (or of the wrong shape) sends no user.
	for body, want := range map[string]string{
		`"metadata":{"user_id":"u-2"}`: `"u-2"`,
		`"metadata":{}`:                "",
		`"metadata":{"user_id":7}`:     "",
		`"metadata":"u-3"`:             "",
	} {
		r.up["backup"].reset()
		resp, out = r.rawMessages(`{"model":"backup","max_tokens":9,` + body + `,"messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, out)
		require.Equal(t, want, string(r.up["backup"].requests()[0].body["user"]), body)
	}
}

// A server tool (web search) relays as Anthropic sent it: the
// server_tool_use block, its web_search_tool_result (content byte for
// byte), then the text, in order, streamed and not.
func TestMessagesServerToolUse(t *testing.T) {
	r := newRigOf(t, "", allAnthropic)
	want := []string{"text", "server_tool_use", "web_search_tool_result", "text"}
	r.up["primary"].play(act{transcript: "anthropic/web_search.json"})
	got := r.anthStream(msgParams("primary"))
	require.NoError(t, got.err)
	require.NoError(t, got.accumErr)
	var types []string
	for _, b := range got.msg.Content {
		types = append(types, b.Type)
	}
	require.Equal(t, want, types)
	require.Equal(t, "web_search", got.msg.Content[1].Name)
	require.JSONEq(t, `{"query": "weather NYC today"}`, string(got.msg.Content[1].Input))
	require.Equal(t, got.msg.Content[1].ID, got.msg.Content[2].ToolUseID)
	require.NotEmpty(t, got.msg.Content[2].Content.OfWebSearchResultBlockArray)
	require.Equal(t, "It is sunny in New York today, with a high of 68°F.", got.msg.Content[3].Text)

	r.up["primary"].play(act{transcript: "anthropic/web_search.json"})
	m, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
	require.NoError(t, err)
	types = nil
	for _, b := range m.Content {
		types = append(types, b.Type)
	}
	require.Equal(t, want, types)
	require.Equal(t, "I'll search for the weather.", m.Content[0].Text)
	require.JSONEq(t, got.msg.Content[2].Content.RawJSON(), m.Content[2].Content.RawJSON())
	var tr struct {
		Events []struct {
			Data struct {
				ContentBlock struct {
					Type    string          `json:"type"`
					Content json.RawMessage `json:"content"`
				} `json:"content_block"`
			} `json:"data"`
		} `json:"events"`
	}
	raw, err := os.ReadFile("../testdata/wire/anthropic/web_search.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &tr))
	for _, e := range tr.Events {
		if e.Data.ContentBlock.Type == "web_search_tool_result" {
			require.JSONEq(t, string(e.Data.ContentBlock.Content), m.Content[2].Content.RawJSON(), "the upstream's result")
		}
	}
	require.EqualValues(t, 510, m.Usage.OutputTokens)
}

// A thinking block reaches an Anthropic client with its signature
// (signature_delta, from the adapter's raw events), so the client can send
// it back in its next turn, streamed and not, also through the demo's
// refusal transform (which never sees the raw events).
func TestMessagesThinkingSignature(t *testing.T) {
	for name, rules := range map[string]string{"no transforms": "", "refusal transform": defaultRules + ", " + demoTransforms} {
		t.Run(name, func(t *testing.T) { testThinkingSignature(t, rules) })
	}
}

func testThinkingSignature(t *testing.T, rules string) {
	r := newRigOf(t, rules, allAnthropic)
	const sig = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
	r.up["primary"].play(act{transcript: "anthropic/thinking.json"})
	got := r.anthStream(msgParams("primary"))
	require.NoError(t, got.err)
	require.NoError(t, got.accumErr)
	require.Len(t, got.msg.Content, 2)
	require.Equal(t, "thinking", got.msg.Content[0].Type)
	require.Equal(t, "The user greets me. Answer briefly.", got.msg.Content[0].Thinking)
	require.Equal(t, sig, got.msg.Content[0].Signature)
	require.Equal(t, "Hi there!", got.msg.Content[1].Text)

	r.up["primary"].play(act{transcript: "anthropic/thinking.json"})
	m, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
	require.NoError(t, err)
	require.Len(t, m.Content, 2)
	require.Equal(t, "thinking", m.Content[0].Type)
	require.Equal(t, sig, m.Content[0].Signature)
	require.Equal(t, "Hi there!", m.Content[1].Text)

	// The accumulated message goes back as the next turn's assistant message.
	r.up["primary"].play(act{chunks: []string{"ok"}})
	p := msgParams("primary")
	p.Messages = append(p.Messages, got.msg.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("And?")))
	_, err = r.anth.Messages.New(context.Background(), p)
	require.NoError(t, err)
	var sent []struct {
		Content []struct{ Type, Signature string }
	}
	require.NoError(t, json.Unmarshal(r.up["primary"].requests()[2].body["messages"], &sent))
	require.Equal(t, sig, sent[1].Content[0].Signature, "the signature reached the upstream")
}

// An Anthropic upstream's 400 reaches an OpenAI client with its status and
// message in OpenAI's error shape, and an OpenAI client's 429 from it
// keeps its Retry-After: the chat door's rules hold whichever API the
// upstream speaks.
func TestChatErrorsFromAnthropicUpstream(t *testing.T) {
	r := newRigOf(t, `"rules": []`, allAnthropic)
	const body = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`
	r.up["primary"].play(act{status: 400, body: body})
	resp, out := r.rawStream(streamBody("primary"))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.JSONEq(t, `{"error":{"message":"prompt is too long: 210000 tokens > 200000 maximum","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}`, out)
	_, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	var apiErr *oai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.Contains(t, apiErr.Message, "prompt is too long")

	r.up["primary"].play(act{status: 429, header: http.Header{"Retry-After": {"9"}}})
	resp, _ = r.rawStream(streamBody("primary"))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "9", resp.Header.Get("Retry-After"))
}

// A thinking block with no signature (what an OpenAI-compatible model's
// reasoning_content becomes on /v1/messages) is dropped from the history
// an Anthropic upstream gets, which would refuse the whole request (a 400,
// never failed over) if the client sent it back; signed thinking and
// redacted thinking go as they came.
func TestUnsignedThinkingNotSentToAnthropic(t *testing.T) {
	r := newRigOf(t, `"rules": []`, []string{"primary"}) // backup: OpenAI
	body := func(route string) string {
		return `{"model":"` + route + `","max_tokens":99,"messages":[
			{"role":"user","content":"Capital of France?"},
			{"role":"assistant","content":[{"type":"thinking","thinking":"From a chat model.","signature":""},{"type":"text","text":"Paris."}]},
			{"role":"user","content":"And of Italy?"},
			{"role":"assistant","content":[{"type":"thinking","thinking":"No signature field."},{"type":"thinking","thinking":"Signed.","signature":"sig-1"},
				{"type":"redacted_thinking","data":"opaque"},{"type":"text","text":"Rome."}]},
			{"role":"assistant","content":[{"type":"thinking","thinking":"Alone and unsigned.","signature":""}]},
			{"role":"user","content":"And of Spain?"}]}`
	}
	resp, out := r.rawMessages(body("primary"))
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	require.JSONEq(t, `[
		{"role":"user","content":"Capital of France?"},
		{"role":"assistant","content":[{"type":"text","text":"Paris."}]},
		{"role":"user","content":"And of Italy?"},
		{"role":"assistant","content":[{"type":"thinking","thinking":"Signed.","signature":"sig-1"},{"type":"redacted_thinking","data":"opaque"},{"type":"text","text":"Rome."}]},
		{"role":"user","content":"And of Spain?"}]`, string(r.up["primary"].requests()[0].body["messages"]))

	// A history with nothing to drop goes byte for byte.
	signed := `{"model":"primary","max_tokens":99,"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"Signed.","signature":"sig-1"},{"type":"text","text":"Hello."}]},{"role":"user","content":"Bye"}]}`
	resp, out = r.rawMessages(signed)
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	var sent map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(signed), &sent))
	require.Equal(t, string(sent["messages"]), string(r.up["primary"].requests()[1].body["messages"]))
}
