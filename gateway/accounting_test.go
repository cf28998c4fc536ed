package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/gateway/vkey"
	"github.com/retryhost/retryhost/internal/testkit"
	"github.com/retryhost/retryhost/policy"
)

// prices are the priced rig's: primary and third OpenAI-like, backup
// Anthropic-like with a cache write price.
var testPrices = map[string]string{
	"primary": `{"input": 2, "output": 8, "cached_input": 0.5}`,
	"backup":  `{"input": 3, "output": 15, "cached_input": 0.3, "cache_write": 3.75}`,
}

// newPricedRig is newRigOf over a policy that prices primary and backup,
// with rules (defaultRules when empty).
func newPricedRig(t *testing.T, anthropic []string, rules string, opts ...Option) *rig {
	t.Helper()
	r := &rig{t: t, up: map[string]*upstream{}, logs: &testkit.LogBuffer{}}
	var models []string
	for _, n := range []string{"primary", "backup", "third"} {
		u := newUpstream(n)
		r.up[n] = u
		prov, base := "openai", u.url()
		if slices.Contains(anthropic, n) {
			prov, base = "anthropic", u.srv.URL
		}
		price := ""
		if p, ok := testPrices[n]; ok {
			price = `, "price": ` + p
		}
		models = append(models, fmt.Sprintf(`{"name": %q, "provider": %q, "model": "up-%s", "base_url": %q, "api_key_env": "UPSTREAM_KEY"%s}`, n, prov, n, base, price))
	}
	if rules == "" {
		rules = defaultRules
	}
	r.serve(fmt.Sprintf(`{"models": [%s], %s}`, strings.Join(models, ", "), rules), opts...)
	return r
}

// lockedBuffer is a request log sink a test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "each line is one JSON object: %s", sc.Text())
		out = append(out, m)
	}
	return out
}

// waitLines waits for the request log's n-th line: a stream's client has
// its [DONE] before the gateway has finished the request, and the metrics
// are counted before the line is written.
func (l *lockedBuffer) waitLines(t *testing.T, n int) []map[string]any {
	t.Helper()
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return bytes.Count(l.b.Bytes(), []byte("\n")) >= n
	}, 10*time.Second, time.Millisecond, "the request log's line %d", n)
	return l.lines(t)
}

func TestAccountingOfAFailOverThroughOpenAIClient(t *testing.T) {
	var sink lockedBuffer
	r := newPricedRig(t, nil, "", WithRequestLog(&sink))
	r.up["primary"].play(act{status: 503})
	r.up["backup"].play(act{chunks: []string{"ok"}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "ok", got.text)
	lines := sink.waitLines(t, 1)

	// The backup billed 11 input and 1 output tokens at 3 and 15 a million.
	cost := (11*3 + 1*15) / 1e6
	text := r.metricsText()
	for _, want := range []string{
		`retryhost_gateway_served_requests_total{model="backup",outcome="ok",route="primary"} 1`,
		`retryhost_gateway_served_attempts_total{model="backup",outcome="ok",route="primary"} 2`,
		`retryhost_gateway_served_failovers_total{model="backup",outcome="ok",route="primary"} 1`,
		`retryhost_gateway_tokens_total{model="backup",outcome="ok",route="primary",type="input"} 11`,
		`retryhost_gateway_tokens_total{model="backup",outcome="ok",route="primary",type="output"} 1`,
		fmt.Sprintf(`retryhost_gateway_cost_total{model="backup",outcome="ok",route="primary"} %v`, cost),
	} {
		require.Contains(t, text, want)
	}
	require.NotContains(t, text, `key="`, "no key label unless asked for")

	require.Len(t, lines, 1)
	l := lines[0]
	require.Equal(t, "primary", l["route"])
	require.Equal(t, "backup", l["model"])
	require.Equal(t, "ok", l["outcome"])
	require.EqualValues(t, 200, l["status"])
	require.EqualValues(t, 2, l["attempts"])
	require.EqualValues(t, 1, l["failovers"])
	require.EqualValues(t, 11, l["input_tokens"])
	require.EqualValues(t, 1, l["output_tokens"])
	require.InDelta(t, cost, l["cost"], 1e-12)
	require.Contains(t, l, "time_to_first_content_ms")
	trail := l["trail"].([]any)
	require.Len(t, trail, 2)
	first, second := trail[0].(map[string]any), trail[1].(map[string]any)
	require.Equal(t, "primary", first["model"])
	require.Equal(t, "error", first["outcome"])
	require.Equal(t, "overloaded", first["class"])
	require.EqualValues(t, 503, first["status"])
	require.EqualValues(t, 0, first["cost"])
	require.NotContains(t, first, "time_to_first_content_ms", "the failed attempt never committed")
	require.Equal(t, "backup", second["model"])
	require.Equal(t, "success", second["outcome"])
	require.Equal(t, true, second["failover"])
	require.Equal(t, "up-backup", second["response_model"])
	require.Contains(t, second, "time_to_first_content_ms")
	require.EqualValues(t, 11, second["input_tokens"])
	require.InDelta(t, cost, second["cost"], 1e-12)
	// No prompt or output text reaches the log.
	raw, _ := json.Marshal(l)
	require.NotContains(t, string(raw), "Capital of France")
	require.NotContains(t, string(raw), `"ok"}`)
	require.NotContains(t, string(raw), "sk-upstream")
}

func TestAccountingCountsCachedTokensThroughAnthropicClient(t *testing.T) {
	var sink lockedBuffer
	r := newPricedRig(t, []string{"backup"}, "", WithRequestLog(&sink), WithKeyLabel(10))
	r.up["backup"].play(act{chunks: []string{"Paris", "."}})
	m, err := r.anth.Messages.New(context.Background(), msgParams("backup"))
	require.NoError(t, err)
	require.Equal(t, "backup", string(m.Model))

	// The Anthropic upstream reports 25 uncached input tokens, 100 read
	// from its cache, 10 written to it, and one output token a chunk.
	cost := (25*3 + 100*0.3 + 10*3.75 + 2*15) / 1e6
	text := r.metricsText()
	for _, want := range []string{
		`retryhost_gateway_served_requests_total{key="anonymous",model="backup",outcome="ok",route="backup"} 1`,
		`retryhost_gateway_tokens_total{key="anonymous",model="backup",outcome="ok",route="backup",type="input"} 135`,
		`retryhost_gateway_tokens_total{key="anonymous",model="backup",outcome="ok",route="backup",type="cached_input"} 100`,
		`retryhost_gateway_tokens_total{key="anonymous",model="backup",outcome="ok",route="backup",type="cache_write"} 10`,
		`retryhost_gateway_tokens_total{key="anonymous",model="backup",outcome="ok",route="backup",type="output"} 2`,
	} {
		require.Contains(t, text, want)
	}
	require.Contains(t, text, `retryhost_gateway_cost_total{key="anonymous",model="backup",outcome="ok",route="backup"} `)
	l := sink.waitLines(t, 1)[0]
	require.Equal(t, "/v1/messages", l["path"])
	require.EqualValues(t, 100, l["cached_input_tokens"])
	require.EqualValues(t, 10, l["cache_write_tokens"])
	require.InDelta(t, cost, l["cost"], 1e-12)
}

func TestRequestLogOfARefusedRequestHasAnEmptyTrail(t *testing.T) {
	var sink lockedBuffer
	r := newPricedRig(t, nil, "", WithRequestLog(&sink))
	resp, _ := r.rawStream(`{"model":"nope","messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	l := sink.waitLines(t, 1)[0]
	require.Equal(t, "client_error", l["outcome"])
	require.Empty(t, l["trail"])
	require.Contains(t, r.metricsText(), `retryhost_gateway_served_requests_total{model="",outcome="client_error",route=""} 1`)
}

func TestFailedAttemptThatReportedTokensIsBilled(t *testing.T) {
	tr := &acctTrail{prices: map[string]policy.Price{"m": {Input: 1, Output: 2}}}
	m := keyedModel("m")
	tr.attemptStart(driver.AttemptEvent{Model: m, Number: 1})
	tr.attemptEnd(driver.AttemptEndEvent{Model: m, Number: 1, Outcome: driver.AttemptRejected,
		Usage: abi.Usage{InputTokens: 1000, OutputTokens: 500}})
	tr.attemptStart(driver.AttemptEvent{Model: m, Number: 2})
	tr.attemptEnd(driver.AttemptEndEvent{Model: m, Number: 2, Outcome: driver.AttemptFailed, Class: abi.ClassServer})
	s := tr.sum()
	require.EqualValues(t, 1000, s.usage.InputTokens)
	require.InDelta(t, (1000*1+500*2)/1e6, s.cost, 1e-12)
}

func TestKeyLabelsAreCappedWithAnOverflowBucket(t *testing.T) {
	k := &keyLabels{max: 2}
	require.Equal(t, "anonymous", k.label(""))
	require.Equal(t, "team-a", k.label("team-a"))
	require.Equal(t, "team-b", k.label("team-b"))
	require.Equal(t, "_other", k.label("team-c"))
	require.Equal(t, "team-a", k.label("team-a"), "a key seen before the cap keeps its label")
	require.Error(t, WithKeyLabel(0)(&config{}))
	require.Error(t, WithKeyLabel(maxKeyLabels+1)(&config{}))
}

type keyedModel string

func (k keyedModel) Key() string { return string(k) }
func (k keyedModel) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	return nil, nil
}
func (k keyedModel) Stream(context.Context, *driver.Request) (driver.Stream, error) { return nil, nil }

func TestRequestLogCountsPluginCallsByOperation(t *testing.T) {
	var sink lockedBuffer
	r := newRig(t, defaultRules+`, "transforms": [{"plugin": {"builtin": "refusal", "fail": "open"}}]`, WithRequestLog(&sink))
	r.up["primary"].play(act{chunks: []string{"Paris", " is", " the capital."}})
	require.NoError(t, r.stream("primary").err)
	l := sink.waitLines(t, 1)[0]
	plugins, ok := l["plugins"].([]any)
	require.True(t, ok, "the line lists the plugin calls: %v", l)
	ops := map[string]float64{}
	for _, p := range plugins {
		p := p.(map[string]any)
		require.Contains(t, p["plugin"], "refusal")
		require.EqualValues(t, 0, p["failures"])
		ops[p["op"].(string)] = p["calls"].(float64)
	}
	require.EqualValues(t, 1, ops["open"], "one transform stream for the one attempt: %v", ops)
	require.Greater(t, ops["part"], float64(1), "one entry for all of its parts: %v", ops)
}

func TestAccountingCountsAContinuation(t *testing.T) {
	var sink lockedBuffer
	r := newPricedRig(t, nil, continueRules, WithRequestLog(&sink))
	r.up["primary"].play(act{preamble: true, chunks: []string{"The capital ", "of Fra"}, cut: true})
	r.up["backup"].play(act{preamble: true, chunks: []string{"of France", " is Paris."}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "The capital of France is Paris.", got.text)

	l := sink.waitLines(t, 1)[0]
	require.EqualValues(t, 1, l["continuations"], "%v", l)
	trail := l["trail"].([]any)
	require.Len(t, trail, 2)
	require.Equal(t, true, trail[1].(map[string]any)["continuation"])
	require.Contains(t, trail[0].(map[string]any), "time_to_first_content_ms", "the cut attempt committed")
	require.Regexp(t, `retryhost_gateway_served_continuations_total\{model="[a-z]+",outcome="ok",route="primary"\} 1`, r.metricsText())
}

func TestAccountingFilesRequestsUnderTheirVirtualKey(t *testing.T) {
	var ks []*vkey.Key
	for _, id := range []string{"team-a", "team-b", "team-c"} {
		ks = append(ks, &vkey.Key{ID: id, Hash: vkey.Hash("secret-" + id)})
	}
	set, err := (&vkey.File{Keys: ks}).Set()
	require.NoError(t, err)
	var sink lockedBuffer
	r := newPricedRig(t, nil, "", WithKeySet(set), WithKeyLabel(2), WithRequestLog(&sink))
	for _, id := range []string{"team-a", "team-b", "team-c", "team-a"} {
		r.up["primary"].play(act{chunks: []string{"ok"}})
		c := r.newClient("secret-" + id)
		_, err := c.Chat.Completions.New(context.Background(), params("primary"))
		require.NoError(t, err)
	}
	req, _ := http.NewRequest(http.MethodGet, r.srv.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer secret-team-a")
	resp, err := r.hc.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	text := string(body)
	require.Contains(t, text, `retryhost_gateway_served_requests_total{key="team-a",model="primary",outcome="ok",route="primary"} 2`)
	require.Contains(t, text, `retryhost_gateway_served_requests_total{key="team-b",model="primary",outcome="ok",route="primary"} 1`)
	require.Contains(t, text, `retryhost_gateway_served_requests_total{key="_other",model="primary",outcome="ok",route="primary"} 1`, "past the cap of 2")
	require.Contains(t, text, `retryhost_gateway_cost_total{key="team-a",model="primary",outcome="ok",route="primary"} `)
	lines := sink.lines(t)
	require.Len(t, lines, 4)
	require.Equal(t, "team-c", lines[2]["key"], "the log names every key, capped or not")
	require.NotContains(t, sink.b.String(), "secret-", "never the key itself")
}
