package openai

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

// chunkSeeds are chunk data the lean decoder takes and ones it must hand
// to the SDK (wrong types, escaped keys, an error member, deep nesting).
var chunkSeeds = []string{
	`{"id":"c1","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi \"there\"\n\u00e9\ud83d\ude00","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":"}},{"index":1,"function":{"arguments":"1}"}}]},"finish_reason":"tool_calls"}]}`,
	`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":2,"cache_write_tokens":1},"completion_tokens_details":{"reasoning_tokens":3}}}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":"think \u00e9","reasoning":"other"}},{"index":1,"delta":{"content":"second choice"}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":null,"reasoning":"r"}}],"usage":{}}`,
	`{"choices":[{"index":0,"delta":{"content":5}}]}`,
	`{"choices":[{"index":"0","delta":{"content":"x"}}]}`,
	`{"created":1.5,"choices":[]}`,
	`{"c\u0068oices":[{"index":0,"delta":{"content":"escaped key"}}]}`,
	`{"error":{"message":"overloaded","type":"server_error"}}`,
	`{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}],"choices":[{"index":0,"delta":{"content":"c"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"lone \ud800 surrogate \ud800\u0041 pair"}}]}`,
	"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"bad utf8 \xff\xfe\",\"reasoning_content\":\"\xc3\"}}]}",
	`{"usage":"x","choices":null}`,
	`{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"choices":[{"index":0,"delta":null,"finish_reason":"stop"}]} `,
	`{"choices":[{"index":-0,"delta":{"content":"neg zero"}}],"created":-12}`,
	`{"choices":[{"index":0,"delta":{"content":"x"}}],"created":12345678901234567890}`,
	`[1,2]`,
	`{"id":"c","system_fingerprint":"fp_1","service_tier":"default","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-0.1,"bytes":[72,105],"top_logprobs":[]}],"refusal":null},"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{"refusal":"no"},"logprobs":{"content":null,"refusal":[ {"token":"no","logprob":-1e-3} ]}}]}`,
	`{"choices":[{"index":0,"delta":{},"logprobs":{}}],"service_tier":null,"system_fingerprint":null}`,
	`{"choices":[{"index":0,"logprobs":5}]}`,
	`{"choices":[{"index":0,"logprobs":{"content":{"a":1}}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"trailing"}}]} x`,
}

// FuzzChunkDecoders is the differential check of the lean decoder: for
// any data it accepts, the SDK decodes the same chunk (and does not see
// an error member); data the SDK rejects the lean decoder rejects too.
func FuzzChunkDecoders(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var lean chunk
		ok := decodeChunk(data, &lean)
		var sc oai.ChatCompletionChunk
		err := json.Unmarshal(data, &sc)
		if !ok {
			return // the SDK decodes it
		}
		require.NoError(t, err, "the lean decoder took what the SDK rejects: %q", data)
		require.False(t, sc.JSON.ExtraFields["error"].Valid() || sc.JSON.ExtraFields["error"].Raw() != "", "an error member was taken: %q", data)
		var slow chunk
		slow.fromSDK(&sc)
		require.Equal(t, norm(slow), norm(lean), "data %q", data)
	})
}

// norm makes nil and empty slices compare equal.
func norm(c chunk) chunk {
	c.lastID, c.lastModel = "", ""
	if len(c.choices) == 0 {
		c.choices = nil
	}
	for i := range c.choices {
		if len(c.choices[i].tools) == 0 {
			c.choices[i].tools = nil
		}
	}
	return c
}

func TestChunkDecodersAgreeOnSeeds(t *testing.T) {
	accepted := 0
	for _, s := range chunkSeeds {
		var lean chunk
		if !decodeChunk([]byte(s), &lean) {
			continue
		}
		accepted++
		var sc oai.ChatCompletionChunk
		require.NoError(t, json.Unmarshal([]byte(s), &sc), s)
		var slow chunk
		slow.fromSDK(&sc)
		require.Equal(t, norm(slow), norm(lean), s)
	}
	require.GreaterOrEqual(t, accepted, 9, "the common chunks take the lean path")
	for _, s := range []string{`{"error":{"message":"x"}}`, `{"choices":[{"index":0,"delta":{"content":5}}]}`, `{"c\u0068oices":[]}`, `[1]`, `{"id":"x"} x`} {
		require.False(t, decodeChunk([]byte(s), &chunk{}), "handed to the SDK: %s", s)
	}
}

// FuzzStreamDecoders feeds an SSE body to two models, one decoding every
// chunk with the SDK and one with the lean decoder (and the SDK for what
// it declines), and requires the same parts (ChunkFields included) and
// the same error.
func FuzzStreamDecoders(f *testing.F) {
	wiretest.SeedSSE(f, filepath.Join("..", "..", "testdata", "wire", "openai"))
	for _, s := range chunkSeeds {
		f.Add([]byte("data: " + s + "\n\ndata: [DONE]\n\n"))
	}
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("long ", 2000) + "\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("event: thread.x\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t\"},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\ndata: {\"x\":1}\n\n: comment\n\ndata:[DONE]\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		slow, slowErr := streamParts(t, body, true)
		lean, leanErr := streamParts(t, body, false)
		require.Equal(t, fmt.Sprint(slowErr), fmt.Sprint(leanErr), "body %q", body)
		require.Equal(t, slow, lean, "body %q", body)
	})
}

func streamParts(t *testing.T, body []byte, sdk bool) ([]string, error) {
	hc := &http.Client{Transport: wiretest.MemTransport{Body: body}}
	m, err := New("m", WithBaseURL("http://mem/v1"), WithAPIKey("k"), WithHTTPClient(hc), WithChunkFields())
	require.NoError(t, err)
	m.sdkChunks = sdk
	st, err := m.Stream(context.Background(), &driver.Request{})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var out []string
	for len(out) < 1<<14 {
		p, err := st.Recv()
		if err != nil {
			if err.Error() == "EOF" {
				return out, nil
			}
			return out, err
		}
		out = append(out, describe(&p))
	}
	return out, nil
}

func describe(p *abi.Part) string {
	s := fmt.Sprintf("%v id=%q delta=%q", p.Kind, p.ID, p.Delta)
	if p.Tool != nil {
		s += fmt.Sprintf(" tool=%+v", *p.Tool)
	}
	if p.Meta != nil {
		s += fmt.Sprintf(" meta=%+v", *p.Meta)
	}
	if p.Finish != nil {
		s += fmt.Sprintf(" finish=%+v", *p.Finish)
	}
	if f, ok := p.Raw.(ChunkFields); ok {
		s += fmt.Sprintf(" fields=%+v", f)
	}
	return s
}

// WithChunkFields hands the fields the adapter does not map, as they came,
// before the parts of their chunk.
func TestChunkFields(t *testing.T) {
	body := "data: {\"id\":\"c\",\"model\":\"m\",\"system_fingerprint\":\"fp_1\",\"service_tier\":\"default\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"logprobs\":{\"content\":[{\"token\":\"Hi\",\"logprob\":-0.5}],\"refusal\":null},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
	parts, err := streamParts(t, []byte(body), false)
	require.NoError(t, err)
	require.Contains(t, parts[1], `fields={SystemFingerprint:fp_1 ServiceTier:default Content:Hi Refusal: Logprobs:{"content":[{"token":"Hi","logprob":-0.5}],"refusal":null} LogprobsContent:[{"token":"Hi","logprob":-0.5}] LogprobsRefusal:}`)
	n := 0
	for _, p := range parts {
		if strings.Contains(p, "fields=") {
			n++
		}
	}
	require.Equal(t, 2, n, "one per chunk: %q", parts)
}

// WithChunkFields leaves out the fields of a chunk that would repeat the
// last ones sent (a server's fingerprint on every chunk), and sends every
// chunk's once one had logprobs, so that each delta has its chunk's text
// beside it.
func TestChunkFieldsOnlyWhenTheyAreNew(t *testing.T) {
	ev := func(fp, content, lp string) string {
		return `data: {"id":"c","model":"m","system_fingerprint":"` + fp + `","choices":[{"index":0,"delta":{"content":"` + content + `"},"logprobs":` + lp + `,"finish_reason":null}]}` + "\n\n"
	}
	body := ev("fp_1", "a", "null") + ev("fp_1", "b", "null") + ev("fp_1", "c", "null") +
		ev("fp_2", "d", "null") + ev("fp_2", "e", "null") +
		ev("fp_2", "f", `{"content":[{"token":"f"}]}`) + ev("fp_2", "g", "null") +
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
	parts, err := streamParts(t, []byte(body), false)
	require.NoError(t, err)
	var sent []string
	for _, p := range parts {
		if _, f, ok := strings.Cut(p, "fields="); ok {
			sent = append(sent, f)
		}
	}
	require.Equal(t, []string{
		"{SystemFingerprint:fp_1 ServiceTier: Content:a Refusal: Logprobs: LogprobsContent: LogprobsRefusal:}",
		"{SystemFingerprint:fp_2 ServiceTier: Content:d Refusal: Logprobs: LogprobsContent: LogprobsRefusal:}",
		`{SystemFingerprint:fp_2 ServiceTier: Content:f Refusal: Logprobs:{"content":[{"token":"f"}]} LogprobsContent:[{"token":"f"}] LogprobsRefusal:}`,
		"{SystemFingerprint:fp_2 ServiceTier: Content:g Refusal: Logprobs: LogprobsContent: LogprobsRefusal:}",
		"{SystemFingerprint: ServiceTier: Content: Refusal: Logprobs: LogprobsContent: LogprobsRefusal:}",
	}, sent)
}

// skipBody is an event body that, like the gateway's upstream bodies,
// has the decoder skip the events it cannot decode unless they are JSON
// objects or [DONE], and counts them.
type skipBody struct {
	adapter.EventBody
	skipped []string
}

func (b *skipBody) SkipMalformed(data []byte) bool {
	if d := bytes.TrimSpace(data); string(d) == "[DONE]" || len(d) > 0 && d[0] == '{' && json.Valid(d) {
		return false
	}
	b.skipped = append(b.skipped, string(data))
	return true
}

type skipTransport struct{ body *skipBody }

func (s skipTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: s.body, Request: r}, nil
}

// A body that skips malformed events gets asked about exactly the events
// the lean decoder declines, and only those it skips are gone: the JSON of
// an event is checked once. Without it, the first malformed event ends the
// stream, as in the SDK.
func TestEventsSkipMalformed(t *testing.T) {
	body := "data: {oops\n\n" +
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n" +
		"data: [DONE]x\n\n" +
		"data: {\"choices\":[{\"index\":\"0\",\"delta\":{\"content\":\"lenient\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: [DONE] \n\n" +
		"data: {\"never\":1}\n\n"
	sb := &skipBody{EventBody: adapter.SSEBody(io.NopCloser(strings.NewReader(body)))}
	m, err := New("m", WithBaseURL("http://mem/v1"), WithAPIKey("k"), WithHTTPClient(&http.Client{Transport: skipTransport{sb}}))
	require.NoError(t, err)
	st, err := m.Stream(context.Background(), &driver.Request{})
	require.NoError(t, err)
	defer st.Close()
	var text strings.Builder
	var finish *abi.Finish
	for {
		p, err := st.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		text.WriteString(p.Delta)
		if p.Finish != nil {
			finish = p.Finish
		}
	}
	require.Equal(t, "Hilenient", text.String(), "the SDK decodes what the lean decoder declines, when well formed")
	require.NotNil(t, finish)
	require.Equal(t, []string{"{oops\n", "[DONE]x\n"}, sb.skipped)

	_, err = streamParts(t, []byte(body), false)
	require.Error(t, err, "no skipping without SkipMalformed")
}

// special8's lowest mark is the first quote, backslash or control
// character in the word, wherever it sits and whatever follows it; a word
// of common text has none.
func TestSpecial8(t *testing.T) {
	first := func(w []byte) int {
		m := special8(binary.LittleEndian.Uint64(w))
		if m == 0 {
			return -1
		}
		return bits.TrailingZeros64(m) >> 3
	}
	for pos := range 8 {
		for c := range 256 {
			w := []byte("aaaaaaaa")
			w[pos] = byte(c)
			want := -1
			if c == '"' || c == '\\' || c < 0x20 {
				want = pos
			}
			require.Equal(t, want, first(w), "byte %#x at %d", c, pos)
			for _, after := range []byte{0, '"', '\\', 0x1f, 0x20, 0x80, 0xff} {
				for q := pos + 1; q < 8; q++ {
					w2 := bytes.Clone(w)
					w2[q] = after
					if want >= 0 {
						require.Equal(t, want, first(w2), "byte %#x at %d, %#x at %d", c, pos, after, q)
					}
				}
			}
		}
	}
	for _, w := range []string{"h\xc3\xa9llo wo", "\xf0\x9f\x98\x80\xf0\x9f\x98\x80", "chatcmpl", "{}[]:,/ ", "\x7f\x80\xff~!#$%"} {
		require.Equal(t, -1, first([]byte(w)), "%q", w)
	}
}

// A chat stream's state is one allocation until its first tool call: the
// tool-call map is made then (most streams have none, and a held stream
// would keep an empty one).
func TestNewSourceAllocs(t *testing.T) {
	m, err := New("m", WithAPIKey("k"))
	require.NoError(t, err)
	var s *source
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() { s = m.newSource() }))
	require.Nil(t, s.tools)
}
