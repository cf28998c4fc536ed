package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/provider/openai"
)

func init() {
	register(&command{
		name:    "demo",
		summary: "fail a streamed request over 3 loopback providers (refusal, 429, answer); no key, no network",
		help: "Runs the library's main job end to end on three loopback OpenAI-compatible providers (one " +
			"refuses in plain text, one is rate-limited with Retry-After, one answers) through the real " +
			"OpenAI adapter, the built-in Wasm refusal transform and errmatch condition: each attempt is " +
			"printed (model, outcome, why, timing) and the answer streams. No key, no network.\n\n" +
			"The first run compiles the built-in plugins and caches the result (see --cache-dir).",
		setup: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, "print one JSON event per line")
			return func(ctx context.Context, e *env, args []string) int {
				if len(args) != 0 {
					return e.usageError(commands["demo"], "unexpected argument %q", args[0])
				}
				var out demoOutput = &plainOutput{w: e.stdout, t: termFor(e.stdout)}
				if *asJSON {
					out = &jsonOutput{enc: json.NewEncoder(e.stdout)}
				}
				if err := demo(ctx, out, e.log, e.hostOptions(ctx)...); err != nil {
					if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
						err = cause
					}
					return e.errorf(exitFail, "%v", err)
				}
				return exitOK
			}
		},
	})
}

// The demo's question and the providers it runs against.
const demoQuestion = "What is the capital of France?"

// demoRetryAfter is what the rate-limited provider asks to wait.
const demoRetryAfter = 250 * time.Millisecond

func demoProviders() []*fakeProvider {
	return []*fakeProvider{
		{name: "alpha", model: "gpt-4o", gap: 5 * time.Millisecond,
			chunks: []string{"I'm sorry", ", but I can't", " help with", " that."}},
		{name: "beta", model: "gpt-4o-mini", status: http.StatusTooManyRequests,
			header: http.Header{
				"Retry-After":    {"1"},
				"Retry-After-Ms": {fmt.Sprint(demoRetryAfter.Milliseconds())},
			},
			message: "Rate limit reached for gpt-4o-mini: 3 requests per min. Please try again in 250ms."},
		{name: "gamma", model: "llama-3.3-70b", gap: 40 * time.Millisecond,
			chunks: []string{"The capital", " of France", " is Paris,", " on the", " Seine."}},
	}
}

// demo runs the main job of the README end to end: real HTTP, the real OpenAI
// adapter, the stream driver with a refusal transform and retry/switch
// rules.
//
// log receives the driver's events; opts configure the Wasm host (its
// logger, a compilation cache).
func demo(ctx context.Context, out demoOutput, log *slog.Logger, opts ...host.Option) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	provs := demoProviders()
	models := make([]driver.Model, len(provs))
	for i, p := range provs {
		srv := p.start()
		defer srv.Close()
		m, err := openai.New(p.model,
			openai.WithBaseURL(srv.URL+"/v1"),
			openai.WithAPIKey("demo-needs-no-key"),
			openai.WithProvider(p.name),
			openai.WithHTTPClient(srv.Client()))
		if err != nil {
			return err
		}
		models[i] = m
	}
	alpha, beta, gamma := models[0], models[1], models[2]

	out.loading()
	pol, err := newDemoPolicy(ctx, beta, gamma, opts...)
	if err != nil {
		return err
	}
	defer pol.close(context.Background())

	out.intro(models, pol.describe)
	start := time.Now()
	var mu sync.Mutex // the callbacks and the reader share out
	r, err := driver.New(alpha, append(reportAttempts(&mu, out),
		driver.WithLogger(log), driver.WithObserver(driver.SlogObserver(log)),
		driver.WithModels(beta, gamma),
		driver.WithRules(pol.rules...))...)
	if err != nil {
		return err
	}
	var committed driver.CommitInfo
	rm, err := driver.NewRetryableModel(r,
		driver.WithTransforms(pol.transforms...),
		driver.WithOnCommit(func(_ context.Context, c driver.CommitInfo) {
			mu.Lock()
			defer mu.Unlock()
			committed = c
			out.committed(c)
		}))
	if err != nil {
		return err
	}
	s, err := rm.Stream(ctx, &driver.Request{Messages: []driver.Message{
		{Role: driver.RoleUser, Content: []driver.Content{{Text: demoQuestion}}},
	}})
	if err != nil {
		return err
	}
	defer s.Close()
	var text strings.Builder
	finish := abi.FinishReason{}
	for {
		p, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		switch p.Kind {
		case abi.KindTextDelta:
			text.WriteString(p.Delta)
			mu.Lock()
			out.delta(p.Delta)
			mu.Unlock()
		case abi.KindFinish:
			finish = p.Finish.Reason
		}
	}
	mu.Lock()
	defer mu.Unlock()
	out.done(demoSummary{Model: committed.Model.Key(), Attempts: committed.Number, Failed: len(committed.Failed),
		Finish: finish.Unified.String(), Text: text.String(), Elapsed: time.Since(start)})
	return nil
}

// demoPolicy is what the demo runs on the stream: the transforms and the
// rules, and how to say so.
type demoPolicy struct {
	transforms []abi.Transformer
	rules      []driver.Condition
	describe   []string
	close      func(context.Context)
}

// newDemoPolicy loads the built-in Wasm plugins: the refusal transform,
// and the errmatch condition with the demo's rules: a refusal switches to
// beta; a rate limit on beta's first attempt retries it after its
// Retry-After; a rate limit after that switches to gamma.
func newDemoPolicy(ctx context.Context, beta, gamma driver.Model, opts ...host.Option) (*demoPolicy, error) {
	rt, err := host.New(ctx, opts...)
	if err != nil {
		return nil, err
	}
	// One request at a time: one warm instance each is enough.
	refusal, err := rt.Load(ctx, "refusal", plugins.Refusal, host.WithConfig([]byte(`{"fail": "open"}`)), host.WithInstances(1))
	if err != nil {
		_ = rt.Close(ctx)
		return nil, err
	}
	rules := fmt.Sprintf(`{"rules": [
		{"class": ["refusal"], "switch": {"model": %q}},
		{"status": [429], "max_attempt": 2, "retry": {"max_attempts": 2, "retry_after": true}},
		{"status": [429], "switch": {"model": %q}}
	]}`, beta.Key(), gamma.Key())
	errmatch, err := rt.Load(ctx, "errmatch", plugins.ErrMatch, host.WithConfig([]byte(rules)), host.WithInstances(1))
	if err != nil {
		_ = rt.Close(ctx)
		return nil, err
	}
	return &demoPolicy{
		transforms: []abi.Transformer{refusal},
		rules:      []driver.Condition{errmatch},
		describe: []string{
			"transform  refusal (built-in Wasm plugin): fails an attempt whose text starts with a refusal",
			"condition  errmatch (built-in Wasm plugin), first matching rule decides:",
			"             class refusal → switch to " + beta.Key(),
			"             HTTP 429 on attempt ≤ 2 → retry the same model after its Retry-After",
			"             HTTP 429 → switch to " + gamma.Key(),
		},
		close: func(ctx context.Context) { _ = rt.Close(ctx) },
	}, nil
}

// demoSummary is the demo's outcome.
type demoSummary struct {
	Model            string
	Attempts, Failed int
	Finish, Text     string
	Elapsed          time.Duration
}

// demoOutput renders the demo's events, as text or as JSON lines.
type demoOutput interface {
	loading()
	intro(models []driver.Model, policy []string)
	failed(a *driver.Attempt)
	next(model string, waited time.Duration)
	committed(c driver.CommitInfo)
	delta(s string)
	done(s demoSummary)
}

// attemptReporter is told of each failed attempt and what comes next.
type attemptReporter interface {
	failed(a *driver.Attempt)
	next(model string, delay time.Duration)
}

// reportAttempts returns the driver callbacks that tell r, under mu (the
// callbacks run on the driver's goroutines, beside the caller's reads).
func reportAttempts(mu *sync.Mutex, r attemptReporter) []driver.Option {
	return []driver.Option{
		driver.WithOnError(func(_ context.Context, a *driver.Attempt) {
			mu.Lock()
			defer mu.Unlock()
			r.failed(a)
		}),
		driver.WithOnRetry(func(_ context.Context, in driver.RetryInfo) *driver.Overrides {
			mu.Lock()
			defer mu.Unlock()
			r.next(in.Next.Key(), in.Delay)
			return nil
		}),
	}
}

// why says in one line why an attempt failed.
func why(a *driver.Attempt) string {
	var re *abi.RefusalError
	switch {
	case errors.As(a.Err, &re):
		return fmt.Sprintf("the text %q matched the refusal phrase %q", re.Text, re.Phrase)
	case a.Status != 0:
		s := fmt.Sprintf("HTTP %d", a.Status)
		if a.RetryAfter >= 0 {
			s += fmt.Sprintf(", Retry-After %v", a.RetryAfter)
		}
		return s
	}
	return a.Message
}

type plainOutput struct {
	w         io.Writer
	t         term
	waiting   bool // a "waiting…" progress line is on screen (terminal only)
	answering bool
}

func (o *plainOutput) loading() {
	if o.t.tty {
		fmt.Fprint(o.w, o.t.paint(ansiDim, "compiling the built-in Wasm plugins…"))
		o.waiting = true
	}
}

func (o *plainOutput) intro(models []driver.Model, policy []string) {
	o.clearProgress()
	t := o.t
	fmt.Fprintln(o.w, t.paint(ansiBold, "retryhost demo")+": 3 OpenAI-compatible providers on loopback, the real openai adapter, no key")
	roles := []string{"refuses in plain text", fmt.Sprintf("rate-limited: HTTP 429, Retry-After %v", demoRetryAfter), "answers"}
	for i, m := range models {
		fmt.Fprintf(o.w, "  provider   %-20s %s\n", m.Key(), roles[i])
	}
	for _, p := range policy {
		fmt.Fprintf(o.w, "  %s\n", p)
	}
	fmt.Fprintf(o.w, "request: %q (streamed)\n\n", demoQuestion)
}

func (o *plainOutput) clearProgress() {
	if o.waiting {
		fmt.Fprint(o.w, "\r\x1b[K")
		o.waiting = false
	}
}

func (o *plainOutput) failed(a *driver.Attempt) {
	o.clearProgress()
	fmt.Fprintf(o.w, "attempt %d  %-20s %s  %s  (%v)\n", a.Number, a.Model,
		o.t.paint(ansiRed, fmt.Sprintf("%-10s", a.Class)), why(a), a.Duration.Round(time.Millisecond))
	if o.t.tty && a.RetryAfter > 0 {
		fmt.Fprint(o.w, o.t.paint(ansiDim, fmt.Sprintf("           the server asked to wait %v…", a.RetryAfter)))
		o.waiting = true
	}
}

func (o *plainOutput) next(model string, waited time.Duration) {
	o.clearProgress()
	fmt.Fprintf(o.w, "           → next: %s, after waiting %v\n", model, waited.Round(time.Millisecond))
}

func (o *plainOutput) committed(c driver.CommitInfo) {
	o.clearProgress()
	fmt.Fprintf(o.w, "attempt %d  %-20s %s  first content reached the caller  (%v since the request)\n",
		c.Number, c.Model.Key(), o.t.paint(ansiGreen, fmt.Sprintf("%-10s", "committed")), c.Elapsed.Round(time.Millisecond))
}

func (o *plainOutput) delta(s string) {
	if !o.answering {
		fmt.Fprint(o.w, "\nanswer: ")
		o.answering = true
	}
	fmt.Fprint(o.w, o.t.paint(ansiCyan, s))
}

func (o *plainOutput) done(s demoSummary) {
	if o.answering {
		fmt.Fprintln(o.w)
	}
	fmt.Fprintf(o.w, "done: answered by %s, finish %s, %d attempts (%d failed), %v\n",
		s.Model, s.Finish, s.Attempts, s.Failed, s.Elapsed.Round(time.Millisecond))
}

// jsonOutput writes one event object per line.
type jsonOutput struct{ enc *json.Encoder }

type jsonEvent struct {
	Event      string   `json:"event"` // "provider", "attempt", "next", "commit", "text", "done"
	Number     int      `json:"number,omitempty"`
	Model      string   `json:"model,omitempty"`
	Outcome    string   `json:"outcome,omitempty"` // the error class, or "committed"
	Why        string   `json:"why,omitempty"`
	Status     int      `json:"status,omitempty"`
	Role       string   `json:"role,omitempty"`
	DurationMS *float64 `json:"duration_ms,omitempty"`
	Text       string   `json:"text,omitempty"`
	Attempts   int      `json:"attempts,omitempty"` // done only
	Failed     int      `json:"failed,omitempty"`
	Finish     string   `json:"finish,omitempty"`
}

func ms(d time.Duration) *float64 {
	f := float64(d.Microseconds()) / 1000
	return &f
}

func (o *jsonOutput) loading() {}

func (o *jsonOutput) intro(models []driver.Model, _ []string) {
	roles := []string{"refuses", "rate-limited", "answers"}
	for i, m := range models {
		_ = o.enc.Encode(jsonEvent{Event: "provider", Model: m.Key(), Role: roles[i]})
	}
}

func (o *jsonOutput) failed(a *driver.Attempt) {
	_ = o.enc.Encode(jsonEvent{Event: "attempt", Number: a.Number, Model: a.Model, Outcome: a.Class.String(),
		Why: why(a), Status: a.Status, DurationMS: ms(a.Duration)})
}

func (o *jsonOutput) next(model string, waited time.Duration) {
	_ = o.enc.Encode(jsonEvent{Event: "next", Model: model, DurationMS: ms(waited)})
}

func (o *jsonOutput) committed(c driver.CommitInfo) {
	_ = o.enc.Encode(jsonEvent{Event: "attempt", Number: c.Number, Model: c.Model.Key(), Outcome: "committed",
		DurationMS: ms(c.Elapsed)})
}

func (o *jsonOutput) delta(s string) { _ = o.enc.Encode(jsonEvent{Event: "text", Text: s}) }

func (o *jsonOutput) done(s demoSummary) {
	_ = o.enc.Encode(jsonEvent{Event: "done", Model: s.Model, Text: s.Text, Attempts: s.Attempts, Failed: s.Failed,
		Finish: s.Finish, DurationMS: ms(s.Elapsed)})
}
