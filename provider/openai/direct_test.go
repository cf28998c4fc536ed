package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
)

// sent is what an upstream received: the request line's target, the
// headers and the body.
type sent struct {
	target string
	header http.Header
	body   []byte
}

// okStream is a whole one-chunk answer.
const okStream = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m-1","choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"

// recorder is a loopback upstream that keeps what it is sent and answers
// with answer (a stream's [DONE] by default).
type recorder struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []sent
	answer func(w http.ResponseWriter, r *http.Request)
}

func newRecorder(t *testing.T) *recorder {
	rec := &recorder{}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.got = append(rec.got, sent{target: r.URL.RequestURI(), header: r.Header.Clone(), body: b})
		answer := rec.answer
		rec.mu.Unlock()
		if answer != nil {
			answer(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, okStream)
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *recorder) last(t *testing.T) sent {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NotEmpty(t, rec.got)
	return rec.got[len(rec.got)-1]
}

// gatewayRequest is a request as a gateway forwards it: raw messages, a
// forwarded field, a request id header (twice, to check Add semantics).
func gatewayRequest() *driver.Request {
	return &driver.Request{
		MaxOutputTokens: 32,
		Headers:         http.Header{"X-Request-Id": {"req-1", "req-2"}, "x-lower": {"v"}},
		ProviderOptions: map[string]any{"openai": map[string]any{
			"messages": json.RawMessage(`[{"role":"user","content":"hi"}]`),
			"user":     json.RawMessage(`"u-1"`),
			"stream":   json.RawMessage(`false`), // a forwarded stream member is the path's to set
		}},
	}
}

// call opens a stream (or, with atEnd, an upstream-JSON answer) on m and
// closes it.
func call(m *Model, req *driver.Request, atEnd bool) error {
	ctx := context.Background()
	if atEnd {
		ctx = driver.CommitAtEnd(ctx)
	}
	st, err := m.Stream(ctx, req)
	if err == nil {
		for {
			if _, err = st.Recv(); err != nil {
				break
			}
		}
		_ = st.Close()
		if err == io.EOF {
			err = nil
		}
	}
	return err
}

// The direct path sends what the SDK's pipeline sends for the model: the
// same URL, every header the same (the SDK's own but its X-Stainless-*
// telemetry, the model's, the request's, the key's or its absence,
// Azure's), and the same JSON object, streamed and not.
func TestDirectSendsWhatTheSDKSends(t *testing.T) {
	rec := newRecorder(t)
	tests := map[string][]Option{
		"key":           {WithAPIKey("sk-1")},
		"no key":        {withoutAuthorization()},
		"headers":       {WithAPIKey("sk-1"), WithHeader("X-Team", "a"), WithHeader("OpenAI-Organization", "org-1")},
		"provider":      {WithAPIKey("sk-1"), WithProvider("vllm")},
		"azure":         {WithAzure(rec.srv.URL, "dep-1", "2024-10-21"), WithAPIKey("az-key")},
		"upstream json": {WithAPIKey("sk-1"), WithUpstreamJSON()},
	}
	for name, opts := range tests {
		for _, atEnd := range []bool{false, true} {
			t.Run(name, func(t *testing.T) {
				if atEnd && name != "upstream json" {
					t.Skip("only an upstream-JSON model answers at the end with a non-streamed request")
				}
				rec.answer = nil
				if atEnd {
					rec.answer = func(w http.ResponseWriter, _ *http.Request) {
						w.Header().Set("Content-Type", "application/json")
						_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"m-1","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
					}
				}
				base := []Option{WithHTTPClient(rec.srv.Client())}
				if name != "azure" {
					base = append(base, WithBaseURL(rec.srv.URL+"/v1"))
				}
				provider := map[string]string{"provider": "vllm", "azure": "azure"}[name]
				if provider == "" {
					provider = "openai"
				}
				var got [2]sent
				for i, sdk := range []bool{true, false} {
					m, err := New("m-1", append(base, opts...)...)
					require.NoError(t, err)
					m.sdkBody = sdk
					req := gatewayRequest()
					req.ProviderOptions[provider] = req.ProviderOptions["openai"]
					require.NoError(t, call(m, req, atEnd))
					got[i] = rec.last(t)
					require.Equal(t, !sdk, m.direct.t != nil, "the direct path is taken only without sdkBody")
				}
				sdk, direct := got[0], got[1]
				require.Equal(t, sdk.target, direct.target)
				for k := range sdk.header {
					if strings.HasPrefix(k, "X-Stainless-") {
						delete(sdk.header, k) // the SDK's telemetry, not sent (directPath)
					}
				}
				require.NotEmpty(t, sdk.header.Get("User-Agent"))
				for k := range direct.header {
					require.False(t, strings.HasPrefix(k, "X-Stainless-"), "sent on the direct path: %s", k)
				}
				require.Equal(t, sdk.header, direct.header)
				require.JSONEq(t, string(sdk.body), string(direct.body))
				require.Equal(t, []string{"req-1", "req-2"}, direct.header.Values("X-Request-Id"))
				var b map[string]any
				require.NoError(t, json.Unmarshal(direct.body, &b))
				require.Equal(t, !atEnd, b["stream"])
			})
		}
	}
}

// A model with an SDK option of the caller's (which may be a middleware
// or a per-request timeout) or with WithParam fields stays on the SDK's
// pipeline.
func TestDirectOnlyWhenNothingPerRequestDiffers(t *testing.T) {
	rec := newRecorder(t)
	seen := false
	tests := map[string]struct {
		opts   []Option
		direct bool
	}{
		"plain":           {opts: nil, direct: true},
		"request options": {opts: []Option{WithRequestOptions(option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) { seen = true; return next(r) }))}},
		"params":          {opts: []Option{WithParam("user", "x")}},
		"sdk retries":     {opts: []Option{WithMaxRetries(1)}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m, err := New("m-1", append([]Option{WithBaseURL(rec.srv.URL + "/v1"), WithAPIKey("k"), WithHTTPClient(rec.srv.Client())}, tc.opts...)...)
			require.NoError(t, err)
			require.NoError(t, call(m, gatewayRequest(), false))
			require.Equal(t, tc.direct, m.direct.t != nil)
		})
	}
	require.True(t, seen, "the caller's middleware ran")
}

// An error answer on the direct path is the SDK path's error, field for
// field, *openai.Error included; a redirect to another origin is refused
// (as the SDK's origin check refuses it), one within the origin followed.
func TestDirectErrorsAreTheSDKs(t *testing.T) {
	rec := newRecorder(t)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the other origin was reached: %s %s (Authorization %q)", r.Method, r.URL, r.Header.Get("Authorization"))
	}))
	defer other.Close()
	tests := map[string]func(w http.ResponseWriter, r *http.Request){
		"429 with Retry-After": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(429)
			_, _ = io.WriteString(w, `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`)
		},
		"400 content filter": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"error":{"message":"flagged","type":"invalid_request_error","code":"content_filter","param":"messages"}}`)
		},
		"quota": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(429)
			_, _ = io.WriteString(w, `{"error":{"message":"no money","type":"insufficient_quota","code":"insufficient_quota"}}`)
		},
		"500 html": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			_, _ = io.WriteString(w, "<html>bad gateway</html>")
		},
		"error as a string": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(503)
			_, _ = io.WriteString(w, `{"error":"overloaded"}`)
		},
		"x-should-retry false": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Should-Retry", "false")
			w.WriteHeader(500)
			_, _ = io.WriteString(w, `{"error":{"message":"broken"}}`)
		},
		"200 with a JSON error": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"error":{"message":"in a 200","type":"server_error"}}`)
		},
		"redirect to another origin": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/v1/chat/completions", http.StatusTemporaryRedirect)
		},
	}
	for name, answer := range tests {
		t.Run(name, func(t *testing.T) {
			rec.answer = answer
			var errs [2]error
			for i, sdk := range []bool{true, false} {
				m, err := New("m-1", WithBaseURL(rec.srv.URL+"/v1"), WithAPIKey("k"), WithHTTPClient(rec.srv.Client()))
				require.NoError(t, err)
				m.sdkBody = sdk
				errs[i] = call(m, gatewayRequest(), false)
				require.Error(t, errs[i])
			}
			var pes [2]*driver.ProviderError
			for i := range errs {
				errors.As(errs[i], &pes[i])
			}
			require.NotNil(t, pes[0], "sdk: %v", errs[0])
			require.NotNil(t, pes[1], "direct: %v", errs[1])
			if name == "redirect to another origin" {
				// Both refuse it as a transport failure, in their own words.
				require.Zero(t, pes[0].Status)
				require.Zero(t, pes[1].Status)
				require.Equal(t, pes[0].Class, pes[1].Class)
				require.Contains(t, errs[1].Error(), "not the base URL's origin")
				return
			}
			s, d := *pes[0], *pes[1]
			require.Equal(t, s.Status, d.Status)
			require.Equal(t, s.Type, d.Type)
			require.Equal(t, s.Message, d.Message)
			require.Equal(t, s.Class, d.Class)
			require.Equal(t, s.Retryable, d.Retryable)
			require.Equal(t, s.Body, d.Body)
			require.Equal(t, s.Header.Get("Retry-After"), d.Header.Get("Retry-After"))
			var sa, da *oai.Error
			require.Equal(t, errors.As(errs[0], &sa), errors.As(errs[1], &da))
			if sa != nil {
				require.Equal(t, sa.Code, da.Code)
				require.Equal(t, sa.Param, da.Param)
			}
		})
	}
}

// A redirect within the base URL's origin is followed with the body, as
// the SDK path follows it.
func TestDirectFollowsARedirectWithinTheOrigin(t *testing.T) {
	rec := newRecorder(t)
	rec.answer = func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			http.Redirect(w, r, "/v2/chat/completions", http.StatusPermanentRedirect)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, okStream)
	}
	m, err := New("m-1", WithBaseURL(rec.srv.URL+"/v1"), WithAPIKey("k"), WithHTTPClient(rec.srv.Client()))
	require.NoError(t, err)
	require.NoError(t, call(m, gatewayRequest(), false))
	require.NotNil(t, m.direct.t)
	got := rec.last(t)
	require.Equal(t, "/v2/chat/completions", got.target)
	require.Contains(t, string(got.body), `"messages"`)
	require.Equal(t, "Bearer k", got.header.Get("Authorization"))
}
