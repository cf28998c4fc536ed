package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/stretchr/testify/require"
)

// The blocks of an Anthropic upstream's answer that the driver's parts do
// not carry (redacted thinking, citations, signatures, a tool's caller,
// blocks and deltas newer than anthropic-sdk-go) reach a /v1/messages
// client as the upstream sent them, from the adapter's raw events.

// wireEvents returns the (event name, compacted data) pairs of a recorded
// Anthropic stream, as replay sends them.
func wireEvents(t testing.TB, name string) (names, data []string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "wire", name))
	require.NoError(t, err)
	var tr struct {
		Events []struct {
			Event string          `json:"event"`
			Data  json.RawMessage `json:"data"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal(raw, &tr))
	for _, e := range tr.Events {
		var buf bytes.Buffer
		require.NoError(t, json.Compact(&buf, e.Data))
		names, data = append(names, e.Event), append(data, buf.String())
	}
	return names, data
}

const messagesStreamBody = `{"model": "primary", "max_tokens": 256, "stream": true, "messages": [{"role": "user", "content": "Weather in NYC?"}]}`

// Every event of the upstream's stream but message_start (which names the
// gateway's message and route) reaches the client byte for byte, in its
// order, with its index: the gateway's blocks are numbered as they open,
// and here each of the upstream's opens (none is empty). The one event
// left out is an empty input_json_delta, which carries nothing. The same
// through the demo's refusal transform, which holds the text while it
// judges it: the raw events wait behind the text they came with.
func TestMessagesBlocksByteForByte(t *testing.T) {
	for name, rules := range map[string]string{"no transforms": "", "refusal transform": defaultRules + ", " + demoTransforms} {
		t.Run(name, func(t *testing.T) {
			r := newRigOf(t, rules, allAnthropic)
			r.up["primary"].play(act{transcript: "anthropic/blocks.json"})
			resp, body := r.rawMessages(messagesStreamBody)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			gotNames, gotData := sseEvents(body)
			wantNames, wantData := wireEvents(t, "anthropic/blocks.json")
			var wn, wd []string
			for i := range wantNames {
				if strings.Contains(wantData[i], `"partial_json":""`) {
					continue
				}
				wn, wd = append(wn, wantNames[i]), append(wd, wantData[i])
			}
			require.Equal(t, wn, gotNames)
			require.Equal(t, wd[1:], gotData[1:])
			var start struct {
				Message struct {
					Model string          `json:"model"`
					Usage json.RawMessage `json:"usage"`
				} `json:"message"`
			}
			require.NoError(t, json.Unmarshal([]byte(gotData[0]), &start))
			require.Equal(t, "primary", start.Message.Model)
			require.Equal(t, `{"input_tokens":2679,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3,"service_tier":"standard"}`,
				string(start.Message.Usage), "message_start's usage is the upstream's")
		})
	}
}

// What an anthropic-sdk-go client makes of it, streamed (Accumulate) and
// not: every block in its place with what the upstream gave it, through a
// policy with and without a refusal transform.
func TestMessagesBlocksThroughAnthropicClient(t *testing.T) {
	for name, rules := range map[string]string{"no transforms": "", "refusal transform": defaultRules + ", " + demoTransforms} {
		t.Run(name, func(t *testing.T) {
			r := newRigOf(t, rules, allAnthropic)
			r.up["primary"].play(act{transcript: "anthropic/blocks.json"})
			got := r.anthStream(msgParams("primary"))
			require.NoError(t, got.err)
			require.NoError(t, got.accumErr)
			requireBlocks(t, &got.msg, true)

			// The answer goes back as the next turn's assistant message: the
			// upstream gets its thinking blocks whole (signed, redacted), as
			// Anthropic requires to continue after them.
			r.up["primary"].play(act{chunks: []string{"ok"}})
			p := msgParams("primary")
			p.Messages = append(p.Messages, got.msg.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("And?")))
			_, err := r.anth.Messages.New(context.Background(), p)
			require.NoError(t, err)
			var sent []struct {
				Content []struct{ Type, Data, Signature string }
			}
			require.NoError(t, json.Unmarshal(r.up["primary"].requests()[1].body["messages"], &sent))
			require.Equal(t, "redacted_thinking", sent[1].Content[0].Type)
			require.Equal(t, got.msg.Content[0].Data, sent[1].Content[0].Data)
			require.Equal(t, "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds", sent[1].Content[1].Signature)
			require.Len(t, sent[1].Content, 8)
			require.Equal(t, "ErUBCkYIBBgCIkB2Zm9tX2VtcHR5X3RoaW5raW5n", sent[1].Content[6].Signature, "the thinking block with only a signature")
			r.up["primary"].reset()

			r.up["primary"].play(act{transcript: "anthropic/blocks.json"})
			m, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
			require.NoError(t, err)
			requireBlocks(t, m, false)
			for i := range m.Content {
				if m.Content[i].Type != "weather_card" {
					require.JSONEq(t, got.msg.Content[i].RawJSON(), m.Content[i].RawJSON(), "block %d: streamed and not alike", i)
				}
			}
		})
	}
}

// requireBlocks checks the answer of blocks.json.
func requireBlocks(t *testing.T, m *anthropic.Message, streamed bool) {
	t.Helper()
	var types []string
	for _, b := range m.Content {
		types = append(types, b.Type)
	}
	require.Equal(t, []string{"redacted_thinking", "thinking", "server_tool_use", "web_search_tool_result", "text", "weather_card", "thinking", "text"}, types)
	c := m.Content
	require.Equal(t, "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj2pWmN5VBKUb1g0rVR9", c[0].Data)
	require.Equal(t, "I should look the weather up.", c[1].Thinking)
	require.Equal(t, "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds", c[1].Signature)
	require.Equal(t, "web_search", c[2].Name)
	require.JSONEq(t, `{"query": "weather NYC today"}`, string(c[2].Input))
	require.Contains(t, c[2].RawJSON(), `"caller":{"type":"direct"}`, "the server tool's caller")
	require.Equal(t, c[2].ID, c[3].ToolUseID)
	require.Contains(t, c[3].RawJSON(), `"caller":{"type":"direct"}`)
	require.Equal(t, "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2YSDCLSdEEiJj",
		c[3].Content.OfWebSearchResultBlockArray[0].EncryptedContent)
	require.Equal(t, "It is sunny in New York today, with clear skies tonight.", c[4].Text)
	require.Len(t, c[4].Citations, 2)
	require.Equal(t, "Sunny, high of 68°F.", c[4].Citations[0].CitedText)
	require.Equal(t, "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm", c[4].Citations[0].EncryptedIndex)
	require.Equal(t, "https://weather.com/weather/today/l/New+York+NY", c[4].Citations[1].URL)
	var card struct {
		CardID string            `json:"card_id"`
		Fields map[string]string `json:"fields"`
	}
	require.NoError(t, json.Unmarshal([]byte(c[5].RawJSON()), &card), "a block newer than the SDK")
	require.Equal(t, "wc_01", card.CardID)
	require.Equal(t, "F", card.Fields["unit"])
	require.Empty(t, c[6].Thinking)
	require.Equal(t, "ErUBCkYIBBgCIkB2Zm9tX2VtcHR5X3RoaW5raW5n", c[6].Signature, "a thinking block with only its signature")
	require.Equal(t, " END", c[7].Text)
	require.Equal(t, anthropic.StopReasonStopSequence, m.StopReason)
	require.Equal(t, "###", m.StopSequence)
	require.EqualValues(t, 1, m.Usage.ServerToolUse.WebSearchRequests)
	require.EqualValues(t, "standard", m.Usage.ServiceTier, "message_start's usage members")
	require.EqualValues(t, 10682, m.Usage.InputTokens)
	require.EqualValues(t, 510, m.Usage.OutputTokens)
	_ = streamed
}

// A refusal transform that fails an answer over drops what the raw events
// of that answer carried (a block no part maps, its usage):
// the client gets the next model's answer alone, streamed and not.
func TestMessagesRefusedAttemptLeavesNoBlocks(t *testing.T) {
	r := newRigOf(t, defaultRules+", "+demoTransforms, allAnthropic)
	for _, streamed := range []bool{true, false} {
		r.up["primary"].play(act{transcript: "anthropic/refusal_text_after_blocks.json"})
		r.up["backup"].play(act{transcript: "anthropic/thinking.json"})
		var m *anthropic.Message
		if streamed {
			got := r.anthStream(msgParams("primary"))
			require.NoError(t, got.err)
			require.NoError(t, got.accumErr)
			m = &got.msg
			require.EqualValues(t, 40, m.Usage.InputTokens, "message_start's usage is the backup's")
		} else {
			var err error
			m, err = r.anth.Messages.New(context.Background(), msgParams("primary"))
			require.NoError(t, err)
		}
		require.Equal(t, "backup", string(m.Model), "the refusal failed over")
		require.Len(t, m.Content, 2)
		require.Equal(t, "thinking", m.Content[0].Type)
		require.Equal(t, "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds", m.Content[0].Signature)
		require.Equal(t, "Hi there!", m.Content[1].Text)
		require.NotContains(t, m.RawJSON(), "file_011CNha8iCJcU1wXNR6q4V8w")
		require.Len(t, r.up["primary"].requests(), 1)
		r.up["primary"].reset()
		r.up["backup"].reset()
	}
}

// The gateway numbers blocks as it opens them, and the upstream's empty
// text block opens none: every later event, raw ones included, names the
// gateway's index of its block, also when two blocks take deltas in turn.
func TestMessagesBlocksRenumbered(t *testing.T) {
	r := newRigOf(t, "", allAnthropic)
	r.up["primary"].play(act{transcript: "anthropic/blocks_renumbered.json"})
	resp, body := r.rawMessages(messagesStreamBody)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	names, data := sseEvents(body)
	require.Equal(t, []string{"message_start",
		"content_block_start", "content_block_stop", // redacted_thinking
		"content_block_start", "content_block_delta", // text, its citation
		"content_block_start",                        // chart
		"content_block_delta", "content_block_delta", // text, chart
		"content_block_stop", "content_block_stop", "message_delta", "message_stop"}, names)
	require.Equal(t, []string{
		`{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgyRenumbered1c2VkIHRoaW5raW5n"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"","citations":[]}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{"type":"page_location","cited_text":"Revenue grew 12% year over year.","document_index":0,"document_title":"Annual report","start_page_number":4,"end_page_number":5}}}`,
		`{"type":"content_block_start","index":2,"content_block":{"type":"chart","chart_id":"ch_7","series":[]}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Revenue grew 12%."}}`,
		`{"type":"content_block_delta","index":2,"delta":{"type":"series_delta","point":[2025,112]}}`,
		`{"type":"content_block_stop","index":2}`,
		`{"type":"content_block_stop","index":1}`,
	}, data[1:10])

	r.up["primary"].play(act{transcript: "anthropic/blocks_renumbered.json"})
	got := r.anthStream(msgParams("primary"))
	require.NoError(t, got.err)
	require.NoError(t, got.accumErr, "the SDK checks that blocks start in order, each at the next index")
	for _, streamed := range []bool{true, false} {
		m := &got.msg
		if !streamed {
			r.up["primary"].play(act{transcript: "anthropic/blocks_renumbered.json"})
			var err error
			m, err = r.anth.Messages.New(context.Background(), msgParams("primary"))
			require.NoError(t, err)
		}
		require.Len(t, m.Content, 3)
		require.Equal(t, "redacted_thinking", m.Content[0].Type)
		require.Equal(t, "Revenue grew 12%.", m.Content[1].Text)
		require.Len(t, m.Content[1].Citations, 1)
		require.EqualValues(t, 4, m.Content[1].Citations[0].StartPageNumber)
		require.Equal(t, "chart", m.Content[2].Type)
		require.Contains(t, m.Content[2].RawJSON(), `"chart_id":"ch_7"`)
	}
}

// Across APIs. A Chat Completions answer has no place for an Anthropic
// upstream's redacted thinking, signatures, citations, a block newer than
// the SDK or the stop sequence: an OpenAI client gets what it can carry
// (the thinking as reasoning_content, the text, the server tool's call as
// a tool call), streamed and not, and nothing breaks on the rest.
func TestChatAnswerFromAnthropicBlocks(t *testing.T) {
	r := newRigOf(t, "", allAnthropic)
	const text = "It is sunny in New York today, with clear skies tonight. END"
	r.up["primary"].play(act{transcript: "anthropic/blocks.json"})
	resp, body := r.rawStream(streamBody("primary"))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	for _, leak := range []string{"EmwKAhgBEgy3va3pzix", "EqQBCgIYAhIM1gbcDa9G", "encrypted_index", "wc_01", "weather_card", "###"} {
		require.NotContains(t, body, leak)
	}
	r.up["primary"].play(act{transcript: "anthropic/blocks.json"})
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, text, cc.Choices[0].Message.Content)
	require.Contains(t, cc.Choices[0].Message.RawJSON(), `"reasoning_content":"I should look the weather up."`)
	require.Len(t, cc.Choices[0].Message.ToolCalls, 1)
	require.Equal(t, "web_search", cc.Choices[0].Message.ToolCalls[0].Function.Name)
	require.EqualValues(t, 510, cc.Usage.CompletionTokens)
}

// The other way: an OpenAI-compatible model answers /v1/messages with the
// blocks its parts make (text here), nothing relayed from raw events, and
// its usage at the end (message_start's is zero, as no Anthropic
// message_start came).
func TestMessagesFromOpenAIUpstreamNothingToRelay(t *testing.T) {
	r := newRigOf(t, "", []string{"backup"})
	r.up["primary"].play(act{preamble: true, chunks: []string{"Par", "is"}, logprobs: true, tier: "priority"})
	resp, body := r.rawMessages(messagesStreamBody)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	names, data := sseEvents(body)
	require.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}, names)
	require.Contains(t, data[0], `"usage":{"input_tokens":0,"output_tokens":0}`)
	require.Equal(t, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`, data[1])
	require.Contains(t, data[5], `"delta":{"stop_reason":"end_turn","stop_sequence":null}`)
	require.NotContains(t, body, "logprobs")
	require.NotContains(t, body, "priority")
}
