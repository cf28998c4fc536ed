package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

type obsKey struct{}

// recObserver records every event as one line, and tags the contexts it
// returns so that tests can check where they flow.
type recObserver struct {
	mu     sync.Mutex
	events []string
	ends   []AttemptEndEvent
	commit []CommitEvent
	reqEnd []RequestEndEvent
	badCtx []string // events that received a context they should not have
}

func (o *recObserver) add(s string) {
	o.mu.Lock()
	o.events = append(o.events, s)
	o.mu.Unlock()
}

func (o *recObserver) want(ctx context.Context, event, tag string) {
	if got, _ := ctx.Value(obsKey{}).(string); got != tag {
		o.mu.Lock()
		o.badCtx = append(o.badCtx, fmt.Sprintf("%s got ctx %q, want %q", event, got, tag))
		o.mu.Unlock()
	}
}

func (o *recObserver) RequestStart(ctx context.Context, e RequestEvent) context.Context {
	o.add(fmt.Sprintf("request-start %s %s", e.Op, modelKey(e.Model)))
	return context.WithValue(ctx, obsKey{}, "request")
}

func (o *recObserver) AttemptStart(ctx context.Context, e AttemptEvent) context.Context {
	o.want(ctx, "attempt-start", "request")
	o.add(fmt.Sprintf("attempt-start #%d %s delay=%v failover=%v", e.Number, modelKey(e.Model), e.Delay, e.FailOver))
	return context.WithValue(ctx, obsKey{}, fmt.Sprintf("attempt %d", e.Number))
}

func (o *recObserver) AttemptEnd(ctx context.Context, e AttemptEndEvent) {
	o.want(ctx, "attempt-end", fmt.Sprintf("attempt %d", e.Number))
	o.add(fmt.Sprintf("attempt-end #%d %s %s class=%s next=%s delay=%v",
		e.Number, modelKey(e.Model), e.Outcome, e.Class, modelKey(e.Next), e.Delay))
	o.mu.Lock()
	o.ends = append(o.ends, e)
	o.mu.Unlock()
}

func (o *recObserver) Commit(ctx context.Context, e CommitEvent) {
	o.want(ctx, "commit", fmt.Sprintf("attempt %d", e.Number))
	o.add(fmt.Sprintf("commit #%d %s", e.Number, modelKey(e.Model)))
	o.mu.Lock()
	o.commit = append(o.commit, e)
	o.mu.Unlock()
}

func (o *recObserver) RequestEnd(ctx context.Context, e RequestEndEvent) {
	o.want(ctx, "request-end", "request")
	o.add(fmt.Sprintf("request-end %s attempts=%d failovers=%d err=%v", modelKey(e.Model), e.Attempts, e.FailOvers, e.Err != nil))
	o.mu.Lock()
	o.reqEnd = append(o.reqEnd, e)
	o.mu.Unlock()
}

func (o *recObserver) check(t *testing.T, want ...string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	require.Empty(t, o.badCtx)
	require.Equal(t, want, o.events)
}

func TestObserver_do(t *testing.T) {
	tests := []struct {
		name  string
		errs  []error
		rules []Condition
		opts  []Option
		want  []string
	}{
		{
			name:  "rate limited, then a fallback answers",
			errs:  []error{statusRetryAfter(429, "retry-after-ms", "250")},
			rules: []Condition{OnStatus(429).Switch(fb).UseRetryAfter()},
			want: []string{
				"request-start do test/base",
				"attempt-start #1 test/base delay=0s failover=false",
				"attempt-end #1 test/base error class=rate-limit next=test/fb delay=250ms",
				"attempt-start #2 test/fb delay=250ms failover=true",
				"commit #2 test/fb",
				"attempt-end #2 test/fb success class=none next= delay=0s",
				"request-end test/fb attempts=2 failovers=1 err=false",
			},
		},
		{
			name:  "every attempt fails",
			errs:  []error{status(503), status(503)},
			rules: []Condition{Fallback(fb)},
			want: []string{
				"request-start do test/base",
				"attempt-start #1 test/base delay=0s failover=false",
				"attempt-end #1 test/base error class=overloaded next=test/fb delay=0s",
				"attempt-start #2 test/fb delay=0s failover=true",
				"attempt-end #2 test/fb error class=overloaded next= delay=0s",
				"request-end test/fb attempts=2 failovers=1 err=true",
			},
		},
		{
			name:  "retry on the same model is no fail-over",
			errs:  []error{status(500)},
			rules: []Condition{OnStatus(500).Retry()},
			want: []string{
				"request-start do test/base",
				"attempt-start #1 test/base delay=0s failover=false",
				"attempt-end #1 test/base error class=server next=test/base delay=0s",
				"attempt-start #2 test/base delay=0s failover=false",
				"commit #2 test/base",
				"attempt-end #2 test/base success class=none next= delay=0s",
				"request-end test/base attempts=2 failovers=0 err=false",
			},
		},
		{
			name:  "disabled: one attempt, still observed",
			errs:  []error{status(503)},
			rules: []Condition{Fallback(fb)},
			opts:  []Option{WithDisabled(func() bool { return true })},
			want: []string{
				"request-start do test/base",
				"attempt-start #1 test/base delay=0s failover=false",
				"attempt-end #1 test/base error class=overloaded next= delay=0s",
				"request-end test/base attempts=1 failovers=0 err=true",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &recObserver{}
			clk := newClock()
			r := mustNew(t, base, append([]Option{clk.option(), WithObserver(o), WithRules(tt.rules...)}, tt.opts...)...)
			fn, _ := script(tt.errs...)
			var attemptTags []string
			_, _ = Do(t.Context(), r, func(ctx context.Context, c *Call) (string, error) {
				tag, _ := ctx.Value(obsKey{}).(string)
				attemptTags = append(attemptTags, tag)
				return fn(ctx, c)
			})
			o.check(t, tt.want...)
			for i, tag := range attemptTags {
				require.Equal(t, fmt.Sprintf("attempt %d", i+1), tag, "the attempt's ctx derives from AttemptStart's")
			}
		})
	}
}

func TestObserver_commitLatencyAndDeadline(t *testing.T) {
	o := &recObserver{}
	clk := newClock()
	r := mustNew(t, base, clk.option(), WithObserver(o), WithRules(Fallback(fb)))
	_, err := Do(t.Context(), r, func(ctx context.Context, c *Call) (string, error) {
		clk.advance(300 * time.Millisecond)
		if c.Number == 1 {
			return "", fmt.Errorf("slow: %w", &DeadlineError{Deadline: abi.DeadlineFirstContent, Limit: time.Second})
		}
		return "ok", nil
	})
	require.NoError(t, err)
	require.Len(t, o.ends, 2)
	require.Equal(t, abi.ClassTimeout, o.ends[0].Class)
	require.Equal(t, abi.DeadlineFirstContent, o.ends[0].Deadline)
	require.Equal(t, 300*time.Millisecond, o.ends[0].Duration)
	require.Len(t, o.commit, 1)
	require.Equal(t, 300*time.Millisecond, o.commit[0].Latency, "commit latency runs from the attempt's start")
	require.Equal(t, 600*time.Millisecond, o.commit[0].Elapsed)
}

func TestObserver_generateRecordsFinishAndUsage(t *testing.T) {
	o := &recObserver{}
	filtered := &Response{Finish: FinishReason{Unified: abi.ReasonContentFilter, Raw: "content_filter"}, Usage: Usage{InputTokens: 3},
		Meta: abi.ResponseMeta{ModelID: "a-2025-01-01"}}
	good := &Response{Finish: FinishReason{Unified: abi.ReasonStop, Raw: "stop"}, Usage: Usage{InputTokens: 5, OutputTokens: 7},
		Meta: abi.ResponseMeta{ModelID: "b-2025-02-02"}}
	a := &scriptModel{key: "p/a", genResp: []*Response{filtered}}
	b := &scriptModel{key: "p/b", genResp: []*Response{good}}
	r := mustNew(t, a, WithObserver(o), WithRules(OnFinish(abi.ReasonContentFilter).Switch(b)))
	_, err := r.Generate(t.Context(), &Request{})
	require.NoError(t, err)
	o.check(t,
		"request-start generate p/a",
		"attempt-start #1 p/a delay=0s failover=false",
		"attempt-end #1 p/a rejected class=none next=p/b delay=0s",
		"attempt-start #2 p/b delay=0s failover=true",
		"commit #2 p/b",
		"attempt-end #2 p/b success class=none next= delay=0s",
		"request-end p/b attempts=2 failovers=1 err=false",
	)
	require.Equal(t, abi.ReasonContentFilter, o.ends[0].Finish.Unified)
	require.Equal(t, good.Usage, o.ends[1].Usage)
	require.Equal(t, "stop", o.reqEnd[0].Finish.Raw)
	require.Equal(t, good.Usage, o.reqEnd[0].Usage)
	// The model that answered, as its provider named it: the rejected
	// attempt's answer is not the request's.
	require.Empty(t, o.ends[0].ResponseModel)
	require.Equal(t, "b-2025-02-02", o.ends[1].ResponseModel)
	require.Equal(t, "b-2025-02-02", o.reqEnd[0].ResponseModel)
}

func TestObserver_stream(t *testing.T) {
	withUsage := func(s []sstep) []sstep {
		last := &s[len(s)-1]
		last.part.Finish.Usage = Usage{InputTokens: 11, OutputTokens: 2}
		for i := range s {
			if s[i].part.Kind == abi.KindResponseMeta {
				s[i].part.Meta = &abi.ResponseMeta{ModelID: "b-2025-02-02"}
			}
		}
		return s
	}
	tests := []struct {
		name    string
		scripts [3][]sstep
		wantErr bool
		want    []string
	}{
		{
			name:    "fails over before content, then answers",
			scripts: [3][]sstep{sscript(preamble(), pErr(errBoom)), withUsage(answer("from b")), answer("never")},
			want: []string{
				"request-start stream p/a",
				"attempt-start #1 p/a delay=0s failover=false",
				"attempt-end #1 p/a error class=overloaded next=p/b delay=0s",
				"attempt-start #2 p/b delay=0s failover=true",
				"commit #2 p/b",
				"attempt-end #2 p/b success class=none next= delay=0s",
				"request-end p/b attempts=2 failovers=1 err=false",
			},
		},
		{
			name:    "fails after commit: truncated, nothing re-runs",
			scripts: [3][]sstep{sscript(preamble(), pText("Hel"), pErr(errBoom)), answer("never"), answer("never")},
			wantErr: true,
			want: []string{
				"request-start stream p/a",
				"attempt-start #1 p/a delay=0s failover=false",
				"commit #1 p/a",
				"attempt-end #1 p/a truncated class=overloaded next= delay=0s",
				"request-end p/a attempts=1 failovers=0 err=true",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &recObserver{}
			h := newHarness(t, tt.scripts, fallbacks, []Option{WithObserver(o)})
			s, err := h.rm.Stream(t.Context(), &Request{})
			require.NoError(t, err)
			_, err = drain(s)
			require.Equal(t, tt.wantErr, err != nil, "stream error: %v", err)
			o.check(t, tt.want...)
			if !tt.wantErr {
				require.Equal(t, Usage{InputTokens: 11, OutputTokens: 2}, o.reqEnd[0].Usage, "usage from the finish part")
				require.Equal(t, abi.ReasonStop, o.reqEnd[0].Finish.Unified)
				require.Equal(t, "b-2025-02-02", o.reqEnd[0].ResponseModel, "the model from the metadata part")
				require.Equal(t, "b-2025-02-02", o.ends[len(o.ends)-1].ResponseModel)
			} else {
				require.Empty(t, o.reqEnd[0].ResponseModel)
			}
		})
	}
}

func TestObserver_streamClosedByCaller(t *testing.T) {
	o := &recObserver{}
	h := newHarness(t, [3][]sstep{answer("a", "b", "c"), nil, nil}, fallbacks, []Option{WithObserver(o)})
	s, err := h.rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	o.check(t,
		"request-start stream p/a",
		"attempt-start #1 p/a delay=0s failover=false",
		"commit #1 p/a",
		"attempt-end #1 p/a truncated class=unknown next= delay=0s",
		"request-end p/a attempts=1 failovers=0 err=true",
	)
	require.ErrorIs(t, o.reqEnd[0].Err, ErrStreamClosed)
}

func TestWithObserver(t *testing.T) {
	_, err := New(base, WithObserver(nil))
	require.Error(t, err, "a nil observer is a construction error")

	a, b := &recObserver{}, &recObserver{}
	r := mustNew(t, base, WithObserver(a), WithObserver(b))
	_, err = Do(t.Context(), r, func(context.Context, *Call) (string, error) { return "ok", nil })
	require.NoError(t, err)
	require.Len(t, a.events, 5, "every observer sees every event")
	require.Equal(t, a.events, b.events)
}

func TestSlogObserver(t *testing.T) {
	const prompt, output = "SECRET PROMPT", "SECRET OUTPUT"
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	clk := newClock()
	r := mustNew(t, base, clk.option(), WithObserver(SlogObserver(l)),
		WithRules(OnStatus(429).Switch(fb).UseRetryAfter()))
	_, err := Do(t.Context(), r, func(ctx context.Context, c *Call) (string, error) {
		_ = c.Request(&Request{System: prompt})
		if c.Number == 1 {
			return "", statusRetryAfter(429, "retry-after-ms", "40")
		}
		return output, nil
	})
	require.NoError(t, err)

	var recs []map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		recs = append(recs, m)
	}
	var msgs []string
	for _, m := range recs {
		msgs = append(msgs, m["msg"].(string))
	}
	require.Equal(t, []string{
		"retryhost: request start", "retryhost: attempt start", "retryhost: attempt end",
		"retryhost: attempt start", "retryhost: commit", "retryhost: attempt end", "retryhost: request end",
	}, msgs)
	failed := recs[2]
	require.Equal(t, "INFO", failed["level"])
	require.Equal(t, "error", failed["outcome"])
	require.Equal(t, "rate-limit", failed["class"])
	require.Equal(t, "test/fb", failed["next_model"])
	require.EqualValues(t, 40*time.Millisecond, failed["delay"])
	require.EqualValues(t, 429, failed["status"])
	end := recs[6]
	require.Equal(t, "INFO", end["level"])
	require.EqualValues(t, 2, end["attempts"])
	require.EqualValues(t, 1, end["fail_overs"])
	require.NotContains(t, buf.String(), prompt)
	require.NotContains(t, buf.String(), output)

	buf.Reset()
	info := slog.New(slog.NewJSONHandler(&buf, nil))
	r = mustNew(t, base, WithObserver(SlogObserver(info)))
	_, err = Do(t.Context(), r, func(context.Context, *Call) (string, error) { return "", status(400) })
	require.Error(t, err)
	require.Contains(t, buf.String(), `"level":"WARN","msg":"retryhost: request end"`)
	require.Contains(t, buf.String(), `"class":"client"`)
	require.NotContains(t, buf.String(), "Bad Request", "no error message")
	require.NotContains(t, buf.String(), "attempt start", "Debug events are not logged at Info")

	buf.Reset()
	r = mustNew(t, base, WithObserver(SlogObserver(info)), WithRules(Fallback(fb)))
	_, err = Do(t.Context(), r, func(context.Context, *Call) (string, error) {
		return "", &RefusalError{Transform: "refusal", Phrase: "i'm sorry", Text: output}
	})
	require.Error(t, err)
	require.Contains(t, buf.String(), `"class":"refusal"`)
	require.NotContains(t, buf.String(), output, "a refusal's text is model output: never logged")
}

// TestObserver_unsetAllocatesNothing guards the promise that telemetry
// costs nothing when no observer is installed.
func TestObserver_unsetAllocatesNothing(t *testing.T) {
	r := mustNew(t, base)
	ctx := t.Context()
	fn := func(context.Context, *Call) (int, error) { return 1, nil }
	allocs := testing.AllocsPerRun(100, func() { _, _ = Do(ctx, r, fn) })
	require.LessOrEqual(t, allocs, 1.0, "the reused *Call is the only allocation")
}

// nopObserver is the cheapest observer: what the hooks cost when set.
type nopObserver struct{}

func (nopObserver) RequestStart(ctx context.Context, _ RequestEvent) context.Context { return ctx }
func (nopObserver) AttemptStart(ctx context.Context, _ AttemptEvent) context.Context { return ctx }
func (nopObserver) AttemptEnd(context.Context, AttemptEndEvent)                      {}
func (nopObserver) Commit(context.Context, CommitEvent)                              {}
func (nopObserver) RequestEnd(context.Context, RequestEndEvent)                      {}

// BenchmarkObserver compares a request without an observer, with a no-op
// one, and with SlogObserver on a discarding logger, for Do and for a
// 1,000-part stream.
func BenchmarkObserver(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"unset", nil},
		{"nop", []Option{WithObserver(nopObserver{})}},
		{"slog-discard", []Option{WithObserver(SlogObserver(slog.New(slog.DiscardHandler)))}},
	} {
		b.Run("do/"+tc.name, func(b *testing.B) {
			r := mustNew(b, base, tc.opts...)
			ctx := context.Background()
			fn := func(context.Context, *Call) (int, error) { return 1, nil }
			b.ReportAllocs()
			for b.Loop() {
				_, _ = Do(ctx, r, fn)
			}
		})
		b.Run("stream/"+tc.name, func(b *testing.B) {
			const n = 1000
			r := mustNew(b, &benchModel{parts: benchParts()}, tc.opts...)
			rm, err := NewRetryableModel(r)
			require.NoError(b, err)
			req := &Request{}
			b.ReportAllocs()
			for b.Loop() {
				s, err := rm.Stream(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				if drainBench(b, s) != n {
					b.Fatal("lost parts")
				}
			}
			reportPerPart(b, n)
		})
	}
}
