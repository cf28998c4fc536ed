package gateway

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/gateway/vkey"
)

// keyRig is a rig whose gateway holds the virtual keys ks (each key's
// secret is "secret-" and its id) beside the plain key "plain".
func keyRig(t *testing.T, anthropicRoutes []string, ks ...*vkey.Key) *rig {
	t.Helper()
	for _, k := range ks {
		k.Hash = vkey.Hash("secret-" + k.ID)
	}
	set, err := (&vkey.File{Keys: ks}).Set()
	require.NoError(t, err)
	return newRigOf(t, `"rules": []`, anthropicRoutes, WithKeySet(set), WithAPIKeys("plain"))
}

// oc and ac are addressable clients of the gateway for key.
func (r *rig) oc(key string) *oai.Client {
	c := r.newClient(key)
	return &c
}

func (r *rig) ac(key string) *anthropic.Client {
	c := r.newAnthropicClient(key)
	return &c
}

func oaiErr(t *testing.T, err error) *oai.Error {
	t.Helper()
	var e *oai.Error
	require.True(t, errors.As(err, &e), "%v", err)
	return e
}

func anthErr(t *testing.T, err error) *anthropic.Error {
	t.Helper()
	var e *anthropic.Error
	require.True(t, errors.As(err, &e), "%v", err)
	return e
}

func messageParams(model string, maxTokens int64) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: maxTokens,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Capital of France?"))}}
}

// TestVirtualKeyUnknownExpiredRevokedAre401: on both doors, in each
// door's shape, with the reason named; the plain keys still serve.
func TestVirtualKeyUnknownExpiredRevokedAre401(t *testing.T) {
	r := keyRig(t, []string{"third"},
		&vkey.Key{ID: "ok"},
		&vkey.Key{ID: "old", Expires: time.Now().Add(-time.Minute)},
		&vkey.Key{ID: "gone", Revoked: true})
	for _, tc := range []struct{ secret, says string }{
		{"secret-unknown", "missing or invalid API key"},
		{"secret-old", "expired at"},
		{"secret-gone", "is revoked"},
	} {
		_, err := r.oc(tc.secret).Chat.Completions.New(context.Background(), params("primary"))
		e := oaiErr(t, err)
		require.Equal(t, http.StatusUnauthorized, e.StatusCode)
		require.Equal(t, "invalid_api_key", e.Code)
		require.Contains(t, e.Message, tc.says)
		_, err = r.ac(tc.secret).Messages.New(context.Background(), messageParams("third", 64))
		ae := anthErr(t, err)
		require.Equal(t, http.StatusUnauthorized, ae.StatusCode)
		require.Contains(t, ae.RawJSON(), `"type":"authentication_error"`)
		require.Contains(t, ae.Error(), tc.says)
	}
	require.Empty(t, r.up["primary"].requests(), "a refused key reaches no upstream")
	_, err := r.oc("secret-ok").Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	_, err = r.ac("secret-ok").Messages.New(context.Background(), messageParams("third", 64))
	require.NoError(t, err)
	_, err = r.oc("plain").Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err, "the plain keys serve beside the virtual ones")
}

// TestVirtualKeyRouteNotAllowedIs403: a model, or a fallback, outside
// the key's routes, on both doors; a prefix pattern allows its routes.
func TestVirtualKeyRouteNotAllowedIs403(t *testing.T) {
	r := keyRig(t, []string{"third"}, &vkey.Key{ID: "narrow", Routes: []string{"prim*"}})
	c := r.newClient("secret-narrow")
	_, err := c.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	_, err = c.Chat.Completions.New(context.Background(), params("backup"))
	e := oaiErr(t, err)
	require.Equal(t, http.StatusForbidden, e.StatusCode)
	require.Equal(t, "model_not_allowed", e.Code)
	require.Equal(t, "model", e.Param)
	resp, body := r.rawPost("/v1/chat/completions", `{"model":"primary","fallbacks":["backup"],"messages":[{"role":"user","content":"hi"}]}`,
		"Authorization", "Bearer secret-narrow")
	require.Equal(t, http.StatusForbidden, resp.StatusCode, body)
	require.Contains(t, body, `"param":"fallbacks[0]"`)
	_, err = r.ac("secret-narrow").Messages.New(context.Background(), messageParams("third", 64))
	ae := anthErr(t, err)
	require.Equal(t, http.StatusForbidden, ae.StatusCode)
	require.Contains(t, ae.RawJSON(), `"type":"permission_error"`)
	_, err = c.Embeddings.New(context.Background(), oai.EmbeddingNewParams{Model: "backup",
		Input: oai.EmbeddingNewParamsInputUnion{OfString: oai.String("hi")}})
	require.Equal(t, http.StatusForbidden, oaiErr(t, err).StatusCode, "the forwarded doors hold keys to their routes too")
	require.Len(t, r.up["primary"].requests(), 1)
	require.Empty(t, r.up["third"].requests())
	require.Empty(t, r.up["backup"].requests())
}

// TestVirtualKeyOverRPMIs429WithRateLimitHeaders: the request past the
// key's RPM gets 429 with Retry-After and OpenAI's x-ratelimit-* headers,
// which every admitted answer carries too; in Anthropic's shape on
// /v1/messages.
func TestVirtualKeyOverRPMIs429WithRateLimitHeaders(t *testing.T) {
	r := keyRig(t, []string{"third"}, &vkey.Key{ID: "slow", RPM: 2, TPM: 100000})
	c := r.newClient("secret-slow")
	var resp *http.Response
	_, err := c.Chat.Completions.New(context.Background(), params("primary"), withResponse(&resp))
	require.NoError(t, err)
	require.Equal(t, "2", resp.Header.Get("X-Ratelimit-Limit-Requests"))
	require.Equal(t, "1", resp.Header.Get("X-Ratelimit-Remaining-Requests"))
	require.Equal(t, "30s", resp.Header.Get("X-Ratelimit-Reset-Requests"))
	require.Equal(t, "100000", resp.Header.Get("X-Ratelimit-Limit-Tokens"))
	require.NotEmpty(t, resp.Header.Get("X-Ratelimit-Remaining-Tokens"))
	require.NotEmpty(t, resp.Header.Get("X-Ratelimit-Reset-Tokens"))
	_, err = r.ac("secret-slow").Messages.New(context.Background(), messageParams("third", 64))
	require.NoError(t, err)

	_, err = c.Chat.Completions.New(context.Background(), params("primary"))
	e := oaiErr(t, err)
	require.Equal(t, http.StatusTooManyRequests, e.StatusCode)
	require.Equal(t, "rate_limit_exceeded", e.Code)
	require.Equal(t, "rate_limit_error", e.Type)
	h := e.Response.Header
	require.Equal(t, "30", h.Get("Retry-After"))
	require.Equal(t, "0", h.Get("X-Ratelimit-Remaining-Requests"))
	require.Equal(t, "2", h.Get("X-Ratelimit-Limit-Requests"))
	_, err = r.ac("secret-slow").Messages.New(context.Background(), messageParams("third", 64))
	ae := anthErr(t, err)
	require.Equal(t, http.StatusTooManyRequests, ae.StatusCode)
	require.Contains(t, ae.RawJSON(), `"type":"rate_limit_error"`)
	require.NotEmpty(t, ae.Response.Header.Get("Retry-After"))
	require.Len(t, r.up["primary"].requests(), 1)
}

// withResponse makes openai-go hand back the raw answer.
func withResponse(resp **http.Response) option.RequestOption { return option.WithResponseInto(resp) }

// TestVirtualKeyTPMChargesEstimateAndSettlesOnUsage: a request is
// charged its estimate (body/4 + max_tokens) at admission and its usage
// once done, so a second request that the first's estimate would have
// refused is admitted, and one whose estimate does not fit is refused
// with the tokens headers.
func TestVirtualKeyTPMChargesEstimateAndSettlesOnUsage(t *testing.T) {
	r := keyRig(t, nil, &vkey.Key{ID: "tok", TPM: 700})
	c := r.newClient("secret-tok")
	p := params("primary")
	p.MaxTokens = oai.Int(500)
	for range 2 { // 2 × (est ~520) > 700; used: 11 input + a few output each
		_, err := c.Chat.Completions.New(context.Background(), p)
		require.NoError(t, err)
	}
	p.MaxTokens = oai.Int(690)
	_, err := c.Chat.Completions.New(context.Background(), p)
	e := oaiErr(t, err)
	require.Equal(t, http.StatusTooManyRequests, e.StatusCode)
	require.Contains(t, e.Message, "tokens per minute")
	require.Equal(t, "700", e.Response.Header.Get("X-Ratelimit-Limit-Tokens"))
	require.NotEmpty(t, e.Response.Header.Get("Retry-After"))
}

// TestVirtualKeyLimitNeverCutsACommittedStream: a stream whose usage
// passes the key's TPM is relayed whole; the requests after it pay.
func TestVirtualKeyLimitNeverCutsACommittedStream(t *testing.T) {
	r := keyRig(t, nil, &vkey.Key{ID: "tok", TPM: 60})
	long := make([]string, 80)
	for i := range long {
		long[i] = "word "
	}
	r.up["primary"].play(act{chunks: long})
	c := r.newClient("secret-tok")
	p := params("primary")
	p.StreamOptions.IncludeUsage = oai.Bool(true)
	s := c.Chat.Completions.NewStreaming(context.Background(), p)
	var text strings.Builder
	var usage int64
	for s.Next() {
		for _, ch := range s.Current().Choices {
			text.WriteString(ch.Delta.Content)
		}
		usage = max(usage, s.Current().Usage.TotalTokens)
	}
	require.NoError(t, s.Err())
	require.NoError(t, s.Close())
	require.Equal(t, strings.Repeat("word ", 80), text.String())
	require.Greater(t, usage, int64(60))
	require.Eventually(t, func() bool {
		_, err := c.Chat.Completions.New(context.Background(), params("primary"))
		return err != nil && oaiErr(t, err).StatusCode == http.StatusTooManyRequests
	}, 5*time.Second, 10*time.Millisecond, "the stream's usage was not settled")
}

// TestVirtualKeyBudgetExhaustedIsInsufficientQuota: as OpenAI answers an
// exhausted quota (429, type and code insufficient_quota, no retry), in
// Anthropic's 429 shape on /v1/messages.
func TestVirtualKeyBudgetExhaustedIsInsufficientQuota(t *testing.T) {
	r := keyRig(t, []string{"third"}, &vkey.Key{ID: "poor", Budget: vkey.Budget{TokensPerDay: 20}})
	c := r.newClient("secret-poor")
	_, err := c.Chat.Completions.New(context.Background(), params("primary")) // used 0 < 20: admitted, uses 11 + 1
	require.NoError(t, err)
	_, err = c.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err, "12 of 20 used")
	_, err = c.Chat.Completions.New(context.Background(), params("primary"))
	e := oaiErr(t, err)
	require.Equal(t, http.StatusTooManyRequests, e.StatusCode)
	require.Equal(t, "insufficient_quota", e.Type)
	require.Equal(t, "insufficient_quota", e.Code)
	require.Equal(t, "false", e.Response.Header.Get("X-Should-Retry"))
	_, err = r.ac("secret-poor").Messages.New(context.Background(), messageParams("third", 64))
	ae := anthErr(t, err)
	require.Equal(t, http.StatusTooManyRequests, ae.StatusCode)
	require.Contains(t, ae.RawJSON(), `"type":"rate_limit_error"`)
	require.Contains(t, ae.RawJSON(), "token budget")
	require.Len(t, r.up["primary"].requests(), 2)
}

// TestVirtualKeyMaxConcurrent: a key's requests in flight past its
// max_concurrent get 429 (client_busy); another key is not held by it.
func TestVirtualKeyMaxConcurrent(t *testing.T) {
	r := keyRig(t, nil, &vkey.Key{ID: "one", MaxConcurrent: 1}, &vkey.Key{ID: "other"})
	hold := make(chan struct{})
	r.up["primary"].play(act{hold: hold, chunks: []string{"ok"}})
	done := make(chan error, 1)
	go func() {
		_, err := r.oc("secret-one").Chat.Completions.New(context.Background(), params("primary"))
		done <- err
	}()
	require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 5*time.Second, 5*time.Millisecond)
	_, err := r.oc("secret-one").Chat.Completions.New(context.Background(), params("primary"))
	e := oaiErr(t, err)
	require.Equal(t, http.StatusTooManyRequests, e.StatusCode)
	require.Equal(t, "client_busy", e.Code)
	close(hold)
	require.NoError(t, <-done)
	_, err = r.oc("secret-other").Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
}

// TestKeyIDInRequestContext: the handlers behind the key check, and
// everything under them, read the virtual key's id from the context.
func TestKeyIDInRequestContext(t *testing.T) {
	set, err := (&vkey.File{Keys: []*vkey.Key{{ID: "team-a", Hash: vkey.Hash("s-a")}}}).Set()
	require.NoError(t, err)
	g := &Gateway{stats: &stats{}, cfg: config{logger: newJSONLogger(&strings.Builder{})}}
	g.metrics = newMetrics(g.stats, &g.budget)
	g.keySet.Store(set)
	g.keys.Store(&[][32]byte{})
	var got string
	h := g.authed(chatDoor{}, func(w http.ResponseWriter, r *http.Request) { got = KeyID(r.Context()) })
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	req.Header.Set("Authorization", "Bearer s-a")
	h(httptest.NewRecorder(), req)
	require.Equal(t, "team-a", got)
	require.Empty(t, KeyID(context.Background()))
}

// TestSetKeySetSwapsKeys: a reload's set serves its keys at once.
func TestSetKeySetSwapsKeys(t *testing.T) {
	r := keyRig(t, nil, &vkey.Key{ID: "first"})
	_, err := r.oc("secret-first").Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	set, err := (&vkey.File{Keys: []*vkey.Key{{ID: "second", Hash: vkey.Hash("secret-second")}}}).Set()
	require.NoError(t, err)
	require.NoError(t, r.gw.SetKeySet(set))
	_, err = r.oc("secret-first").Chat.Completions.New(context.Background(), params("primary"))
	require.Equal(t, http.StatusUnauthorized, oaiErr(t, err).StatusCode)
	_, err = r.oc("secret-second").Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
}

// shiftedLimiter is a Limiter whose clock runs ahead of the wall's by
// shift, counting its settlements, so that a test can wait for a
// request's and move to the next UTC day.
type shiftedLimiter struct {
	vkey.Limiter
	mu      sync.Mutex
	shift   time.Duration
	settled int
}

func (s *shiftedLimiter) Admit(ctx context.Context, k *vkey.Key, est int64, now time.Time) vkey.Decision {
	s.mu.Lock()
	now = now.Add(s.shift)
	s.mu.Unlock()
	return s.Limiter.Admit(ctx, k, est, now)
}

func (s *shiftedLimiter) Settle(ctx context.Context, k *vkey.Key, delta int64, cost float64, now time.Time) {
	s.mu.Lock()
	now = now.Add(s.shift)
	s.mu.Unlock()
	s.Limiter.Settle(ctx, k, delta, cost, now)
	s.mu.Lock()
	s.settled++
	s.mu.Unlock()
}

func (s *shiftedLimiter) settlements() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settled
}

// TestVirtualKeySpendBudget: a key's spend is what its requests cost at
// the policy's prices, settled when each ends. The request that crosses
// the day's spend budget is served and counted; the next is refused as
// OpenAI refuses an exhausted quota, on both doors, before any upstream
// call; the next UTC day serves the key again.
func TestVirtualKeySpendBudget(t *testing.T) {
	// Each request to primary costs 11 input and 1 output tokens at 2
	// and 8 a million: 0.00003. Two cross 0.00005.
	k := &vkey.Key{ID: "spender", Hash: vkey.Hash("secret-spender"), Budget: vkey.Budget{CostPerDay: 0.00005}}
	set, err := (&vkey.File{Keys: []*vkey.Key{k}}).Set()
	require.NoError(t, err)
	lim := &shiftedLimiter{Limiter: vkey.NewLocal()}
	var sink lockedBuffer
	r := newPricedRig(t, []string{"third"}, `"rules": []`, WithKeySet(set), WithLimiter(lim), WithRequestLog(&sink))
	c := r.oc("secret-spender")
	for i := range 2 {
		_, err := c.Chat.Completions.New(context.Background(), params("primary"))
		require.NoError(t, err, "request %d: %v spent of 0.00005", i, float64(i)*0.00003)
		require.Eventually(t, func() bool { return lim.settlements() == i+1 }, 5*time.Second, time.Millisecond)
	}
	_, err = c.Chat.Completions.New(context.Background(), params("primary"))
	e := oaiErr(t, err)
	require.Equal(t, http.StatusTooManyRequests, e.StatusCode)
	require.Equal(t, "insufficient_quota", e.Type)
	require.Equal(t, "insufficient_quota", e.Code)
	require.Contains(t, e.Message, "spend budget until ")
	require.Equal(t, "false", e.Response.Header.Get("X-Should-Retry"))
	_, _, dayEnd, _ := vkey.Period(time.Now())
	require.Contains(t, e.Message, dayEnd.Format(time.RFC3339))
	require.Equal(t, "60", e.Response.Header.Get("Retry-After"), "the gateway's longest Retry-After; the message says when")
	_, err = r.ac("secret-spender").Messages.New(context.Background(), messageParams("third", 64))
	ae := anthErr(t, err)
	require.Equal(t, http.StatusTooManyRequests, ae.StatusCode)
	require.Contains(t, ae.RawJSON(), `"type":"rate_limit_error"`)
	require.Contains(t, ae.RawJSON(), "spend budget")
	require.Len(t, r.up["primary"].requests(), 2, "a refused request reaches no upstream")
	require.Empty(t, r.up["third"].requests())

	lim.mu.Lock()
	lim.shift = time.Until(dayEnd) + time.Second
	lim.mu.Unlock()
	_, err = c.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err, "a new UTC day, a new budget")
	require.Len(t, r.up["primary"].requests(), 3)

	var spent []float64
	require.Eventually(t, func() bool {
		spent = spent[:0]
		for _, l := range sink.lines(t) {
			if l["status"] == float64(http.StatusOK) {
				spent = append(spent, l["cost"].(float64))
			}
		}
		return len(spent) == 3
	}, 5*time.Second, time.Millisecond)
	for _, c := range spent {
		require.InDelta(t, 0.00003, c, 1e-12, "the request log's cost is the price the key was charged")
	}
}

// TestSpendBudgetUnderAnUnpricedPolicyWarns: a key with a spend budget
// under a policy that prices no model is logged, since its spend stays
// 0; under a priced policy it is not.
func TestSpendBudgetUnderAnUnpricedPolicyWarns(t *testing.T) {
	const warning = "spend budget but the policy prices no model"
	r := keyRig(t, nil, &vkey.Key{ID: "plain-budget", Budget: vkey.Budget{TokensPerDay: 10}})
	require.NotContains(t, r.logs.String(), warning, "a token budget needs no price")
	set, err := (&vkey.File{Keys: []*vkey.Key{{ID: "spender", Hash: vkey.Hash("s"), Budget: vkey.Budget{CostPerMonth: 5}}}}).Set()
	require.NoError(t, err)
	require.NoError(t, r.gw.SetKeySet(set))
	require.Contains(t, r.logs.String(), warning)
	require.Contains(t, r.logs.String(), `"key":"spender"`)

	priced := newPricedRig(t, nil, `"rules": []`, WithKeySet(set))
	require.NotContains(t, priced.logs.String(), warning)
	unpriced := keyRig(t, nil, &vkey.Key{ID: "at-start", Budget: vkey.Budget{CostPerDay: 1}})
	require.Contains(t, unpriced.logs.String(), warning, "at the start too")
}

// TestResetHeaderRendersAsDurationString: a reset of a second or more is
// the wait rounded to the second as time.Duration prints it; under a
// second, whole milliseconds rounded up.
func TestResetHeaderRendersAsDurationString(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 0, 1, time.Millisecond, 999 * time.Millisecond, 999*time.Millisecond + 1,
		time.Second, 1499 * time.Millisecond, 1500 * time.Millisecond, 59*time.Second + 600*time.Millisecond, time.Minute,
		61 * time.Second, time.Hour - 1, time.Hour, 25*time.Hour + 3*time.Minute + 4*time.Second, 999 * time.Hour, 1000 * time.Hour,
		math.MaxInt64} {
		want := "0s"
		switch {
		case d >= time.Second:
			want = d.Round(time.Second).String()
		case d > 0:
			want = strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10) + "ms"
		}
		require.Equal(t, want, string(appendReset(nil, d)), "%d", int64(d))
	}
}
