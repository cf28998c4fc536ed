package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/provider/anthropic"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
	"github.com/retryhost/retryhost/provider/openai"
)

// hang bounds waits that only guard against a hang.
const hang = 10 * time.Second

func transcript(t *testing.T, provider, name string) *wiretest.Transcript {
	t.Helper()
	tr, err := wiretest.Load(filepath.Join("..", "..", "testdata", "wire", provider, name+".json"))
	require.NoError(t, err)
	return tr
}

func openaiModel(t *testing.T, url string, hc *http.Client) *openai.Model {
	t.Helper()
	m, err := openai.New("gpt-4o-mini", openai.WithBaseURL(url+"/v1"), openai.WithAPIKey("sk-test"), openai.WithHTTPClient(hc))
	require.NoError(t, err)
	return m
}

func anthropicModel(t *testing.T, srv *wiretest.Server) *anthropic.Model {
	t.Helper()
	m, err := anthropic.New("claude-sonnet-4-5", anthropic.WithBaseURL(srv.URL), anthropic.WithAPIKey("sk-ant-test"),
		anthropic.WithHTTPClient(srv.Client()))
	require.NoError(t, err)
	return m
}

func request() *driver.Request {
	return &driver.Request{Messages: []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: "Hi"}}}}}
}

// anthropicAnswer is the text of testdata/wire/anthropic/text.json.
const anthropicAnswer = "Hello! How can I help you today?"

// openaiText concatenates the content deltas of an OpenAI transcript.
func openaiText(t *testing.T, tr *wiretest.Transcript) string {
	t.Helper()
	var b strings.Builder
	for _, e := range tr.Events {
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal(e.Data, &chunk) == nil {
			for _, c := range chunk.Choices {
				b.WriteString(c.Delta.Content)
			}
		}
	}
	return b.String()
}

// streamText streams req through rm and reads the answer to its end,
// requiring both to succeed.
func streamText(t *testing.T, rm *driver.RetryableModel, req *driver.Request) (text string, starts int) {
	t.Helper()
	s, err := rm.Stream(t.Context(), req)
	require.NoError(t, err)
	text, starts, err = read(t, s)
	require.NoError(t, err)
	return text, starts
}

// read drains s and returns its text, how many stream-start parts it
// carried, and the terminal error (nil for io.EOF).
func read(t *testing.T, s driver.Stream) (text string, starts int, err error) {
	t.Helper()
	defer s.Close()
	var b strings.Builder
	for {
		p, err := s.Recv()
		if err == io.EOF {
			return b.String(), starts, nil
		}
		if err != nil {
			return b.String(), starts, err
		}
		switch p.Kind {
		case abi.KindTextDelta:
			b.WriteString(p.Delta)
		case abi.KindStreamStart:
			starts++
		}
	}
}

// attempts records the attempts' ends, to check what the driver decided.
type attempts struct {
	mu   sync.Mutex
	ends []driver.AttemptEndEvent
}

func (a *attempts) RequestStart(ctx context.Context, _ driver.RequestEvent) context.Context {
	return ctx
}
func (a *attempts) AttemptStart(ctx context.Context, _ driver.AttemptEvent) context.Context {
	return ctx
}
func (a *attempts) Commit(context.Context, driver.CommitEvent)         {}
func (a *attempts) RequestEnd(context.Context, driver.RequestEndEvent) {}
func (a *attempts) AttemptEnd(_ context.Context, e driver.AttemptEndEvent) {
	a.mu.Lock()
	a.ends = append(a.ends, e)
	a.mu.Unlock()
}

func (a *attempts) get() []driver.AttemptEndEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]driver.AttemptEndEvent(nil), a.ends...)
}

// retryable wraps first with a fall-back to second.
func retryable(t *testing.T, first, second driver.Model, ropts []driver.Option, sopts ...driver.StreamOption) *driver.RetryableModel {
	t.Helper()
	r, err := driver.New(first, append([]driver.Option{driver.WithRules(driver.Fallback(second))}, ropts...)...)
	require.NoError(t, err)
	rm, err := driver.NewRetryableModel(r, sopts...)
	require.NoError(t, err)
	return rm
}

// The first provider refuses in plain text (no error, no finish reason
// tells): the refusal detector fails the attempt, the driver closes its
// connection and fails over; the caller gets the second answer, once. The
// detector is the native one, the embedded Wasm plugin (the C build) or
// its Go-SDK reference build (read from disk: it is not embedded), loaded
// through the host under its default, guarded sandbox.
func TestRefusalInTextFailsOver(t *testing.T) {
	detectors := []struct {
		name string
		make func(t *testing.T) driver.Transformer
	}{
		{name: "native", make: func(t *testing.T) driver.Transformer { return mustRefusal(t) }},
		{name: "wasm-go", make: func(t *testing.T) driver.Transformer {
			wasm, err := os.ReadFile(filepath.Join("..", "..", "plugins", "refusal", "refusal.wasm"))
			require.NoError(t, err)
			return wasmRefusal(t, wasm)
		}},
		{name: "wasm-c", make: func(t *testing.T) driver.Transformer { return wasmRefusal(t, plugins.Refusal) }},
	}
	for _, d := range detectors {
		t.Run(d.name, func(t *testing.T) {
			refusal := transcript(t, "openai", "refusal_text")
			refusal.End = wiretest.EndStall // only the client hanging up ends it
			first := wiretest.Serve(t, refusal)
			second := wiretest.Serve(t, transcript(t, "anthropic", "text"))
			rec := &attempts{}
			rm := retryable(t, openaiModel(t, first.URL, first.Client()), anthropicModel(t, second),
				[]driver.Option{driver.WithObserver(rec)}, driver.WithTransforms(d.make(t)))

			text, starts := streamText(t, rm, request())
			require.Equal(t, anthropicAnswer, text, "the second answer, once, with nothing of the refusal")
			require.Equal(t, 1, starts, "one stream start: the answering model's")

			res, ok := first.Wait(hang)
			require.True(t, ok, "the first server never saw its request end")
			require.True(t, res.ClientGone, "the driver closed the refusing stream's connection")
			require.False(t, res.Finished)
			ends := rec.get()
			require.Len(t, ends, 2)
			require.Equal(t, abi.ClassRefusal, ends[0].Class)
			var re *driver.RefusalError
			require.ErrorAs(t, ends[0].Err, &re)
			require.Len(t, second.Requests(), 1)
		})
	}
}

// wasmRefusal loads an embedded refusal plugin with the host's defaults,
// but a call deadline generous enough for a loaded CI machine (a Go
// guest's first call can take tens of milliseconds there), and the
// compilation cache the plugins' own tests share, so a Go guest is compiled
// once per machine rather than once per test binary.
func wasmRefusal(t *testing.T, wasm []byte) driver.Transformer {
	t.Helper()
	ctx := context.Background()
	cache := filepath.Join(os.TempDir(), "retryhost-wasmtest-"+runtime.Version())
	rt, err := host.New(ctx, host.WithCallTimeout(10*time.Second), host.WithCacheDir(cache))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close(ctx)) })
	p, err := rt.Load(ctx, "refusal", wasm)
	require.NoError(t, err)
	return p
}

func mustRefusal(t *testing.T) *driver.RefusalDetector {
	t.Helper()
	d, err := driver.NewRefusalDetector()
	require.NoError(t, err)
	return d
}

// A stall before the first byte is recovered by the first-content
// deadline: the attempt fails with it and the second provider answers.
func TestStallBeforeFirstByteFailsOver(t *testing.T) {
	first := wiretest.Serve(t, transcript(t, "openai", "stall_first_byte"))
	second := wiretest.Serve(t, transcript(t, "anthropic", "text"))
	rec := &attempts{}
	rm := retryable(t, openaiModel(t, first.URL, first.Client()), anthropicModel(t, second),
		[]driver.Option{driver.WithObserver(rec)}, driver.WithFirstContentTimeout(100*time.Millisecond))

	text, _ := streamText(t, rm, request())
	require.Equal(t, anthropicAnswer, text)

	ends := rec.get()
	require.Len(t, ends, 2)
	require.Equal(t, abi.ClassTimeout, ends[0].Class)
	require.Equal(t, abi.DeadlineFirstContent, ends[0].Deadline)
	var de *driver.DeadlineError
	require.ErrorAs(t, ends[0].Err, &de)
	require.Equal(t, abi.DeadlineFirstContent, de.Deadline)
	res, ok := first.Wait(hang)
	require.True(t, ok)
	require.True(t, res.ClientGone, "the stalled connection is closed")
}

// A stall after content cannot fail over (the caller has text): the gap
// deadline truncates the stream with its error, the text so far delivered once.
func TestStallAfterContentTruncatesAtTheGap(t *testing.T) {
	stall := transcript(t, "openai", "stall_mid")
	first := wiretest.Serve(t, stall)
	second := wiretest.Serve(t, transcript(t, "anthropic", "text"))
	rm := retryable(t, openaiModel(t, first.URL, first.Client()), anthropicModel(t, second), nil,
		driver.WithGapTimeout(50*time.Millisecond))

	s, err := rm.Stream(t.Context(), request())
	require.NoError(t, err)
	text, starts, err := read(t, s)
	var de *driver.DeadlineError
	require.ErrorAs(t, err, &de)
	require.Equal(t, abi.DeadlineGap, de.Deadline)
	require.NotEmpty(t, openaiText(t, stall))
	require.Equal(t, openaiText(t, stall), text, "the text received before the stall, once")
	require.Equal(t, 1, starts)
	require.Empty(t, second.Requests(), "nothing re-runs after commit")
	res, ok := first.Wait(hang)
	require.True(t, ok)
	require.True(t, res.ClientGone)
}

// A 429 carrying retry-after-ms is retried on the same provider after
// that delay.
func TestRateLimitRetriedAfterRetryAfter(t *testing.T) {
	const retryAfter = 20 * time.Millisecond
	limited := transcript(t, "openai", "rate_limit_429")
	delete(limited.Headers, "retry-after")
	limited.Headers["retry-after-ms"] = "20"
	answer := transcript(t, "openai", "text")

	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		n := len(arrivals)
		mu.Unlock()
		if n == 1 {
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
	m := openaiModel(t, srv.URL, srv.Client())
	r, err := driver.New(m, driver.WithObserver(rec), driver.WithRules(driver.OnStatus(429).Retry().UseRetryAfter()))
	require.NoError(t, err)
	rm, err := driver.NewRetryableModel(r)
	require.NoError(t, err)
	text, _ := streamText(t, rm, request())
	require.Equal(t, openaiText(t, answer), text)

	ends := rec.get()
	require.Len(t, ends, 2)
	require.Equal(t, abi.ClassRateLimit, ends[0].Class)
	require.Equal(t, 429, ends[0].Status)
	require.Equal(t, m.Key(), ends[0].Next.Key(), "retried on the same provider")
	require.Equal(t, retryAfter, ends[0].Delay, "the delay the server asked for")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, arrivals, 2)
	require.GreaterOrEqual(t, arrivals[1].Sub(arrivals[0]), retryAfter, "the retry waited")
}

// The caller's deadline ends a stalled request with its cause: no fail-over.
func TestCallerCancelIsReturned(t *testing.T) {
	first := wiretest.Serve(t, transcript(t, "openai", "stall_first_byte"))
	second := wiretest.Serve(t, transcript(t, "anthropic", "text"))
	rm := retryable(t, openaiModel(t, first.URL, first.Client()), anthropicModel(t, second), nil)
	cause := errors.New("caller gave up")
	ctx, cancel := context.WithTimeoutCause(t.Context(), 50*time.Millisecond, cause)
	defer cancel()
	_, err := rm.Stream(ctx, request())
	require.ErrorIs(t, err, cause, "the caller's cancellation is a hard stop, not a fail-over")
	require.Empty(t, second.Requests())
}
