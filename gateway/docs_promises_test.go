package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
)

// docs/gateway.md ("Safe defaults") and the limits table in
// docs/security.md state these defaults; a default changed in the code but
// not in the docs fails here, naming the docs' wording.
func TestDocsGatewayDefaults(t *testing.T) {
	r := newRig(t, `"rules": []`)
	c := r.gw.cfg
	for _, tc := range []struct {
		doc       string
		got, want any
	}{
		{"request body (--max-body, WithMaxBodyBytes): 8 MiB", c.maxBody, int64(8 << 20)},
		{"chat requests in flight (WithMaxConcurrent): 1024", c.maxConcurrent, 1024},
		{"in-flight body budget (--body-budget, WithBodyBudget): 512 MiB", c.bodyBudget, int64(512 << 20)},
		{"body budget charges: 2 B a byte while read, 8 B a byte and 384 B a JSON value until commit, 2 B a byte after",
			[4]int64{bodyReadCost, bodyByteCost, bodyValueCost, bodyHeldCost}, [4]int64{2, 8, 384, 2}},
		{"busy: 429 with Retry-After: 1", c.retryAfterBusy, time.Second},
		{"the Retry-After on every 429 and 503 the gateway sends: 1 s to 60 s", [2]time.Duration{minRetryAfter, maxRetryAfter}, [2]time.Duration{time.Second, time.Minute}},
		{"connections per upstream host (WithUpstreamConns): 256", c.upstreamConns, 256},
		{"an upstream's response headers (WithUpstreamHeaderTimeout): 60 s", c.headerTimeout, 60 * time.Second},
		{"each write to a client (WithWriteTimeout): 30 s", c.writeTimeout, 30 * time.Second},
		{"reading a request's body (WithReadTimeout): 30 s", c.readTimeout, 30 * time.Second},
		{"serve --plugin-poll / WithPluginPoll: every 30 s", c.pluginPoll, 30 * time.Second},
		{"a non-streaming answer held until complete: 32 MiB (driver's default)", int64(driver.DefaultMaxAnswerBytes), int64(32 << 20)},
		{"a new plugin version that fails to load is tried again every 10 polls", pluginRetryPolls, 10},
		{"per-request fallbacks: 8", maxFallbacks, 8},
		{"a client's X-Request-Id: 128 visible ASCII characters", maxRequestID, 128},
		{"one upstream SSE event: 4 MiB", maxEventBytes, 4 << 20},
		{"every retry waits 1 s, doubling up to 8 s, with equal jitter", defaultBackoff,
			driver.Backoff{Delay: time.Second, Factor: 2, MaxDelay: 8 * time.Second, Jitter: driver.JitterEqual}},
		{"5 consecutive … failures take a model out of rotation for 1 s, each failed probe doubling it up to 10 s", defaultCooldown,
			driver.Cooldown{Failures: 5, For: time.Second, Max: 10 * time.Second}},
		{"a hedge after 10 s without first content (DefaultHedge)", defaultHedge, 10 * time.Second},
		{"2 minutes to first content (DefaultFirstContent)", defaultFirstContent, 2 * time.Minute},
		{"1 minute of silence between parts (DefaultGap)", defaultGap, time.Minute},
	} {
		require.Equal(t, tc.want, tc.got, "docs: %s", tc.doc)
	}
}

// "per-request fallbacks … at most 8, [] accepted": the boundary both
// ways, and a 9th is a 400 that names the field.
func TestDocsFallbacksBoundary(t *testing.T) {
	r := newRig(t, `"rules": []`)
	list := func(n int) string {
		return `["` + strings.TrimSuffix(strings.Repeat(`backup","`, n), `","`) + `"]`
	}
	for _, tc := range []struct {
		name      string
		fallbacks string
		status    int
		body      string
	}{
		{"empty list accepted", `[]`, http.StatusOK, "ok"},
		{"eight accepted", list(8), http.StatusOK, "ok"},
		{"nine refused", list(9), http.StatusBadRequest, "fallbacks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.up["primary"].play(act{chunks: []string{"ok"}})
			resp, body := r.rawStream(`{"model":"primary","stream":true,"fallbacks":` + tc.fallbacks + `,"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, tc.status, resp.StatusCode, body)
			require.Contains(t, body, tc.body)
		})
	}
}

// "A client's X-Request-Id (1-128 visible ASCII characters …) is echoed":
// 128 is the longest kept (129 is replaced: TestClientRequestIDHonoured).
func TestDocsRequestIDLongestKept(t *testing.T) {
	r := newRig(t, `"rules": []`)
	r.up["primary"].play(act{chunks: []string{"ok"}})
	rid := strings.Repeat("r", 128)
	resp, body := r.rawStream(streamBody("primary"), "X-Request-Id", rid)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, rid, resp.Header.Get("X-Request-Id"))
}

// The Endpoints bullet of docs/gateway.md lists the gateway's metrics; each
// one it names (but the plugin metrics serve adds) is on /metrics under
// retryhost_gateway_, with the labels the page gives it. One request
// that fails over (429 on primary, then backup answers) makes every vector
// show.
func TestDocsMetricNames(t *testing.T) {
	b, err := os.ReadFile("../docs/gateway.md")
	require.NoError(t, err)
	page := string(b)
	start := strings.Index(page, "- **Endpoints:**")
	require.GreaterOrEqual(t, start, 0, "the Endpoints bullet of docs/gateway.md")
	end := start + strings.Index(page[start:], "`GET /healthz`")

	r := newRig(t, `"rules": [{"when": {"status": [429]}, "action": "switch", "model": "backup"}]`)
	r.up["primary"].play(act{status: 429})
	r.up["backup"].play(act{chunks: []string{"ok"}})
	require.NoError(t, r.stream("primary").err)
	var families []*dto.MetricFamily
	require.Eventually(t, func() bool { // the request is counted after its answer is written
		var err error
		families, err = r.gw.metrics.reg.Gather()
		require.NoError(t, err)
		return slices.ContainsFunc(families, func(f *dto.MetricFamily) bool { return f.GetName() == "retryhost_gateway_requests_total" })
	}, 10*time.Second, time.Millisecond)
	served := map[string][]string{} // name → label names
	for _, f := range families {
		var labels []string
		if len(f.GetMetric()) > 0 {
			for _, l := range f.GetMetric()[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		served[f.GetName()] = labels
	}

	var names []string
	for _, m := range regexp.MustCompile("`([a-z_]+)(\\{[a-z,]+\\})?`").FindAllStringSubmatch(page[start:end], -1) {
		name, labels := strings.TrimPrefix(m[1], "retryhost_gateway_"), strings.Trim(m[2], "{}")
		if !strings.Contains(name, "_") || strings.HasPrefix(name, "plugin_") || strings.HasPrefix(name, "client_connection") || name == "stream_options" {
			continue // serve's plugin and connection metrics: cmd/retryhost (TestServe_PluginMetrics, TestServe_MaxConns)
		}
		names = append(names, name)
		switch name {
		case "served_continuations_total": // counted only on a continuation: TestAccountingCountsAContinuation
			continue
		case "cost_total": // only for a priced model: TestAccountingOfAFailOverThroughOpenAIClient
			continue
		case "params_dropped_total": // only when a fall-back is not sent a parameter: TestParameterTheFallBackCannotHonourIsDropped
			continue
		}
		got, ok := served["retryhost_gateway_"+name]
		require.True(t, ok, "docs/gateway.md names retryhost_gateway_%s; /metrics has no such family", name)
		if labels != "" {
			require.ElementsMatch(t, strings.Split(labels, ","), got, "docs/gateway.md: %s{%s}", name, labels)
		}
	}
	require.Contains(t, names, "requests_total", "the bullet was parsed")
	require.Contains(t, names, "state_down")
	require.Len(t, names, 26)
}

// "`n` other than 1 is refused with a 400 naming `n` (the gateway follows
// one choice)"; n of 1 is served.
func TestDocsNOtherThanOne(t *testing.T) {
	r := newRig(t, `"rules": []`)
	for _, tc := range []struct {
		n      string
		status int
	}{{"1", http.StatusOK}, {"2", http.StatusBadRequest}, {"0", http.StatusBadRequest}} {
		t.Run("n="+tc.n, func(t *testing.T) {
			r.up["primary"].play(act{chunks: []string{"ok"}})
			resp, body := r.rawStream(`{"model":"primary","stream":true,"n":` + tc.n + `,"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, tc.status, resp.StatusCode, body)
			if tc.status == http.StatusOK {
				return
			}
			var e struct {
				Error struct{ Message, Param string } `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &e), body)
			require.Equal(t, "n", e.Error.Param, body)
			require.Contains(t, e.Error.Message, "n: only 1", body)
		})
	}
}

// "client keys … (Authorization: Bearer (any case) or X-Api-Key, on both
// doors …; 401 otherwise)" and "GET /metrics (… behind the API keys when
// set)"; /healthz and /readyz need none.
func TestDocsKeysOnEveryDoor(t *testing.T) {
	r := newRig(t, `"rules": []`, WithAPIKeys("k-one"))
	chat := streamBody("primary")
	msgs := `{"model":"primary","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
	}{
		{"metrics without a key", http.MethodGet, "/metrics", "", nil, http.StatusUnauthorized},
		{"metrics with a bearer key", http.MethodGet, "/metrics", "", []string{"Authorization", "BEARER k-one"}, http.StatusOK},
		{"models without a key", http.MethodGet, "/v1/models", "", nil, http.StatusUnauthorized},
		{"models with X-Api-Key", http.MethodGet, "/v1/models", "", []string{"X-Api-Key", "k-one"}, http.StatusOK},
		{"chat without a key", http.MethodPost, "/v1/chat/completions", chat, nil, http.StatusUnauthorized},
		{"chat with X-Api-Key", http.MethodPost, "/v1/chat/completions", chat, []string{"X-Api-Key", "k-one"}, http.StatusOK},
		{"messages without a key", http.MethodPost, "/v1/messages", msgs, nil, http.StatusUnauthorized},
		{"messages with a wrong key", http.MethodPost, "/v1/messages", msgs, []string{"x-api-key", "k-two"}, http.StatusUnauthorized},
		{"messages with x-api-key", http.MethodPost, "/v1/messages", msgs, []string{"x-api-key", "k-one"}, http.StatusOK},
		{"messages with a bearer key", http.MethodPost, "/v1/messages", msgs, []string{"Authorization", "bearer k-one"}, http.StatusOK},
		{"healthz needs none", http.MethodGet, "/healthz", "", nil, http.StatusOK},
		{"readyz needs none", http.MethodGet, "/readyz", "", nil, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.up["primary"].play(act{chunks: []string{"ok"}})
			req, err := http.NewRequest(tc.method, r.srv.URL+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				req.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			resp, err := r.hc.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode, string(b))
		})
	}
}
