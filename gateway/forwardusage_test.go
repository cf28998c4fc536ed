package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/gateway/vkey"
)

// TestUsageTapReadsTheReportedUsage: the usage of an answer, however its
// bytes are split, and only the one the answer's shape puts it in.
func TestUsageTapReadsTheReportedUsage(t *testing.T) {
	longB64 := strings.Repeat(`AAAA\"`, 2000)
	tests := []struct {
		name   string
		sse    bool
		answer string
		want   abi.Usage
		found  bool
	}{
		{name: "embeddings", answer: `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,-1e-3,[2]]}],"model":"m","usage":{"prompt_tokens":8,"total_tokens":8}}`,
			want: abi.Usage{InputTokens: 8}, found: true},
		{name: "embeddings in base64, usage first", answer: `{"usage": {"prompt_tokens": 5, "total_tokens": 5}, "data":[{"embedding":"` + longB64 + `"}]}`,
			want: abi.Usage{InputTokens: 5}, found: true},
		{name: "responses", answer: `{"id":"resp_1","object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"usage: {\"input_tokens\":999}"}]}],"metadata":{"usage":{"input_tokens":7}},"usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":10},"output_tokens":12,"output_tokens_details":{"reasoning_tokens":4},"total_tokens":42}}`,
			want: abi.Usage{InputTokens: 30, OutputTokens: 12, CacheReadTokens: 10, ReasoningTokens: 4}, found: true},
		{name: "a background response reports none yet", answer: `{"id":"resp_2","status":"queued","usage":null}`},
		{name: "a nested usage is not the answer's", answer: `{"data":[{"usage":{"prompt_tokens":3}}],"x":{"usage":{"prompt_tokens":4}}}`},
		{name: "a usage too large is not read", answer: `{"usage":{"prompt_tokens":1,"pad":"` + strings.Repeat("x", maxUsageBytes) + `"}}`},
		{name: "negative counts are not read", answer: `{"usage":{"input_tokens":-5}}`},
		{name: "event stream", sse: true, answer: "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"usage\":null}}\n\n" +
			"event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"{\\\"usage\\\":{\"}\r\n\r\n" +
			": a comment {\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\n" +
			"data: \"response\":{\"id\":\"r\",\"output\":[{\"usage\":{\"input_tokens\":1}}],\"usage\":{\"input_tokens\":21,\"output_tokens\":6,\"input_tokens_details\":{\"cached_tokens\":3}}}}\n\n",
			want: abi.Usage{InputTokens: 21, OutputTokens: 6, CacheReadTokens: 3}, found: true},
		{name: "an event stream's top-level usage is not a response's", sse: true, answer: "data: {\"usage\":{\"input_tokens\":9}}\n\n"},
		{name: "an event stream cut before its usage", sse: true, answer: "data: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":9"},
	}
	for _, tc := range tests {
		for _, size := range []int{1, 3, 64, len(tc.answer)} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, size), func(t *testing.T) {
				tap := newUsageTap(tc.sse)
				for b := []byte(tc.answer); len(b) > 0; {
					n := min(size, len(b))
					k, err := tap.Write(b[:n])
					require.NoError(t, err)
					require.Equal(t, n, k)
					b = b[n:]
				}
				got, found := tap.usage()
				require.Equal(t, tc.found, found)
				require.Equal(t, tc.want, got)
			})
		}
	}
}

func TestEmbeddingTokensEstimatesEachInputForm(t *testing.T) {
	tests := []struct {
		input string
		want  int64
	}{
		{`"Paris is the capital"`, 5},
		{`"a"`, 1},
		{`["Paris is the capital", "a"]`, 6},
		{`[1, 2, 3]`, 3},
		{`[[1, 2, 3], [4]]`, 4},
		{`{"not": "an input"}`, 4},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, embeddingTokens([]byte(tc.input)), tc.input)
	}
}

// settleLog is a Limiter that records the settlements of a Local.
type settleLog struct {
	vkey.Limiter
	mu  sync.Mutex
	got []settled
}

type settled struct {
	key   string
	delta int64
	cost  float64
}

func (s *settleLog) Settle(ctx context.Context, k *vkey.Key, delta int64, cost float64, now time.Time) {
	s.Limiter.Settle(ctx, k, delta, cost, now)
	s.mu.Lock()
	s.got = append(s.got, settled{k.ID, delta, cost})
	s.mu.Unlock()
}

func (s *settleLog) all() []settled {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]settled(nil), s.got...)
}

// keySet is the set of ks, each key's secret "secret-" and its id.
func keySet(t *testing.T, ks ...*vkey.Key) *vkey.Set {
	t.Helper()
	for _, k := range ks {
		k.Hash = vkey.Hash("secret-" + k.ID)
	}
	set, err := (&vkey.File{Keys: ks}).Set()
	require.NoError(t, err)
	return set
}

// waitLines waits for the request log's n lines (written after the
// request's key is settled) and returns them.
func waitLines(t *testing.T, sink *lockedBuffer, n int) []map[string]any {
	t.Helper()
	var lines []map[string]any
	require.Eventually(t, func() bool { lines = sink.lines(t); return len(lines) >= n }, 5*time.Second, time.Millisecond)
	require.Len(t, lines, n)
	return lines
}

// keyedMetrics is the gateway's /metrics page, asked for with key.
func keyedMetrics(t *testing.T, r *rig, key string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, r.srv.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := r.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return string(b)
}

const embeddingPrice = `, "price": {"input": 100, "output": 0}`

// An embeddings request's key is charged the tokens its upstream
// reported, at the model's input price: its estimate settled, its cost
// counted by key in the metrics and on its request log line, with the
// attempt that failed over in its trail.
func TestEmbeddings_UsageChargedToTheKey(t *testing.T) {
	e1 := newWireUp(t, oaiRateLimited)
	e2 := newWireUp(t, embeddingAnswer("float", []float32{1, 0}, []float32{0, 1}))
	space := `, "embedding": {"dimensions": 2, "family": "f"}`
	pol := `{"models": [` + oaiModel("e1", "emb-a", e1, space+embeddingPrice) + `, ` + oaiModel("e2", "emb-b", e2, space+embeddingPrice) + `],
		"groups": [{"name": "emb", "models": ["e1", "e2"]}], "rules": []}`
	lim := &settleLog{Limiter: vkey.NewLocal()}
	var sink lockedBuffer
	rec := tracetest.NewSpanRecorder()
	r := doorRig(t, pol, WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))), WithKeySet(keySet(t, &vkey.Key{ID: "team", TPM: 100000, Budget: vkey.Budget{CostPerDay: 1}})), WithLimiter(lim),
		WithRequestLog(&sink), WithKeyLabel(10))
	input := []string{"Paris is the capital", "of France"} // estimated 5 + 2
	got, err := r.oc("secret-team").Embeddings.New(context.Background(), oai.EmbeddingNewParams{Model: "emb",
		Input: oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: input}})
	require.NoError(t, err)
	require.EqualValues(t, 8, got.Usage.PromptTokens, "the answer goes through as it came")

	l := waitLines(t, &sink, 1)[0]
	cost := 8 * 100 / 1e6
	require.Equal(t, []settled{{"team", 8 - 7, cost}}, lim.all())
	require.Equal(t, "/v1/embeddings", l["path"])
	require.Equal(t, "team", l["key"])
	require.Equal(t, "e2", l["model"])
	require.EqualValues(t, 8, l["input_tokens"])
	require.EqualValues(t, 0, l["output_tokens"])
	require.InDelta(t, cost, l["cost"], 1e-12)
	require.EqualValues(t, 1, l["failovers"])
	trail := l["trail"].([]any)
	require.Len(t, trail, 2)
	first, second := trail[0].(map[string]any), trail[1].(map[string]any)
	require.Equal(t, "e1", first["model"])
	require.Equal(t, "error", first["outcome"])
	require.Equal(t, "rate-limit", first["class"])
	require.EqualValues(t, 429, first["status"])
	require.EqualValues(t, 0, first["input_tokens"])
	require.Equal(t, "e2", second["model"])
	require.Equal(t, "success", second["outcome"])
	require.Equal(t, true, second["failover"])
	require.EqualValues(t, 8, second["input_tokens"])
	require.InDelta(t, cost, second["cost"], 1e-12)

	require.Eventually(t, func() bool { return len(rec.Ended()) > 0 }, 5*time.Second, time.Millisecond)
	span := spanAttrs(rec.Ended()[0])
	require.Equal(t, "embeddings", span["gen_ai.operation.name"].AsString())
	require.EqualValues(t, 8, span["gen_ai.usage.input_tokens"].AsInt64())
	require.Equal(t, "team", span["retryhost.key.id"].AsString())

	text := keyedMetrics(t, r, "secret-team")
	for _, want := range []string{
		`retryhost_gateway_tokens_total{key="team",model="e2",outcome="ok",route="emb",type="input"} 8`,
		fmt.Sprintf(`retryhost_gateway_cost_total{key="team",model="e2",outcome="ok",route="emb"} %v`, cost),
		`retryhost_gateway_served_attempts_total{key="team",model="e2",outcome="ok",route="emb"} 2`,
		`retryhost_gateway_served_failovers_total{key="team",model="e2",outcome="ok",route="emb"} 1`,
	} {
		require.Contains(t, text, want)
	}
}

// A key's token budget is spent by the tokens its embeddings requests'
// upstreams reported; once spent, the next request is refused as OpenAI
// refuses an exhausted quota, before any upstream call.
func TestEmbeddings_TokenBudgetExhausted(t *testing.T) {
	e1 := newWireUp(t, wireAnswer{status: 200, body: `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[1]}],"model":"m","usage":{"prompt_tokens":12,"total_tokens":12}}`})
	lim := &settleLog{Limiter: vkey.NewLocal()}
	var sink lockedBuffer
	r := doorRig(t, `{"models": [`+oaiModel("e1", "emb-a", e1, "")+`], "rules": []}`,
		WithKeySet(keySet(t, &vkey.Key{ID: "poor", Budget: vkey.Budget{TokensPerDay: 20}})), WithLimiter(lim), WithRequestLog(&sink))
	c := r.oc("secret-poor")
	p := oai.EmbeddingNewParams{Model: "e1", Input: oai.EmbeddingNewParamsInputUnion{OfString: oai.String("hi")}}
	for i := range 2 { // 0, then 12 of 20 used: admitted; 24 used after
		_, err := c.Embeddings.New(context.Background(), p)
		require.NoError(t, err)
		waitLines(t, &sink, i+1)
	}
	_, err := c.Embeddings.New(context.Background(), p)
	e := oaiErr(t, err)
	require.Equal(t, http.StatusTooManyRequests, e.StatusCode)
	require.Equal(t, "insufficient_quota", e.Type)
	require.Equal(t, "insufficient_quota", e.Code)
	require.Contains(t, e.Message, "token budget")
	require.Equal(t, "false", e.Response.Header.Get("X-Should-Retry"))
	require.Len(t, e1.requests(), 2, "the refused request reached no upstream")
	require.Equal(t, []settled{{"poor", 12 - 1, 0}, {"poor", 12 - 1, 0}}, lim.all())
}

// A stateful Responses request's usage, from its JSON answer or its
// stream's response.completed event, is charged to its key and counted
// with its cached tokens; a background request, whose usage comes only
// later, keeps the estimate it was charged and costs nothing here.
func TestResponses_StatefulUsageCharged(t *testing.T) {
	const usage = `{"input_tokens":30,"input_tokens_details":{"cached_tokens":10},"output_tokens":12,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":42}`
	answered := wireAnswer{status: 200, body: `{"id":"resp_2","object":"response","created_at":1,"status":"completed","model":"gpt-4.1","output":[],"previous_response_id":"resp_1","store":true,"usage":` + usage + `}`}
	streamed := wireAnswer{status: 200, header: map[string]string{"Content-Type": "text/event-stream"},
		body: "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_3\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n" +
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Lyon.\"}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_3\",\"object\":\"response\",\"status\":\"completed\",\"output\":[],\"usage\":" + usage + "}}\n\n"}
	acct := newWireUp(t, answered, streamed, oaiStored)
	lim := &settleLog{Limiter: vkey.NewLocal()}
	var sink lockedBuffer
	r := doorRig(t, `{"models": [`+oaiModel("up", "gpt-4.1", acct, `, "price": {"input": 2, "output": 8, "cached_input": 0.5}`)+`], "rules": []}`,
		WithKeySet(keySet(t, &vkey.Key{ID: "team", TPM: 100000, Budget: vkey.Budget{CostPerDay: 1}})), WithLimiter(lim), WithRequestLog(&sink), WithKeyLabel(10))
	c := r.oc("secret-team")
	p := statefulParams("up")
	p.Background = oai.Bool(false)
	got, err := c.Responses.New(context.Background(), p)
	require.NoError(t, err)
	require.EqualValues(t, 42, got.Usage.TotalTokens)
	s := c.Responses.NewStreaming(context.Background(), p)
	var types []string
	for s.Next() {
		types = append(types, s.Current().Type)
	}
	require.NoError(t, s.Err())
	require.NoError(t, s.Close())
	require.Equal(t, []string{"response.created", "response.output_text.delta", "response.completed"}, types)
	lines := waitLines(t, &sink, 2)

	cost := (20*2 + 10*0.5 + 12*8) / 1e6
	for i, l := range lines {
		require.Equal(t, []bool{false, true}[i], l["stream"])
		require.EqualValues(t, 30, l["input_tokens"], "line %d", i)
		require.EqualValues(t, 12, l["output_tokens"])
		require.EqualValues(t, 10, l["cached_input_tokens"])
		require.InDelta(t, cost, l["cost"], 1e-12)
	}
	settles := lim.all()
	require.Len(t, settles, 2)
	for _, st := range settles {
		require.Equal(t, "team", st.key)
		require.InDelta(t, cost, st.cost, 1e-12, "the spend the key's budget is charged")
	}
	text := keyedMetrics(t, r, "secret-team")
	for _, want := range []string{
		`retryhost_gateway_tokens_total{key="team",model="up",outcome="ok",route="up",type="input"} 60`,
		`retryhost_gateway_tokens_total{key="team",model="up",outcome="ok",route="up",type="output"} 24`,
		`retryhost_gateway_tokens_total{key="team",model="up",outcome="ok",route="up",type="cached_input"} 20`,
	} {
		require.Contains(t, text, want)
	}

	// In the background: answered queued, with no usage yet.
	got, err = c.Responses.New(context.Background(), statefulParams("up"))
	require.NoError(t, err)
	require.Equal(t, "queued", string(got.Status))
	l := waitLines(t, &sink, 3)[2]
	require.EqualValues(t, 0, l["input_tokens"])
	require.EqualValues(t, 0, l["cost"])
	require.Len(t, lim.all(), 2, "the estimate stands: nothing settled")
}

// count_tokens bills no tokens but is a request of its key: refused like
// every door's (401, 403, 429 over the key's RPM, in Anthropic's shape),
// and settling nothing when it is answered.
func TestCountTokens_HeldToItsKey(t *testing.T) {
	a := newWireUp(t, antCount(14))
	lim := &settleLog{Limiter: vkey.NewLocal()}
	var sink lockedBuffer
	r := doorRig(t, `{"models": [`+antModel("claude", "claude-x", a)+`, `+antModel("other", "claude-y", a)+`], "rules": []}`,
		WithKeySet(keySet(t, &vkey.Key{ID: "counter", RPM: 1, Routes: []string{"claude"}})), WithLimiter(lim), WithRequestLog(&sink))
	c := r.ac("secret-counter")
	n, err := c.Messages.CountTokens(context.Background(), countParams("claude"))
	require.NoError(t, err)
	require.EqualValues(t, 14, n.InputTokens)

	_, err = c.Messages.CountTokens(context.Background(), countParams("claude"))
	e := anthErr(t, err)
	require.Equal(t, http.StatusTooManyRequests, e.StatusCode)
	require.Contains(t, e.RawJSON(), `"type":"rate_limit_error"`)
	require.Contains(t, e.RawJSON(), "requests per minute")
	require.Equal(t, "1", e.Response.Header.Get("X-Ratelimit-Limit-Requests"))
	require.NotEmpty(t, e.Response.Header.Get("Retry-After"))

	_, err = c.Messages.CountTokens(context.Background(), countParams("other"))
	e = anthErr(t, err)
	require.Equal(t, http.StatusForbidden, e.StatusCode)
	require.Contains(t, e.RawJSON(), `"type":"permission_error"`)

	_, err = r.ac("secret-nobody").Messages.CountTokens(context.Background(), countParams("claude"))
	e = anthErr(t, err)
	require.Equal(t, http.StatusUnauthorized, e.StatusCode)
	require.Contains(t, e.RawJSON(), `"type":"authentication_error"`)

	require.Len(t, a.requests(), 1, "only the admitted count reached the upstream")
	l := waitLines(t, &sink, 4)[0]
	require.Equal(t, "/v1/messages/count_tokens", l["path"])
	require.EqualValues(t, 0, l["input_tokens"], "a count is not billed")
	require.Empty(t, lim.all())
}

// BenchmarkUsageTap reads an embeddings answer of 256 vectors of 1,536
// floats, or of base64, as the forwarded door passes it on, beside the
// copy alone.
func BenchmarkUsageTap(b *testing.B) {
	for _, format := range []string{"float", "base64"} {
		vecs := make([][]float32, 256)
		for i := range vecs {
			vecs[i] = make([]float32, 1536)
			for j := range vecs[i] {
				vecs[i][j] = -0.0123456789 * float32(j%7)
			}
		}
		ans := []byte(embeddingAnswer(format, vecs...).body)
		buf := make([]byte, 32<<10)
		for _, tapped := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/tap=%v", format, tapped), func(b *testing.B) {
				b.SetBytes(int64(len(ans)))
				for b.Loop() {
					var r io.Reader = bytes.NewReader(ans)
					tap := newUsageTap(false)
					if tapped {
						r = io.TeeReader(r, tap)
					}
					_, _ = io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, buf)
					if _, ok := tap.usage(); ok != tapped {
						b.Fatal("usage read:", ok)
					}
				}
			})
		}
	}
}

// A stateful stream cut before its response.completed event reported no
// usage: its key keeps the estimate it was charged, and its trail says
// the attempt was cut.
func TestResponses_StatefulStreamCutKeepsTheEstimate(t *testing.T) {
	cut := wireAnswer{status: 200, header: map[string]string{"Content-Type": "text/event-stream", "Content-Length": "100000"},
		body: "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_3\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n"}
	acct := newWireUp(t, cut)
	lim := &settleLog{Limiter: vkey.NewLocal()}
	var sink lockedBuffer
	r := doorRig(t, `{"models": [`+oaiModel("up", "gpt-4.1", acct, `, "price": {"input": 2, "output": 8}`)+`], "rules": []}`,
		WithKeySet(keySet(t, &vkey.Key{ID: "team", TPM: 100000, Budget: vkey.Budget{CostPerDay: 1}})), WithLimiter(lim), WithRequestLog(&sink))
	p := statefulParams("up")
	p.Background = oai.Bool(false)
	s := r.oc("secret-team").Responses.NewStreaming(context.Background(), p)
	for s.Next() {
	}
	require.Error(t, s.Err(), "a cut stream is an error to the client")
	require.NoError(t, s.Close())
	l := waitLines(t, &sink, 1)[0]
	require.Equal(t, "truncated", l["outcome"])
	require.EqualValues(t, 0, l["input_tokens"])
	trail := l["trail"].([]any)
	require.Len(t, trail, 1)
	require.Equal(t, "truncated", trail[0].(map[string]any)["outcome"])
	require.Empty(t, lim.all(), "the estimate stands: nothing settled")
}
