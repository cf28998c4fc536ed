package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/policy"
)

// midAnswerFaults are upstream failures after the first content part and
// before the end of the answer: a streaming client has seen the content by
// then, a non-streaming one has seen nothing.
func midAnswerFaults() []struct {
	name string
	a    act
} {
	return []struct {
		name string
		a    act
	}{
		{"connection reset", act{preamble: true, chunks: []string{"Par", "tial"}, cut: true, logprobs: true, tier: "flex"}},
		{"in-stream error event", act{chunks: []string{"Par"}, errorEvent: "overloaded", logprobs: true}},
		{"ended without finish or [DONE]", act{chunks: []string{"Par"}, noFinish: true, logprobs: true}},
		{"stream idle past the gap deadline", act{chunks: []string{"Par"}, afterText: make(chan struct{}), logprobs: true}},
	}
}

// A non-streaming client sees nothing until the whole answer is ready, so
// a failure after the upstream's first content part is as invisible to it
// as one before: it fails over, and the answer is the
// fallback's alone — its text, usage, finish, logprobs, system fingerprint
// and model names, never a mix with the failed attempt's partial answer.
func TestNonStreamingFailsOverUntilComplete(t *testing.T) {
	r := newRig(t, "")
	for _, c := range midAnswerFaults() {
		t.Run(c.name, func(t *testing.T) {
			r.up["primary"].play(c.a)
			r.up["backup"].play(act{preamble: true, chunks: []string{"from", " backup"}, logprobs: true, tier: "default"})
			p := params("primary")
			p.Logprobs = oai.Bool(true)
			var raw *http.Response
			cc, err := r.client.Chat.Completions.New(context.Background(), p, option.WithResponseInto(&raw))
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, raw.StatusCode)
			require.Equal(t, "from backup", cc.Choices[0].Message.Content, "exactly the fallback's answer")
			require.Equal(t, "backup", cc.Model, "the model that answered")
			require.Equal(t, "stop", cc.Choices[0].FinishReason)
			require.Equal(t, int64(11), cc.Usage.PromptTokens)
			require.Equal(t, int64(2), cc.Usage.CompletionTokens)
			require.Equal(t, "fp_backup", cc.SystemFingerprint, "the raw fields of the answering attempt alone")
			require.EqualValues(t, "default", cc.ServiceTier)
			var tokens []string
			for _, lp := range cc.Choices[0].Logprobs.Content {
				tokens = append(tokens, lp.Token)
			}
			require.Equal(t, []string{"from", " backup"}, tokens)
			require.Equal(t, "backup", raw.Header.Get("X-Retryhost-Model"))
			require.Equal(t, "2", raw.Header.Get("X-Retryhost-Attempts"))
			require.Equal(t, "up-backup", raw.Header.Get("X-Retryhost-Upstream-Model"))
			require.Len(t, r.up["primary"].requests(), 1)
			require.Len(t, r.up["backup"].requests(), 1)
			require.Empty(t, r.up["third"].requests())
			require.Eventually(t, func() bool {
				return strings.Contains(r.logs.String(), `"stream":false,"attempts":2,"fallbacks":0`)
			}, 5*time.Second, 10*time.Millisecond, r.logs.String())
			r.healthy()
		})
	}
}

// Streaming, the same faults still end the committed stream in-band (the
// client has the partial text already); only non-streaming requests commit
// at the end.
func TestStreamingStillCommitsAtFirstContent(t *testing.T) {
	r := newRig(t, "")
	for _, c := range midAnswerFaults() {
		t.Run(c.name, func(t *testing.T) {
			r.up["primary"].play(c.a)
			got := r.stream("primary")
			require.Error(t, got.err)
			require.True(t, strings.HasPrefix(got.text, "Par"), got.text)
			require.Empty(t, r.up["backup"].requests(), "nothing is re-run after commit")
			r.healthy()
		})
	}
}

// When every model fails mid-answer, a non-streaming client gets a clean
// error answer naming the cause — never a 200, never partial text — after
// a bounded number of attempts.
func TestNonStreamingAllFailMidAnswer(t *testing.T) {
	for _, c := range []struct {
		name   string
		a      act
		status int
		typ    string
		code   string
		cause  string
	}{
		{"connection reset", act{chunks: []string{"Par"}, cut: true}, http.StatusBadGateway, "upstream_error", "upstream_failed", "EOF"},
		{"ended without finish", act{chunks: []string{"Par"}, noFinish: true}, http.StatusBadGateway, "upstream_error", "upstream_failed", "finish"},
		{"stream idle past the gap deadline", act{chunks: []string{"Par"}, afterText: make(chan struct{})}, http.StatusGatewayTimeout, "timeout", "gap", "gap"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, "")
			for _, u := range r.up {
				u.play(c.a)
			}
			_, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
			var apiErr *oai.Error
			require.True(t, errors.As(err, &apiErr), "%v", err)
			require.Equal(t, c.status, apiErr.StatusCode)
			require.Equal(t, c.typ, apiErr.Type)
			require.Equal(t, c.code, apiErr.Code)
			require.Contains(t, apiErr.Message, c.cause)
			require.NotContains(t, apiErr.RawJSON(), "Par", "no partial text")
			require.Len(t, r.up["primary"].requests(), 1)
			require.Len(t, r.up["backup"].requests(), 1, "a switch to the model already failing is not a retry: the request's error")
			require.Empty(t, r.up["third"].requests())

			resp, body := r.rawStream(`{"model":"primary","messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, c.status, resp.StatusCode)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			require.NotContains(t, body, "Par")
			var e struct {
				Error struct{ Type, Code, Message string } `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &e), body)
			require.Equal(t, c.code, e.Error.Code)
			require.Contains(t, r.logs.String(), `"outcome":"upstream_error"`)
			r.healthy()
		})
	}
}

// /metrics counts a non-streaming fail-over after content like any other:
// the failed attempt, the fail-over, the commit of the answering model.
// Its time to first content is not observed: it commits at the end.
func TestNonStreamingFailOverMetrics(t *testing.T) {
	r := newRig(t, "")
	r.up["primary"].play(act{chunks: []string{"Par"}, cut: true})
	r.up["backup"].play(act{chunks: []string{"ok"}})
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "ok", cc.Choices[0].Message.Content)

	var body string
	require.Eventually(t, func() bool {
		body = r.metricsText()
		return strings.Contains(body, "retryhost_gateway_inflight_requests 0")
	}, 10*time.Second, 10*time.Millisecond)
	for _, want := range []string{
		`retryhost_gateway_requests_total{code="200",outcome="ok",route="primary"} 1`,
		`retryhost_gateway_attempts_total{class="network",model="primary",outcome="error"} 1`,
		`retryhost_gateway_attempts_total{class="",model="backup",outcome="success"} 1`,
		`retryhost_gateway_failovers_total{to="backup"} 1`,
		`retryhost_gateway_commits_total{model="backup"} 1`,
	} {
		require.Contains(t, body, want)
	}
	require.NotContains(t, body, "retryhost_gateway_commits_total{model=\"primary\"}", "the failed attempt never committed")
	require.NotContains(t, body, "retryhost_gateway_time_to_first_content_seconds_count", "a non-streaming answer has no time to first content")
}

// A non-streaming answer is held until it is complete, so what it may hold
// is bounded (WithMaxAnswerBytes): an upstream whose answer outgrows it
// fails the attempt (its class is unknown: the usual gateway rules do not
// move it, and the client gets 502 answer_too_large, no partial text); a
// rule that matches any error fails it over. Streams are not bounded.
func TestNonStreamingAnswerBounded(t *testing.T) {
	long := strings.Repeat("y", 1000)
	big := act{chunks: []string{long, long, long, long, long}}
	r := newRig(t, "", WithMaxAnswerBytes(4<<10))
	r.up["primary"].play(big)
	_, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	var apiErr *oai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusBadGateway, apiErr.StatusCode)
	require.Equal(t, "answer_too_large", apiErr.Code)
	require.NotContains(t, apiErr.RawJSON(), "yyy")
	require.Empty(t, r.up["backup"].requests())

	// Streaming holds nothing: the same answer streams whole.
	r.up["primary"].play(big)
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, strings.Repeat(long, 5), got.text)
	r.healthy()

	r = newRig(t, `"rules": [{"when": {"any": true}, "action": "switch", "model": "backup"}]`, WithMaxAnswerBytes(4<<10))
	r.up["primary"].play(big)
	r.up["backup"].play(act{chunks: []string{"short"}})
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "short", cc.Choices[0].Message.Content)
	require.Equal(t, "backup", cc.Model)

	_, err = New(context.Background(), Bytes("p.json", []byte(`{"models": []}`), policy.Options{}), WithMaxAnswerBytes(0))
	require.ErrorContains(t, err, "max answer bytes must be positive")
}

// BenchmarkNonStreaming measures one non-streamed answer of 100 content
// chunks through the gateway, held until complete (CommitAtEnd) and
// collected into one chat.completion (the row BenchmarkNonStreaming/gateway).
// go test ./gateway -run '^$' -bench NonStreaming -benchmem
func BenchmarkNonStreaming(b *testing.B) { benchStream(b, 100, false) }

// A non-streaming answer is judged whole by the policy's rules, as a
// Generate response is: a content-filter finish after content switches
// model under a finish rule, where a stream has committed on its first
// content and gets the filtered answer as it came.
func TestNonStreamingResultJudged(t *testing.T) {
	r := newRig(t, `"rules": [{"when": {"finish": ["content-filter"]}, "action": "switch", "model": "backup"}]`)
	filtered := act{chunks: []string{"Par"}, finish: "content_filter"}
	r.up["primary"].play(filtered)
	r.up["backup"].play(act{chunks: []string{"from backup"}})
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "from backup", cc.Choices[0].Message.Content)
	require.Equal(t, "backup", cc.Model)
	require.Equal(t, "stop", cc.Choices[0].FinishReason)

	r.up["primary"].play(filtered)
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Par", got.text)
	require.Equal(t, "content_filter", got.finish)
	require.Len(t, r.up["backup"].requests(), 1)
}
