package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	pant "github.com/retryhost/retryhost/provider/anthropic"
)

// memTransport answers every request with one SSE body, in memory.
type memTransport struct{ body []byte }

func (m memTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Request: r, ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body:   io.NopCloser(bytes.NewReader(m.body))}, nil
}

// anthropicParts runs body through the Anthropic adapter, raw events on,
// as a policy's model streams them to the gateway; false if the stream
// failed (the gateway relays no answer then, or ends it in-band).
func anthropicParts(t testing.TB, body []byte, raw ...pant.Option) ([]abi.Part, bool) {
	hc := &http.Client{Transport: memTransport{body}}
	if len(raw) == 0 {
		raw = []pant.Option{pant.WithUnmappedEvents()} // as a policy's model
	}
	m, err := pant.New("m", append(raw, pant.WithBaseURL("http://mem"), pant.WithAPIKey("k"), pant.WithHTTPClient(hc))...)
	require.NoError(t, err)
	st, err := m.Stream(context.Background(), &driver.Request{})
	if err != nil {
		return nil, false
	}
	defer st.Close()
	var parts []abi.Part
	for len(parts) < 1<<14 {
		p, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return parts, true
		}
		if err != nil {
			return nil, false
		}
		parts = append(parts, p)
	}
	return nil, false
}

// FuzzMessagesEncoder feeds arbitrary Anthropic streams, through the real
// adapter with its raw events, to the Messages door's encoder, streamed
// and collected. Whatever the upstream sent: every event of the stream is
// one line of valid JSON, anthropic-sdk-go accumulates the stream without
// an error (blocks start in order at the next index, deltas and stops
// name a started block), and the non-streaming answer is a message it
// decodes. Seeds: the Anthropic wire transcripts.
func FuzzMessagesEncoder(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "wire", "anthropic", "*.json"))
	for _, p := range files {
		raw, err := os.ReadFile(p)
		require.NoError(f, err)
		var tr struct {
			Events []struct {
				Event, Raw string
				Data       json.RawMessage
			}
		}
		require.NoError(f, json.Unmarshal(raw, &tr))
		var b strings.Builder
		for _, e := range tr.Events {
			if e.Raw != "" {
				b.WriteString(e.Raw)
				continue
			}
			var buf bytes.Buffer
			if json.Compact(&buf, e.Data) != nil {
				continue
			}
			if e.Event != "" {
				b.WriteString("event: " + e.Event + "\n")
			}
			b.WriteString("data: " + buf.String() + "\n\n")
		}
		if b.Len() > 0 {
			f.Add([]byte(b.String()))
		}
	}
	f.Fuzz(checkMessagesEncoder)
}

// checkMessagesEncoder checks FuzzMessagesEncoder's invariants on body,
// with the raw events a policy's model sends and with all of them.
func checkMessagesEncoder(t *testing.T, body []byte) {
	for _, raw := range []pant.Option{pant.WithUnmappedEvents(), pant.WithRawChunks()} {
		if parts, ok := anthropicParts(t, body, raw); ok {
			checkEncoded(t, parts)
		}
	}
}

func checkEncoded(t *testing.T, parts []abi.Part) {
	enc := &messagesEncoder{id: "msg_rh1", model: "route"}
	var out []byte
	var u abi.Usage
	for i := range parts {
		p := &parts[i]
		if p.Kind == abi.KindRaw {
			out = enc.raw(out, p)
			continue
		}
		if p.Kind == abi.KindFinish && p.Finish != nil {
			u = p.Finish.Usage
		}
		out = enc.appendPart(out, p)
	}
	out = enc.appendEnd(out, &u)
	msg := accumulated(t, out)
	col := &messagesEncoder{id: "msg_rh1", model: "route"}
	for i := range parts {
		col.collect(&parts[i])
	}
	answer := col.appendAnswer(nil)
	require.True(t, json.Valid(answer), "%s", answer)
	var m anthropic.Message
	require.NoError(t, json.Unmarshal(answer, &m))
	require.Len(t, m.Content, len(msg.Content), "streamed and collected answers have the same blocks:\n%s\n%s", out, answer)
}

// FuzzMessagesBlocks drives the same checks with streams of well-formed
// events only, made from ops: blocks of every type the adapter and the
// encoder tell apart (and one newer) started, given deltas of every type
// and stopped at a few indices, in any order, interleaved, repeated.
func FuzzMessagesBlocks(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 2, 0})
	f.Add([]byte{0, 0x21, 0, 0x42, 1, 0x12, 1, 0x21, 2, 0x11, 2, 0x02, 0, 0x63, 1, 0x53, 2, 3})
	f.Add([]byte{0, 0x10, 1, 0x20, 0, 0x51, 1, 0x41, 1, 0x30, 2, 0, 2, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		blocks := []string{`{"type":"text","text":""}`, `{"type":"thinking","thinking":"","signature":""}`,
			`{"type":"redacted_thinking","data":"Ered"}`, `{"type":"tool_use","id":"toolu_1","name":"f","input":{}}`,
			`{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}`,
			`{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]}`, `{"type":"gadget","v":[]}`,
			`{"type":"text","text":"pre","citations":[]}`}
		deltas := []string{`{"type":"text_delta","text":"t"}`, `{"type":"thinking_delta","thinking":"h"}`,
			`{"type":"signature_delta","signature":"S"}`, `{"type":"input_json_delta","partial_json":"{\"a\":1}"}`,
			`{"type":"citations_delta","citation":{"type":"char_location","cited_text":"c","document_index":0,"document_title":"d","start_char_index":0,"end_char_index":1}}`,
			`{"type":"gizmo_delta","g":1}`, `{"type":"text_delta","text":""}`, `{"type":"input_json_delta","partial_json":""}`}
		var b strings.Builder
		b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n")
		for k := 0; k+1 < len(ops) && k < 128; k += 2 {
			idx := strconv.Itoa(int(ops[k+1] & 3))
			which := int(ops[k+1]>>4) % 8
			switch ops[k] % 3 {
			case 0:
				b.WriteString(`event: content_block_start` + "\ndata: " + `{"type":"content_block_start","index":` + idx + `,"content_block":` + blocks[which] + "}\n\n")
			case 1:
				b.WriteString(`event: content_block_delta` + "\ndata: " + `{"type":"content_block_delta","index":` + idx + `,"delta":` + deltas[which] + "}\n\n")
			case 2:
				b.WriteString(`event: content_block_stop` + "\ndata: " + `{"type":"content_block_stop","index":` + idx + "}\n\n")
			}
		}
		b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\n")
		b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		checkMessagesEncoder(t, []byte(b.String()))
	})
}

func TestAppendMerged(t *testing.T) {
	for _, c := range []struct {
		obj  string
		set  []member
		want string
		ok   bool
	}{
		{`{"a":1,"b":{"c" : [1, 2]}}`, nil, `{"a":1,"b":{"c" : [1, 2]}}`, true},
		{`{"type":"text","text":"","citations":[]}`, []member{{"text", `"hi"`}}, `{"type":"text","text":"hi","citations":[]}`, true},
		{`{"type":"text","text":""}`, []member{{"text", `"hi"`}, {"citations", `[{"x":1}]`}}, `{"type":"text","text":"hi","citations":[{"x":1}]}`, true},
		{`{}`, []member{{"a", "1"}, {"b", "2"}}, `{"a":1,"b":2}`, true},
		{` { "k\u0041" : "v" } `, nil, `{"kA":"v"}`, true},
		{`{"a":1,"a":2}`, []member{{"a", "3"}}, `{"a":3,"a":3}`, true},
		{`{"a":1}{}`, nil, "", false},
		{`{"a":1`, nil, "", false},
		{`[1]`, nil, "", false},
		{`"s"`, nil, "", false},
		{``, nil, "", false},
	} {
		got, ok := appendMerged([]byte("x"), c.obj, c.set)
		require.Equal(t, c.ok, ok, c.obj)
		if !ok {
			require.Equal(t, "x", string(got), "b as it was")
			continue
		}
		require.Equal(t, "x"+c.want, string(got), c.obj)
	}
}

// FuzzAppendMerged: a valid object merged is a valid object with the
// members set replaced or added and the others unchanged; anything else
// is refused and leaves b as it was.
func FuzzAppendMerged(f *testing.F) {
	for _, s := range []string{`{"type":"text","text":"","citations":[]}`, `{"input_tokens":1,"server_tool_use":{"web_search_requests":1}}`,
		`{"a":{"b":[1,{"c":null}]},"d":"\u00e9\n"}`, `{"a":1}x`, `[]`, `{"a":1,"a":2}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, obj string) {
		set := []member{{"text", `"new"`}, {"added", `[1]`}}
		got, ok := appendMerged(nil, obj, set)
		var in map[string]json.RawMessage
		dec := json.NewDecoder(strings.NewReader(obj))
		valid := dec.Decode(&in) == nil && in != nil
		if valid {
			_, err := dec.Token()
			valid = errors.Is(err, io.EOF)
		}
		require.Equal(t, valid, ok, "%q", obj)
		if !ok {
			require.Empty(t, got)
			return
		}
		var out map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(got, &out), "%s", got)
		require.Equal(t, `"new"`, string(out["text"]))
		require.Equal(t, `[1]`, string(out["added"]))
		for k, v := range in {
			if k != "text" && k != "added" {
				require.JSONEq(t, string(v), string(out[k]), k)
			}
		}
		require.Len(t, out, len(in)+2-countKeys(in, "text", "added"))
	})
}

func countKeys(m map[string]json.RawMessage, keys ...string) int {
	n := 0
	for _, k := range keys {
		if _, ok := m[k]; ok {
			n++
		}
	}
	return n
}

// An upstream whose event JSON spans lines (several data: lines, which
// an SSE reader joins with line breaks) still gets one data line per
// event: the relayed JSON is compacted, never cut.
func TestMessagesRawEventOnOneLine(t *testing.T) {
	body := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"usage\":{\n" +
		"data:   \"input_tokens\": 7,\n" +
		"data:   \"output_tokens\": 1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\n" +
		"data: \"content_block\": {\"type\": \"redacted_thinking\",\n" +
		"data:   \"data\": \"Ered\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	parts, ok := anthropicParts(t, []byte(body))
	require.True(t, ok)
	enc := &messagesEncoder{id: "msg_rh1", model: "route"}
	var out []byte
	for i := range parts {
		if parts[i].Kind == abi.KindRaw {
			out = enc.raw(out, &parts[i])
		} else {
			out = enc.appendPart(out, &parts[i])
		}
	}
	require.Contains(t, string(out), `"usage":{"input_tokens":7,"output_tokens":1}}}`+"\n\n")
	require.Contains(t, string(out), `"content_block":{"type":"redacted_thinking","data":"Ered"}}`+"\n\n")
	checkMessagesEncoder(t, []byte(body))
}

// The encoder tracks at most maxUpBlocks upstream blocks at once (the
// adapter ends a stream with more open); past that a block only raw
// events carry is not relayed, and a stop frees its slot.
func TestMessagesUpstreamBlocksCapped(t *testing.T) {
	rawPart := func(js string) *abi.Part {
		var ev anthropic.MessageStreamEventUnion
		require.NoError(t, json.Unmarshal([]byte(js), &ev))
		return &abi.Part{Kind: abi.KindRaw, Raw: ev}
	}
	start := func(i int) *abi.Part {
		return rawPart(`{"type":"content_block_start","index":` + strconv.Itoa(i) + `,"content_block":{"type":"gadget"}}`)
	}
	enc := &messagesEncoder{id: "msg_rh1", model: "route"}
	var out []byte
	for i := range maxUpBlocks + 10 {
		out = enc.raw(out, start(i))
	}
	require.Len(t, enc.up, maxUpBlocks)
	require.Equal(t, maxUpBlocks, strings.Count(string(out), `"content_block":{"type":"gadget"}`))
	out = enc.raw(out, rawPart(`{"type":"content_block_stop","index":0}`))
	require.Len(t, enc.up, maxUpBlocks-1)
	out = enc.raw(out, start(maxUpBlocks+10))
	require.Len(t, enc.up, maxUpBlocks)
	require.Equal(t, maxUpBlocks+1, strings.Count(string(out), `"content_block":{"type":"gadget"}`))
}

// A policy with "commit": "legacy" gets no raw events (one would commit
// the stream before any content): /v1/messages answers from the parts
// alone, without what only raw events carry.
func TestMessagesLegacyCommitRelaysNoRawBlocks(t *testing.T) {
	r := newRigOf(t, defaultRules+`, "commit": "legacy"`, allAnthropic)
	r.up["primary"].play(act{transcript: "anthropic/blocks.json"})
	m, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
	require.NoError(t, err)
	var types []string
	for _, b := range m.Content {
		types = append(types, b.Type)
	}
	require.Equal(t, []string{"thinking", "server_tool_use", "web_search_tool_result", "text", "text"}, types)
	require.Empty(t, m.Content[0].Signature)
	require.Empty(t, m.Content[3].Citations)
	require.Equal(t, "It is sunny in New York today, with clear skies tonight.", m.Content[3].Text)
}

// A non-streaming answer folds the deltas of a block only raw events carry
// (a beta mcp_tool_use, a newer type) when their type is one the SDK
// folds: input JSON into its input, text into its text, citations
// appended; the start's other members as they were, a delta of an unknown
// type left out.
func TestMessagesRawBlockDeltasFolded(t *testing.T) {
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	body := ev("message_start", `{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":1,"output_tokens":1}}}`) +
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"mcp_tool_use","id":"mcptoolu_1","name":"echo","server_name":"tools","input":{}}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"say\": "}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"hi\"}"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"note","text":"a","citations":[{"type":"char_location","cited_text":"x"}],"z":1}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"b"}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{"type":"char_location","cited_text":"y"}}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"wobble_delta","w":2}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":1}`) +
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}`) +
		ev("message_stop", `{"type":"message_stop"}`)
	parts, ok := anthropicParts(t, []byte(body))
	require.True(t, ok)
	enc := &messagesEncoder{id: "msg_rh1", model: "route"}
	for i := range parts {
		enc.collect(&parts[i])
	}
	var m struct{ Content []json.RawMessage }
	require.NoError(t, json.Unmarshal(enc.appendAnswer(nil), &m))
	require.Len(t, m.Content, 2)
	require.Equal(t, `{"type":"mcp_tool_use","id":"mcptoolu_1","name":"echo","server_name":"tools","input":{"say": "hi"}}`, string(m.Content[0]))
	require.Equal(t, `{"type":"note","text":"ab","citations":[{"type":"char_location","cited_text":"x"},{"type":"char_location","cited_text":"y"}],"z":1}`, string(m.Content[1]))
	checkMessagesEncoder(t, []byte(body))
}

// accumulated is the message anthropic-sdk-go's accumulator makes of the
// /v1/messages events in out, each checked to be its name and one data
// line of valid JSON.
func accumulated(t testing.TB, out []byte) anthropic.Message {
	t.Helper()
	var msg anthropic.Message
	for _, ev := range strings.SplitAfter(string(out), "\n\n") {
		if ev == "" {
			continue
		}
		lines := strings.Split(strings.TrimSuffix(ev, "\n\n"), "\n")
		require.Len(t, lines, 2, "an event is its name and one data line: %q", ev)
		data, ok := strings.CutPrefix(lines[1], "data: ")
		require.True(t, ok, "%q", ev)
		require.True(t, json.Valid([]byte(data)), "%q", data)
		var e anthropic.MessageStreamEventUnion
		require.NoError(t, json.Unmarshal([]byte(data), &e))
		require.NoError(t, msg.Accumulate(e), "%s", out)
	}
	return msg
}
