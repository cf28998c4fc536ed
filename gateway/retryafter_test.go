package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"
)

// README: every 429 and 503 the gateway sends carries a Retry-After in
// whole seconds, at least 1 and at most 60. This walks each way the
// gateway answers one on its own (full, draining, shut down before
// commit, an upstream 429 with no Retry-After, a closed gateway's model
// list, /readyz), in both doors' formats where the path has a door.
func TestRetryAfterOnEveryRefusal(t *testing.T) {
	const msgBody = `{"model":"primary","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	doors := []struct {
		name, path, body string
		hdr              []string
	}{
		{"chat", "/v1/chat/completions", streamBody("primary"), nil},
		{"messages", "/v1/messages", msgBody, []string{"Anthropic-Version", "2023-06-01"}},
	}
	shutdown := [2]string{`"code":"shutting_down"`, `"type":"overloaded_error"`}
	for _, c := range []struct {
		name   string
		rules  string
		opts   []Option
		status int
		codes  [2]string // in the body, as the chat and the messages door word it
		// do brings the gateway to the path and makes the request (door d).
		do func(t *testing.T, r *rig, post func() (*http.Response, string)) (*http.Response, string)
	}{
		{name: "full (gateway_busy)", opts: []Option{WithMaxConcurrent(1)}, status: http.StatusTooManyRequests, codes: [2]string{`"code":"gateway_busy"`, `"type":"rate_limit_error"`},
			do: func(t *testing.T, r *rig, post func() (*http.Response, string)) (*http.Response, string) {
				hold := make(chan struct{})
				r.up["primary"].play(act{hold: hold, chunks: []string{"slow"}})
				done := make(chan struct{})
				go func() { defer close(done); _, _ = r.rawStream(streamBody("primary")) }()
				t.Cleanup(func() { close(hold); <-done })
				require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 5*time.Second, time.Millisecond)
				return post()
			}},
		{name: "draining", status: http.StatusServiceUnavailable, codes: shutdown,
			do: func(t *testing.T, r *rig, post func() (*http.Response, string)) (*http.Response, string) {
				require.NoError(t, r.gw.Shutdown(context.Background())) // nothing in flight: returns at once, draining
				return post()
			}},
		{name: "shut down before commit", status: http.StatusServiceUnavailable, codes: shutdown,
			do: func(t *testing.T, r *rig, post func() (*http.Response, string)) (*http.Response, string) {
				hold := make(chan struct{})
				t.Cleanup(func() { close(hold) })
				r.up["primary"].play(act{hold: hold}) // no header before the drain ends it
				type answer struct {
					resp *http.Response
					body string
				}
				done := make(chan answer, 1)
				go func() { resp, body := post(); done <- answer{resp, body} }()
				require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 5*time.Second, time.Millisecond)
				ctx, cancel := context.WithCancel(context.Background())
				cancel() // the drain's deadline has passed: end what is in flight
				require.ErrorIs(t, r.gw.Shutdown(ctx), context.Canceled)
				a := <-done
				return a.resp, a.body
			}},
		{name: "upstream 429 without Retry-After", rules: `"rules": []`, status: http.StatusTooManyRequests,
			codes: [2]string{"primary says 429", `"type":"rate_limit_error"`},
			do: func(t *testing.T, r *rig, post func() (*http.Response, string)) (*http.Response, string) {
				r.up["primary"].play(act{status: http.StatusTooManyRequests})
				return post()
			}},
	} {
		for i, d := range doors {
			t.Run(c.name+"/"+d.name, func(t *testing.T) {
				r := newRig(t, c.rules, c.opts...)
				resp, body := c.do(t, r, func() (*http.Response, string) { return r.rawPost(d.path, d.body, d.hdr...) })
				require.Equal(t, c.status, resp.StatusCode, body)
				require.Contains(t, body, c.codes[i])
				require.Equal(t, "1", resp.Header.Get("Retry-After"), body)
			})
		}
	}

	// The paths without a door: a closed gateway's model list, /readyz.
	for _, c := range []struct {
		name, path string
		stop       func(*Gateway) error
	}{
		{"models of a closed gateway", "/v1/models", func(g *Gateway) error { return g.Close(context.Background()) }},
		{"readyz while draining", "/readyz", func(g *Gateway) error { return g.Shutdown(context.Background()) }},
		{"readyz of a closed gateway", "/readyz", func(g *Gateway) error { return g.Close(context.Background()) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, "")
			require.NoError(t, c.stop(r.gw))
			resp, err := r.hc.Get(r.srv.URL + c.path)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			require.Equal(t, "1", resp.Header.Get("Retry-After"))
		})
	}
}

// An upstream's 429 the gateway gives up on reaches the client with a
// Retry-After derived from the upstream's (Retry-After-Ms first, as the
// driver and OpenAI's SDKs read them, else Retry-After in seconds or as a
// date), rounded up to whole seconds, at least 1 and at most 60; a
// Retry-After-Ms the upstream sent goes on, capped at 60 s, so that it
// never says more than Retry-After does. Through openai-go over an OpenAI
// upstream and anthropic-sdk-go over an Anthropic one.
func TestRateLimitRetryAfterBounded(t *testing.T) {
	date := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(http.TimeFormat) }
	cases := []struct {
		name     string
		header   http.Header
		want, ms string
	}{
		{"none", nil, "1", ""},
		{"seconds", http.Header{"Retry-After": {"7"}}, "7", ""},
		{"zero", http.Header{"Retry-After": {"0"}}, "1", ""},
		{"a fraction, rounded up", http.Header{"Retry-After": {"1.5"}}, "2", ""},
		{"an hour, capped", http.Header{"Retry-After": {"3600"}}, "60", ""},
		{"too long to represent, capped", http.Header{"Retry-After": {"99999999999999999999999"}}, "60", ""},
		{"negative", http.Header{"Retry-After": {"-5"}}, "1", ""},
		{"garbage", http.Header{"Retry-After": {"soon"}}, "1", ""},
		{"a past date", http.Header{"Retry-After": {date(-time.Hour)}}, "1", ""},
		{"a date an hour away, capped", http.Header{"Retry-After": {date(time.Hour)}}, "60", ""},
		{"milliseconds", http.Header{"Retry-After-Ms": {"700"}}, "1", "700"},
		{"milliseconds, rounded up", http.Header{"Retry-After-Ms": {"2500"}}, "3", "2500"},
		{"milliseconds, capped", http.Header{"Retry-After-Ms": {"120000"}}, "60", "60000"},
		{"zero milliseconds", http.Header{"Retry-After-Ms": {"0"}}, "1", "0"},
		{"both (OpenAI's way)", http.Header{"Retry-After": {"1"}, "Retry-After-Ms": {"700"}}, "1", "700"},
		{"both, the milliseconds win", http.Header{"Retry-After": {"30"}, "Retry-After-Ms": {"4200"}}, "5", "4200"},
		{"bad milliseconds, seconds used", http.Header{"Retry-After": {"4"}, "Retry-After-Ms": {"-1"}}, "4", ""},
	}
	check := func(t *testing.T, name string, resp *http.Response, want, ms string) {
		t.Helper()
		require.Equal(t, want, resp.Header.Get("Retry-After"), "%s: Retry-After", name)
		require.Equal(t, ms, resp.Header.Get("Retry-After-Ms"), "%s: Retry-After-Ms", name)
	}

	t.Run("openai", func(t *testing.T) {
		r := newRig(t, `"rules": []`)
		for _, c := range cases {
			r.up["primary"].play(act{status: http.StatusTooManyRequests, header: c.header})
			_, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
			var apiErr *oai.Error
			require.ErrorAs(t, err, &apiErr, c.name)
			require.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode, c.name)
			check(t, c.name, apiErr.Response, c.want, c.ms)
		}
		r.healthy()
	})
	t.Run("anthropic", func(t *testing.T) {
		r := newRigOf(t, `"rules": []`, allAnthropic)
		for _, c := range cases {
			r.up["primary"].play(act{status: http.StatusTooManyRequests, header: c.header})
			_, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
			var apiErr *anthropic.Error
			require.ErrorAs(t, err, &apiErr, c.name)
			require.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode, c.name)
			require.EqualValues(t, "rate_limit_error", apiErr.Type(), c.name)
			check(t, c.name, apiErr.Response, c.want, c.ms)
		}
		r.anthHealthy()
	})
}
