package e2e_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
	"github.com/retryhost/retryhost/provider/openai"
)

// onRefusalSwitch wraps first with a rule that switches to second on a
// refusal only: any other error would end the request.
func onRefusalSwitch(t *testing.T, first, second driver.Model, rec *attempts) *driver.RetryableModel {
	t.Helper()
	r, err := driver.New(first, driver.WithObserver(rec),
		driver.WithRules(driver.OnClass(abi.ClassRefusal).Switch(second)))
	require.NoError(t, err)
	rm, err := driver.NewRetryableModel(r)
	require.NoError(t, err)
	return rm
}

// Anthropic declares a refusal after an empty text or
// thinking block. Nothing was said, so OnClass(ClassRefusal).Switch runs
// and the caller gets the second model's answer, not an empty "success"
// finished with ReasonRefusal.
func TestAnthropicRefusalAfterEmptyBlockFailsOver(t *testing.T) {
	for _, name := range []string{"refusal_stop_after_empty_text", "refusal_stop_after_empty_thinking"} {
		t.Run(name, func(t *testing.T) {
			first := wiretest.Serve(t, transcript(t, "anthropic", name))
			answer := transcript(t, "openai", "text")
			second := wiretest.Serve(t, answer)
			rec := &attempts{}
			rm := onRefusalSwitch(t, anthropicModel(t, first), openaiModel(t, second.URL, second.Client()), rec)

			text, starts := streamText(t, rm, request())
			require.Equal(t, openaiText(t, answer), text)
			require.Equal(t, 1, starts)
			ends := rec.get()
			require.Len(t, ends, 2)
			require.Equal(t, abi.ClassRefusal, ends[0].Class)
			var re *driver.RefusalError
			require.ErrorAs(t, ends[0].Err, &re)
			require.Len(t, second.Requests(), 1)
		})
	}
	t.Run("generate", func(t *testing.T) {
		first := wiretest.Serve(t, transcript(t, "anthropic", "generate_refusal_after_empty_blocks"))
		second := wiretest.Serve(t, transcript(t, "openai", "generate_text"))
		rec := &attempts{}
		rm := onRefusalSwitch(t, anthropicModel(t, first), openaiModel(t, second.URL, second.Client()), rec)
		resp, err := rm.Generate(t.Context(), request())
		require.NoError(t, err)
		require.Equal(t, "Hello! How can I help you today?", resp.Text())
		require.Equal(t, abi.ReasonStop, resp.Finish.Unified)
		ends := rec.get()
		require.Len(t, ends, 2)
		require.Equal(t, abi.ClassRefusal, ends[0].Class)
	})
}

// A Retry-After too long to represent, sent through the
// real SDK client, makes the retry wait WithRetryAfterCap, not the rule's
// own few milliseconds.
func TestHugeRetryAfterIsCapped(t *testing.T) {
	const limit = 30 * time.Millisecond
	for name, header := range map[string][2]string{
		"seconds 1e9":  {"retry-after", "1000000000"},
		"seconds 1e12": {"retry-after", "1000000000000"},
		"ms 1e12":      {"retry-after-ms", "1000000000000"},
		"far date":     {"retry-after", "Fri, 31 Dec 9999 23:59:59 GMT"},
	} {
		t.Run(name, func(t *testing.T) {
			limited := transcript(t, "openai", "rate_limit_429")
			delete(limited.Headers, "retry-after")
			delete(limited.Headers, "retry-after-ms")
			limited.Headers[header[0]] = header[1]
			answer := transcript(t, "openai", "text")
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if calls.Add(1) == 1 {
					for k, v := range limited.Headers {
						w.Header().Set(k, v)
					}
					w.WriteHeader(limited.Status)
					_, _ = io.WriteString(w, limited.Body)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, wiretest.SSE(answer))
			}))
			t.Cleanup(srv.Close)

			rec := &attempts{}
			r, err := driver.New(openaiModel(t, srv.URL, srv.Client()), driver.WithObserver(rec),
				driver.WithRetryAfterCap(limit), driver.WithRules(driver.OnStatus(429).Retry().Delay(time.Millisecond)))
			require.NoError(t, err)
			rm, err := driver.NewRetryableModel(r)
			require.NoError(t, err)
			text, _ := streamText(t, rm, request())
			require.Equal(t, openaiText(t, answer), text)
			ends := rec.get()
			require.Len(t, ends, 2)
			require.Equal(t, limit, ends[0].Delay, "the cap, not the rule's 1 ms")
		})
	}
}

// Anthropic's stream breaks with an "event: error" line
// that carries no data. It is a server fault, so a rule on ClassServer
// fails over (an unclassified error would have ended the request).
func TestAnthropicEmptyErrorEventFailsOver(t *testing.T) {
	first := wiretest.Serve(t, transcript(t, "anthropic", "error_event_no_data"))
	answer := transcript(t, "openai", "text")
	second := wiretest.Serve(t, answer)
	rec := &attempts{}
	r, err := driver.New(anthropicModel(t, first), driver.WithObserver(rec),
		driver.WithRules(driver.OnClass(abi.ClassServer).Switch(openaiModel(t, second.URL, second.Client()))))
	require.NoError(t, err)
	rm, err := driver.NewRetryableModel(r)
	require.NoError(t, err)
	text, _ := streamText(t, rm, request())
	require.Equal(t, openaiText(t, answer), text)
	ends := rec.get()
	require.Len(t, ends, 2)
	require.Equal(t, abi.ClassServer, ends[0].Class)
}

func responsesModel(t *testing.T, srv *wiretest.Server) *openai.Model {
	t.Helper()
	m, err := openai.New("gpt-4.1-mini", openai.WithBaseURL(srv.URL+"/v1"), openai.WithAPIKey("sk-test"),
		openai.WithHTTPClient(srv.Client()), openai.WithResponsesAPI())
	require.NoError(t, err)
	return m
}

// A Responses API stream that fails before content (a
// response.failed event, an in-stream error event, a declared refusal)
// fails over through the real openai-go client like a Chat Completions
// one: the rule sees the class, the caller gets the next model's answer
// once.
func TestResponsesFailsOver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		class abi.ErrorClass
	}{
		{"responses_failed", abi.ClassServer},
		{"responses_error_event", abi.ClassRateLimit},
		{"responses_refusal", abi.ClassRefusal},
		{"responses_failed_invalid_prompt", abi.ClassClient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := wiretest.Serve(t, transcript(t, "openai", tc.name))
			second := wiretest.Serve(t, transcript(t, "anthropic", "text"))
			rec := &attempts{}
			r, err := driver.New(responsesModel(t, first), driver.WithObserver(rec),
				driver.WithRules(driver.OnClass(tc.class).Switch(anthropicModel(t, second))))
			require.NoError(t, err)
			rm, err := driver.NewRetryableModel(r)
			require.NoError(t, err)
			text, starts := streamText(t, rm, request())
			require.Equal(t, anthropicAnswer, text)
			require.Equal(t, 1, starts)
			ends := rec.get()
			require.Len(t, ends, 2)
			require.Equal(t, tc.class, ends[0].Class)
			require.Equal(t, "/v1/responses", first.Requests()[0].Path)
		})
	}
	t.Run("generate", func(t *testing.T) {
		first := wiretest.Serve(t, transcript(t, "openai", "generate_responses_failed"))
		second := wiretest.Serve(t, transcript(t, "anthropic", "generate_text"))
		rec := &attempts{}
		r, err := driver.New(responsesModel(t, first), driver.WithObserver(rec),
			driver.WithRules(driver.OnClass(abi.ClassServer).Switch(anthropicModel(t, second))))
		require.NoError(t, err)
		rm, err := driver.NewRetryableModel(r)
		require.NoError(t, err)
		resp, err := rm.Generate(t.Context(), request())
		require.NoError(t, err)
		require.Equal(t, anthropicAnswer, resp.Text())
		ends := rec.get()
		require.Len(t, ends, 2)
		require.Equal(t, abi.ClassServer, ends[0].Class)
	})
}

// A Chat Completions model that is rate limited fails over to the same
// provider's Responses API, which answers: both APIs in one policy.
func TestChatFailsOverToResponses(t *testing.T) {
	first := wiretest.Serve(t, transcript(t, "openai", "rate_limit_429"))
	answer := transcript(t, "openai", "responses_text")
	second := wiretest.Serve(t, answer)
	rec := &attempts{}
	r, err := driver.New(openaiModel(t, first.URL, first.Client()), driver.WithObserver(rec),
		driver.WithRules(driver.OnClass(abi.ClassRateLimit).Switch(responsesModel(t, second))))
	require.NoError(t, err)
	rm, err := driver.NewRetryableModel(r)
	require.NoError(t, err)
	text, _ := streamText(t, rm, request())
	require.Equal(t, "Hello! How can I help you today?", text)
	require.Equal(t, "/v1/chat/completions", first.Requests()[0].Path)
	require.Equal(t, "/v1/responses", second.Requests()[0].Path)
	require.Len(t, rec.get(), 2)
}

// A user reads the provider's request id from a RetryableModel's stream:
// the answering attempt's response headers, through every adapter, after a
// fail-over too.
func TestStreamHeaderThroughRetryableModel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		first  func(t *testing.T) driver.Model // fails before content, or nil
		second func(t *testing.T) (driver.Model, string)
		want   string
	}{
		{name: "openai chat", second: func(t *testing.T) (driver.Model, string) {
			srv := wiretest.Serve(t, transcript(t, "openai", "text"))
			return openaiModel(t, srv.URL, srv.Client()), "x-request-id"
		}, want: "req_7f3c2b1a9e"},
		{name: "openai responses", second: func(t *testing.T) (driver.Model, string) {
			return responsesModel(t, wiretest.Serve(t, transcript(t, "openai", "responses_text"))), "x-request-id"
		}, want: "req_5b3f0c9e2a7d41e8"},
		{name: "anthropic after a fail-over", first: func(t *testing.T) driver.Model {
			return responsesModel(t, wiretest.Serve(t, transcript(t, "openai", "responses_failed")))
		}, second: func(t *testing.T) (driver.Model, string) {
			return anthropicModel(t, wiretest.Serve(t, transcript(t, "anthropic", "text"))), "request-id"
		}, want: "req_011CSHoEeqs5C35K2UUqR7Fy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answering, key := tc.second(t)
			first := answering
			if tc.first != nil {
				first = tc.first(t)
			}
			r, err := driver.New(first, driver.WithRules(driver.Fallback(answering)))
			require.NoError(t, err)
			rm, err := driver.NewRetryableModel(r)
			require.NoError(t, err)
			s, err := rm.Stream(t.Context(), request())
			require.NoError(t, err)
			hs, ok := s.(driver.HeaderStream)
			require.True(t, ok, "%T is no HeaderStream", s)
			_, _, err = read(t, s) // the answering attempt is known once it answers
			require.NoError(t, err)
			require.Equal(t, tc.want, hs.Header().Get(key))
		})
	}
}
