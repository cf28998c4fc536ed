package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retryhost/retryhost/internal/testkit"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
)

// TestMain fails the package's tests if any goroutine is left behind.
// (The Gemini SDK links OpenCensus, whose package init starts a worker
// that lives as long as the process.)
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// defaultRules is a gateway's usual policy: retry rate limits on the same
// model (with Retry-After, else backoff with jitter), switch on server
// errors, cut connections, timeouts and refusals; never resend a 4xx.
const defaultRules = `
	"rules": [
		{"when": {"status": [429]}, "action": "retry", "attempts": 4},
		{"when": {"status": [429]}, "action": "switch", "model": "backup"},
		{"when": {"status_range": [500, 599]}, "action": "switch", "model": "backup"},
		{"when": {"class": ["server", "overloaded", "network", "timeout", "refusal"]}, "action": "switch", "model": "backup"}
	],
	"backoff": {"delay": "1s", "factor": 2, "max_delay": "4s", "jitter": "equal"},
	"deadlines": {"first_content": "1500ms", "gap": "1s"}`

type rig struct {
	t      *testing.T
	gw     *Gateway
	srv    *httptest.Server
	up     map[string]*upstream
	hc     *http.Client
	client oai.Client
	anth   anthropic.Client // an anthropic-sdk-go client pointed at the gateway
	logs   *testkit.LogBuffer
	key    string
}

// newRig starts three upstreams (primary, backup, third), a gateway over a
// policy with rules (defaultRules when empty) and an openai-go client
// pointed at it.
func newRig(t *testing.T, rules string, opts ...Option) *rig {
	t.Helper()
	return newRigOf(t, rules, nil, opts...)
}

// newRigOf is newRig with the routes named in anthropic served by
// Anthropic upstreams (the Messages API), the others by OpenAI-compatible
// ones.
func newRigOf(t *testing.T, rules string, anthropic []string, opts ...Option) *rig {
	t.Helper()
	return newRigUp(t, rules, anthropic, false, opts...)
}

// newRigJSON is newRig with "upstream_json": true on every model: a
// non-streaming client's requests reach the upstreams as non-streamed
// ones (the upstream's JSON mode).
func newRigJSON(t *testing.T, rules string, opts ...Option) *rig {
	t.Helper()
	return newRigUp(t, rules, nil, true, opts...)
}

// newRigUp is newRigOf, with upstream_json on the OpenAI-compatible
// models when upJSON.
func newRigUp(t *testing.T, rules string, anthropic []string, upJSON bool, opts ...Option) *rig {
	t.Helper()
	if rules == "" {
		rules = defaultRules
	}
	r := &rig{t: t, up: map[string]*upstream{}, logs: &testkit.LogBuffer{}}
	var models []string
	for _, n := range []string{"primary", "backup", "third"} {
		u := newUpstream(n)
		r.up[n] = u
		prov, base := "openai", u.url()
		if slices.Contains(anthropic, n) {
			prov, base = "anthropic", u.srv.URL
		}
		extra := ""
		if upJSON && prov == "openai" {
			extra = `, "upstream_json": true`
		}
		models = append(models, fmt.Sprintf(`{"name": %q, "provider": %q, "model": "up-%s", "base_url": %q, "api_key_env": "UPSTREAM_KEY"%s}`, n, prov, n, base, extra))
	}
	pol := fmt.Sprintf(`{"models": [%s], %s}`, strings.Join(models, ", "), rules)
	r.serve(pol, opts...)
	return r
}

// serve starts a gateway over the policy pol (its upstreams in r.up) and
// the clients of it, all closed when the test ends.
func (r *rig) serve(pol string, opts ...Option) {
	t := r.t
	t.Helper()
	popts := policy.Options{Getenv: func(string) string { return "sk-upstream" }, Builtin: plugins.Module}
	opts = append([]Option{WithLogger(newJSONLogger(r.logs))}, opts...)
	gw, err := New(context.Background(), Bytes("test-policy.json", []byte(pol), popts), opts...)
	require.NoError(t, err)
	r.gw = gw
	r.srv = httptest.NewServer(gw)
	r.hc = &http.Client{Transport: &http.Transport{}}
	r.client = r.newClient("")
	r.anth = r.newAnthropicClient("")
	t.Cleanup(func() {
		r.hc.CloseIdleConnections()
		r.srv.Close()
		require.NoError(t, gw.Close(context.Background()))
		for _, u := range r.up {
			u.srv.Close()
		}
	})
}

func (r *rig) newClient(key string) oai.Client {
	if key == "" {
		key = "client-key"
	}
	return oai.NewClient(option.WithBaseURL(r.srv.URL+"/v1"), option.WithAPIKey(key),
		option.WithMaxRetries(0), option.WithHTTPClient(r.hc))
}

// newAnthropicClient returns an anthropic-sdk-go client of the gateway,
// sending key (default "client-key") as x-api-key, with its retries off.
func (r *rig) newAnthropicClient(key string) anthropic.Client {
	if key == "" {
		key = "client-key"
	}
	return anthropic.NewClient(aoption.WithBaseURL(r.srv.URL), aoption.WithAPIKey(key),
		aoption.WithMaxRetries(0), aoption.WithHTTPClient(r.hc), aoption.WithoutOpenTelemetry())
}

func params(model string) oai.ChatCompletionNewParams {
	return oai.ChatCompletionNewParams{Model: model, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Capital of France?")}}
}

// streamed is what a client read from a stream.
type streamed struct {
	text   string
	models map[string]bool
	finish string
	usage  *oai.CompletionUsage
	err    error
}

// streamText streams a request for model under ctx, which bounds it, and
// returns the text of its deltas and the stream's error.
func (r *rig) streamText(ctx context.Context, model string) (string, error) {
	s := r.client.Chat.Completions.NewStreaming(ctx, params(model))
	defer s.Close()
	var text string
	for s.Next() {
		for _, ch := range s.Current().Choices {
			text += ch.Delta.Content
		}
	}
	return text, s.Err()
}

func (r *rig) stream(model string, opts ...option.RequestOption) streamed {
	r.t.Helper()
	p := params(model)
	p.StreamOptions.IncludeUsage = oai.Bool(true)
	s := r.client.Chat.Completions.NewStreaming(context.Background(), p, opts...)
	defer s.Close()
	out := streamed{models: map[string]bool{}}
	var b strings.Builder
	for s.Next() {
		c := s.Current()
		out.models[c.Model] = true
		for _, ch := range c.Choices {
			b.WriteString(ch.Delta.Content)
			if ch.FinishReason != "" {
				out.finish = ch.FinishReason
			}
		}
		if c.JSON.Usage.Valid() && c.Usage.TotalTokens > 0 {
			u := c.Usage
			out.usage = &u
		}
	}
	out.text, out.err = b.String(), s.Err()
	return out
}

// healthy asserts the gateway answers a plain non-streaming request right
// after a fault: every upstream is set to answer.
func (r *rig) healthy() {
	r.t.Helper()
	for _, u := range r.up {
		u.play(act{chunks: []string{"fine"}})
	}
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(r.t, err, "the gateway is not healthy after the fault")
	require.Equal(r.t, "fine", cc.Choices[0].Message.Content)
	require.Equal(r.t, "primary", cc.Model)
	for _, u := range r.up {
		u.reset()
	}
}

// rawStream posts a streaming request and returns the raw SSE body.
func (r *rig) rawStream(body string, hdr ...string) (*http.Response, string) {
	r.t.Helper()
	return r.rawPost("/v1/chat/completions", body, hdr...)
}

// rawPost posts body to path with the headers hdr (name, value, …) and
// returns the raw answer.
func (r *rig) rawPost(path, body string, hdr ...string) (*http.Response, string) {
	r.t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+path, strings.NewReader(body))
	require.NoError(r.t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := r.hc.Do(req)
	require.NoError(r.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// events splits an SSE body into its data payloads.
func events(body string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, v)
		}
	}
	return out
}

func streamBody(model string) string {
	return `{"model":"` + model + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`
}

// within counts the hits that fall in any window of length d.
func maxInWindow(hits []hit, d time.Duration) int {
	best := 0
	for i := range hits {
		n := 0
		for j := i; j < len(hits) && hits[j].at.Sub(hits[i].at) < d; j++ {
			n++
		}
		best = max(best, n)
	}
	return best
}

var _ = time.Second

func newTestServer(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
