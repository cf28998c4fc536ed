package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/policy"
)

// A policy whose rules retry any error still never resends a 400 to the
// model that rejected it: each upstream sees the request exactly once, the
// rules may fail it over, and when every model rejects it the client gets
// the 400 as the last upstream sent it.
func TestBadRequestNeverResentByAnAnyRetryRule(t *testing.T) {
	r := newRig(t, `"rules": [
		{"when": {"any": true}, "action": "retry", "attempts": 3},
		{"when": {"any": true}, "action": "switch", "model": "backup"},
		{"when": {"any": true}, "action": "switch", "model": "third"}
	]`)
	const body = `{"error":{"message":"Invalid value for 'temperature'.","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`
	for _, stream := range []bool{true, false} {
		for _, u := range r.up {
			u.reset()
			u.play(act{status: 400, body: body})
		}
		var err error
		if stream {
			err = r.stream("primary").err
		} else {
			_, err = r.client.Chat.Completions.New(context.Background(), params("primary"))
		}
		var apiErr *oai.Error
		require.True(t, errors.As(err, &apiErr), "stream=%v: %v", stream, err)
		require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
		require.Equal(t, "invalid_value", apiErr.Code)
		for name, u := range r.up {
			require.Equal(t, 1, len(u.requests()), "stream=%v: %s saw the 400 request more than once", stream, name)
		}
	}
	// A fail-over after a 400 is still the policy's to make.
	for _, u := range r.up {
		u.reset()
	}
	r.up["primary"].play(act{status: 400, body: body})
	r.up["backup"].play(act{chunks: []string{"from backup"}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "from backup", got.text)
	require.Len(t, r.up["primary"].requests(), 1)
	require.Len(t, r.up["backup"].requests(), 1)
	require.Empty(t, r.up["third"].requests())
	r.healthy()
}

// A policy that sets no backoff still never bursts on a rate limit without
// Retry-After: the gateway's default backoff spaces the retries on one
// model (at most 2 attempts in any 1.5 s, 4 in any 3 s, counted on the
// upstream's own clock), the rule's attempts bound them, and the switch
// that follows does not wait.
func TestDefaultBackoffNeverBursts(t *testing.T) {
	t.Parallel()
	r := newRig(t, `"rules": [
		{"when": {"status": [429]}, "action": "retry", "attempts": 4},
		{"when": {"status": [429]}, "action": "switch", "model": "backup"}
	]`)
	r.backsOffThenBackup()
	require.Len(t, r.up["backup"].requests(), 1)
	r.healthy()
}

// A policy that fails over but sets no cooldown gets the gateway's
// default: after 5 consecutive failures the dead primary is skipped, and
// the requests that follow go straight to the backup.
func TestDefaultCooldownSkipsADeadPrimary(t *testing.T) {
	r := newRig(t, `"rules": [{"when": {"status_range": [500, 599]}, "action": "switch", "model": "backup"}]`)
	r.skipsDeadPrimary(9, 5)
}

// backsOffThenBackup makes the primary answer 429 without Retry-After and
// the backup stream, sends one request, and requires the backup's answer
// after 4 attempts on the primary that never burst: at most 2 in any 1.5 s,
// 4 in any 3 s, counted on the upstream's own clock.
func (r *rig) backsOffThenBackup() {
	r.t.Helper()
	r.up["primary"].play(act{status: 429})
	r.up["backup"].play(act{chunks: []string{"from backup"}})
	got := r.stream("primary")
	require.NoError(r.t, got.err)
	require.Equal(r.t, "from backup", got.text)
	hits := r.up["primary"].requests()
	require.Len(r.t, hits, 4, "4 attempts on the rate-limited model")
	require.LessOrEqual(r.t, maxInWindow(hits, 1500*time.Millisecond), 2, "a burst: %v", gaps(hits))
	require.LessOrEqual(r.t, maxInWindow(hits, 3*time.Second), 4, "a burst: %v", gaps(hits))
}

// gaps lists the time between consecutive hits, for a failure message.
func gaps(hits []hit) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(hits); i++ {
		out = append(out, hits[i].at.Sub(hits[i-1].at).Round(time.Millisecond))
	}
	return out
}

// WithMetrics serves the caller's collectors on /metrics beside the
// gateway's own; one that clashes with them fails New.
func TestWithMetrics(t *testing.T) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "caller_things_total", Help: "Things."})
	c.Add(3)
	r := newRig(t, `"rules": []`, WithMetrics(c))
	body := r.metricsText()
	require.Contains(t, body, "\ncaller_things_total 3\n")
	require.Contains(t, body, "retryhost_gateway_inflight_requests")

	clash := prometheus.NewGauge(prometheus.GaugeOpts{Name: "retryhost_gateway_inflight_requests", Help: "x"})
	_, err := New(context.Background(), Bytes("p.json", []byte(`{"models": [{"name": "m", "provider": "openai", "model": "x", "base_url": "http://127.0.0.1:1/v1", "api_key_env": "K"}]}`),
		policy.Options{Getenv: func(string) string { return "k" }}), WithMetrics(clash))
	require.ErrorContains(t, err, "WithMetrics")
	_, err = New(context.Background(), Bytes("p.json", nil, policy.Options{}), WithMetrics(nil))
	require.ErrorContains(t, err, "nil")
}

// The response fields the driver does not model reach an openai-go client
// from an OpenAI-compatible upstream, streaming and not: system_fingerprint
// and service_tier on every chunk, and each content delta's logprobs (the
// request's logprobs field is forwarded; the answer carries them back).
func TestUpstreamFieldsReachTheClient(t *testing.T) {
	r := newRig(t, `"rules": []`)
	p := params("primary")
	p.Logprobs = oai.Bool(true)

	r.up["primary"].play(act{preamble: true, chunks: []string{"Par", "is"}, logprobs: true, tier: "priority"})
	s := r.client.Chat.Completions.NewStreaming(context.Background(), p)
	var tokens, text []string
	chunks := 0
	for s.Next() {
		c := s.Current()
		chunks++
		require.Equal(t, "fp_primary", c.SystemFingerprint, "every chunk")
		require.EqualValues(t, "priority", c.ServiceTier, "every chunk")
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" {
				text = append(text, ch.Delta.Content)
				require.True(t, ch.JSON.Logprobs.Valid(), "a content delta without its logprobs: %s", c.RawJSON())
			}
			for _, lp := range ch.Logprobs.Content {
				tokens = append(tokens, lp.Token)
			}
		}
	}
	require.NoError(t, s.Err())
	require.NoError(t, s.Close())
	require.Equal(t, []string{"Par", "is"}, text)
	require.Equal(t, []string{"Par", "is"}, tokens)
	require.Greater(t, chunks, 2)
	require.JSONEq(t, `true`, string(r.up["primary"].requests()[0].body["logprobs"]), "forwarded")

	r.up["primary"].play(act{chunks: []string{"Par", "is"}, logprobs: true, tier: "priority"})
	cc, err := r.client.Chat.Completions.New(context.Background(), p)
	require.NoError(t, err)
	require.Equal(t, "fp_primary", cc.SystemFingerprint)
	require.EqualValues(t, "priority", cc.ServiceTier)
	require.Equal(t, "Paris", cc.Choices[0].Message.Content)
	tokens = nil
	for _, lp := range cc.Choices[0].Logprobs.Content {
		tokens = append(tokens, lp.Token)
	}
	require.Equal(t, []string{"Par", "is"}, tokens)
	require.InDelta(t, -0.2, cc.Choices[0].Logprobs.Content[1].Logprob, 1e-9)

	// Without logprobs asked for, the answer has none (null), as upstream.
	r.up["primary"].play(act{chunks: []string{"ok"}})
	cc, err = r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.False(t, cc.Choices[0].JSON.Logprobs.Valid())
	require.Equal(t, "fp_primary", cc.SystemFingerprint)
	r.healthy()
}

// A transform that rewrites the text (upper.wasm replaces every delta)
// leaves the upstream's logprobs behind: they describe tokens the client
// does not get, so they are null, streaming and not. The fields of the
// whole response (system_fingerprint, service_tier) still come through:
// the transform never sees the raw chunks they ride on.
func TestLogprobsDroppedWhereATransformRewrites(t *testing.T) {
	r := newRig(t, `"rules": [], "transforms": [{"plugin": {"path": "../host/testdata/upper.wasm"}}]`)
	p := params("primary")
	p.Logprobs = oai.Bool(true)
	r.up["primary"].play(act{chunks: []string{"Par", "is"}, logprobs: true, tier: "priority"})
	s := r.client.Chat.Completions.NewStreaming(context.Background(), p)
	var text string
	for s.Next() {
		c := s.Current()
		require.Equal(t, "fp_primary", c.SystemFingerprint, "every chunk")
		require.EqualValues(t, "priority", c.ServiceTier, "every chunk")
		for _, ch := range c.Choices {
			text += ch.Delta.Content
			require.False(t, ch.JSON.Logprobs.Valid(), "logprobs of text the transform rewrote: %s", c.RawJSON())
		}
	}
	require.NoError(t, s.Err())
	require.NoError(t, s.Close())
	require.Equal(t, "PARIS", text)

	r.up["primary"].play(act{chunks: []string{"Par", "is"}, logprobs: true, tier: "priority"})
	cc, err := r.client.Chat.Completions.New(context.Background(), p)
	require.NoError(t, err)
	require.Equal(t, "PARIS", cc.Choices[0].Message.Content)
	require.False(t, cc.Choices[0].JSON.Logprobs.Valid())
	require.Equal(t, "fp_primary", cc.SystemFingerprint)
	require.EqualValues(t, "priority", cc.ServiceTier)
}

// demoTransforms is the demo's transform: the built-in (C) refusal
// detector, fail-open.
const demoTransforms = `"transforms": [{"plugin": {"builtin": "refusal", "fail": "open"}}]`

// With the demo's refusal detector in the policy, a client that asks for
// logprobs gets the upstream's, with system_fingerprint and service_tier,
// streaming and not (the detector never sees the raw chunks they come
// from, and holds the text in its place with them), and a refusal still
// fails over: the backup's answer comes with the backup's fields.
func TestUpstreamFieldsThroughARefusalTransform(t *testing.T) {
	r := newRig(t, defaultRules+", "+demoTransforms)
	p := params("primary")
	p.Logprobs = oai.Bool(true)

	stream := func() (text string, tokens []string, fp string) {
		t.Helper()
		s := r.client.Chat.Completions.NewStreaming(context.Background(), p)
		chunks := 0
		for s.Next() {
			c := s.Current()
			chunks++
			if fp == "" {
				fp = c.SystemFingerprint
			}
			require.Equal(t, fp, c.SystemFingerprint, "every chunk, one upstream's")
			require.EqualValues(t, "priority", c.ServiceTier, "every chunk")
			for _, ch := range c.Choices {
				if ch.Delta.Content != "" {
					text += ch.Delta.Content
					require.True(t, ch.JSON.Logprobs.Valid(), "a content delta without its logprobs: %s", c.RawJSON())
				}
				for _, lp := range ch.Logprobs.Content {
					tokens = append(tokens, lp.Token)
				}
			}
		}
		require.NoError(t, s.Err())
		require.NoError(t, s.Close())
		require.Greater(t, chunks, 2)
		return text, tokens, fp
	}

	r.up["primary"].play(act{preamble: true, chunks: []string{"Par", "is"}, logprobs: true, tier: "priority"})
	text, tokens, fp := stream()
	require.Equal(t, "Paris", text)
	require.Equal(t, []string{"Par", "is"}, tokens)
	require.Equal(t, "fp_primary", fp)

	r.up["primary"].play(act{preamble: true, chunks: []string{"Par", "is"}, logprobs: true, tier: "priority"})
	cc, err := r.client.Chat.Completions.New(context.Background(), p)
	require.NoError(t, err)
	require.Equal(t, "Paris", cc.Choices[0].Message.Content)
	require.Equal(t, "fp_primary", cc.SystemFingerprint)
	require.EqualValues(t, "priority", cc.ServiceTier)
	tokens = nil
	for _, lp := range cc.Choices[0].Logprobs.Content {
		tokens = append(tokens, lp.Token)
	}
	require.Equal(t, []string{"Par", "is"}, tokens)
	require.InDelta(t, -0.2, cc.Choices[0].Logprobs.Content[1].Logprob, 1e-9)

	// The demo's refusal, one delta per word as the demo's provider sends
	// it, with raw chunks in between: caught, and the backup answers.
	refusal := act{preamble: true, chunks: []string{"I'm", " sorry,", " but", " I", " can't", " help", " with", " that."},
		logprobs: true, tier: "priority"}
	for _, nonStream := range []bool{false, true} {
		r.up["primary"].play(refusal)
		r.up["backup"].play(act{preamble: true, chunks: []string{"Ber", "lin"}, logprobs: true, tier: "priority"})
		if nonStream {
			cc, err := r.client.Chat.Completions.New(context.Background(), p)
			require.NoError(t, err)
			require.Equal(t, "Berlin", cc.Choices[0].Message.Content)
			require.Equal(t, "fp_backup", cc.SystemFingerprint)
			require.Len(t, cc.Choices[0].Logprobs.Content, 2)
			continue
		}
		text, tokens, fp = stream()
		require.Equal(t, "Berlin", text, "the refusal failed over")
		require.Equal(t, []string{"Ber", "lin"}, tokens)
		require.Equal(t, "fp_backup", fp, "the fields of the upstream that answered")
	}
	r.healthy()
}

// Under the "legacy" commit rule a raw chunk commits (ai-retry 2.3's
// set), so the gateway gets none there: an upstream that sends its
// preamble chunk and then resets still fails over, invisibly.
func TestLegacyCommitRuleGetsNoRawChunks(t *testing.T) {
	r := newRig(t, defaultRules+`, "commit": "legacy"`)
	r.up["primary"].play(act{preamble: true, cut: true})
	r.up["backup"].play(act{chunks: []string{"ok"}})
	s := r.client.Chat.Completions.NewStreaming(context.Background(), params("primary"))
	var text string
	for s.Next() {
		c := s.Current()
		require.Empty(t, c.SystemFingerprint, "no raw chunks")
		for _, ch := range c.Choices {
			text += ch.Delta.Content
		}
	}
	require.NoError(t, s.Err())
	require.NoError(t, s.Close())
	require.Equal(t, "ok", text)
	r.healthy()
}

// A refusal declared after content (too late to fail over) reaches the
// client as a refusal, not as content.
func TestLateRefusalIsARefusal(t *testing.T) {
	r := newRig(t, `"rules": []`)
	r.up["primary"].play(act{chunks: []string{"Par"}, refusal: "I can't continue."})
	s := r.client.Chat.Completions.NewStreaming(context.Background(), params("primary"))
	var text, refusal string
	for s.Next() {
		for _, ch := range s.Current().Choices {
			text += ch.Delta.Content
			refusal += ch.Delta.Refusal
		}
	}
	require.NoError(t, s.Err())
	require.NoError(t, s.Close())
	require.Equal(t, "Par", text)
	require.Equal(t, "I can't continue.", refusal)

	r.up["primary"].play(act{chunks: []string{"Par"}, refusal: "I can't continue."})
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "Par", cc.Choices[0].Message.Content)
	require.Equal(t, "I can't continue.", cc.Choices[0].Message.Refusal)
}

// A client's X-Request-Id is echoed on every answer (success, upstream
// error, the gateway's own 4xx), logged and forwarded to the upstream; one
// that is too long or not visible ASCII is replaced by the gateway's id.
func TestClientRequestIDHonoured(t *testing.T) {
	r := newRig(t, `"rules": []`)
	const rid = "req-7f3a:client/42"
	resp, body := r.rawStream(streamBody("primary"), "X-Request-Id", rid)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, rid, resp.Header.Get("X-Request-Id"))
	hits := r.up["primary"].requests()
	require.Len(t, hits, 1)
	require.Equal(t, rid, hits[0].header.Get("X-Request-Id"), "forwarded upstream")
	require.Contains(t, r.logs.String(), `"request_id":"`+rid+`"`)

	r.up["primary"].play(act{status: 400})
	resp, body = r.rawStream(streamBody("primary"), "X-Request-Id", rid)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
	require.Equal(t, rid, resp.Header.Get("X-Request-Id"))
	resp, body = r.rawStream(streamBody("nosuchroute"), "X-Request-Id", rid)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, body)
	require.Equal(t, rid, resp.Header.Get("X-Request-Id"))

	r.up["primary"].reset()
	r.up["primary"].play(act{chunks: []string{"ok"}})
	for _, bad := range []string{"has space", strings.Repeat("x", 129), "tab\there", "caf\u00e9"} {
		resp, body = r.rawStream(streamBody("primary"), "X-Request-Id", bad)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		got := resp.Header.Get("X-Request-Id")
		require.True(t, strings.HasPrefix(got, "chatcmpl-rh"), "%q replaced by the gateway's id, got %q", bad, got)
		require.Contains(t, body, `"id":"`+got+`"`, "the gateway's id is the answer's")
	}
	for _, h := range r.up["primary"].requests() {
		require.True(t, strings.HasPrefix(h.header.Get("X-Request-Id"), "chatcmpl-rh"))
	}
}

// /v1/models names each route's provider (owned_by) and when the policy
// serving it was loaded (created).
func TestModelsListOwnerAndCreated(t *testing.T) {
	r := newRig(t, `"rules": []`)
	page, err := r.client.Models.List(context.Background())
	require.NoError(t, err)
	require.Len(t, page.Data, 3)
	for _, m := range page.Data {
		require.Equal(t, "openai", m.OwnedBy, m.ID)
		require.InDelta(t, time.Now().Unix(), m.Created, 600, m.ID)
	}
}

// A content-policy 400 is returned as is unless the policy says otherwise:
// a rule that switches on it moves the request to another model (never
// back to the one that rejected it).
func TestContentPolicyRejectionFailsOverWhenThePolicySaysSo(t *testing.T) {
	r := newRig(t, `"rules": [
		{"when": {"any": true}, "action": "retry", "attempts": 3},
		{"when": {"status": [400], "message": ["safety system"]}, "action": "switch", "model": "backup"}
	]`)
	const body = `{"error":{"message":"Your request was rejected as a result of our safety system.","type":"invalid_request_error","param":"prompt","code":"content_policy_violation"}}`
	r.up["primary"].play(act{status: 400, body: body})
	r.up["backup"].play(act{chunks: []string{"from backup"}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "from backup", got.text)
	require.Equal(t, map[string]bool{"backup": true}, got.models)
	require.Len(t, r.up["primary"].requests(), 1)
	require.Len(t, r.up["backup"].requests(), 1)
	r.healthy()
}
