package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
)

func init() {
	register(&command{
		name:    "run",
		args:    "PROMPT...",
		summary: "send one request under a policy file (real providers: keys from the environment); the answer on stdout, the attempts on stderr",
		help: "Sends one request (streamed, or --call) under a policy file, with the built-in plugins " +
			"available by name and API keys read from the environment variables the file names. The " +
			"answer streams to stdout (so it pipes); each failed attempt, fail-over and the commit go to " +
			"stderr.\n\n" +
			"A PROMPT of - reads the prompt from stdin (at most 8 MiB; empty is an error).\n\n" +
			"Exit 0 with an answer, 1 when the request failed after its attempts, 3 for a policy mistake " +
			"or an unreadable input, 130/143 when SIGINT/SIGTERM stopped it (with a summary of the " +
			"attempts so far).",
		setup: func(fs *flag.FlagSet) runFunc {
			o := &runOpts{}
			fs.StringVar(&o.file, "policy", "", "the policy `FILE` (JSON or YAML; see policy/testdata/example.json); required")
			fs.BoolVar(&o.call, "call", false, "a non-streaming call instead of a stream")
			fs.StringVar(&o.system, "system", "", "a system prompt (`TEXT`)")
			fs.BoolVar(&o.json, "json", false, "print one JSON event per line on stdout instead")
			o.registry.declarePolicy(fs)
			return o.run
		},
	})
}

type runOpts struct {
	file, system string
	call, json   bool
	registry     registryFlags
}

func (o *runOpts) run(ctx context.Context, e *env, args []string) int {
	prompt := strings.Join(args, " ")
	switch {
	case o.file == "":
		return e.usageError(commands["run"], "missing --policy FILE")
	case prompt == "":
		return e.usageError(commands["run"], "missing the PROMPT (- reads it from stdin)")
	}
	if prompt == "-" {
		p, err := readStdin(e.stdin)
		if err != nil {
			return e.errorf(exitInput, "the prompt on stdin: %v", err)
		}
		prompt = p
	}

	t := &tally{}
	var out runOutput = &runPlain{out: e.stdout, log: e.stderr, tally: t}
	if o.json {
		out = &runJSON{enc: json.NewEncoder(e.stdout), tally: t}
	}
	var mu sync.Mutex // the callbacks run on the driver's goroutines
	pol, err := policy.Load(ctx, o.file, policy.Options{
		Builtin: plugins.Module,
		OCI:     o.registry.policyOCI(e),
		Logger:  e.log,
		RunnerOptions: append(reportAttempts(&mu, out),
			driver.WithObserver(t), driver.WithObserver(driver.SlogObserver(e.log))),
		StreamOptions: []driver.StreamOption{driver.WithOnCommit(func(_ context.Context, c driver.CommitInfo) {
			mu.Lock()
			defer mu.Unlock()
			out.committed(c.Model.Key(), c.Number, c.Elapsed)
		})},
		HostOptions: e.hostOptions(ctx),
	})
	if err != nil {
		if ctx.Err() != nil { // interrupted while loading (plugin loads honour ctx)
			return e.errorf(exitFail, "%v", context.Cause(ctx))
		}
		return e.errorf(exitInput, "%v", err)
	}
	defer func() { _ = pol.Close(context.Background()) }()

	req := &driver.Request{System: o.system, Messages: []driver.Message{
		{Role: driver.RoleUser, Content: []driver.Content{{Text: prompt}}},
	}}
	start := time.Now()
	var sum runSummary
	if o.call {
		sum, err = runCall(ctx, pol, req)
		if err == nil {
			mu.Lock()
			out.delta(sum.text)
			mu.Unlock()
		}
	} else {
		sum, err = runStream(ctx, pol, req, func(s string) {
			mu.Lock()
			defer mu.Unlock()
			out.delta(s)
		})
	}
	mu.Lock()
	defer mu.Unlock()
	sum.elapsed = time.Since(start)
	if err != nil {
		if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil {
			err = cause // "interrupted by SIGTERM" rather than "context canceled"
		}
		out.fail(err, sum.elapsed)
		return exitFail
	}
	out.done(sum)
	return exitOK
}

// readStdin reads a prompt from r: at most maxStdin bytes, not empty.
func readStdin(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxStdin+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxStdin {
		return "", fmt.Errorf("more than the %d MiB limit", maxStdin>>20)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", errors.New("empty")
	}
	return s, nil
}

// tally counts a run's attempts as the driver starts and ends them, for
// the summary of a run that fails or is interrupted (the attempt in flight
// included). It is a driver.Observer.
type tally struct {
	mu                 sync.Mutex
	nAttempts, nFailed int
	lastModel          string
}

func (t *tally) counts() (attempts, failed int, last string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nAttempts, t.nFailed, t.lastModel
}

func (t *tally) RequestStart(ctx context.Context, _ driver.RequestEvent) context.Context { return ctx }

func (t *tally) AttemptStart(ctx context.Context, e driver.AttemptEvent) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nAttempts++
	t.lastModel = e.Model.Key()
	return ctx
}

func (t *tally) AttemptEnd(_ context.Context, e driver.AttemptEndEvent) {
	if e.Outcome == driver.AttemptFailed || e.Outcome == driver.AttemptRejected {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.nFailed++
	}
}

func (t *tally) Commit(context.Context, driver.CommitEvent)         {}
func (t *tally) RequestEnd(context.Context, driver.RequestEndEvent) {}

type runSummary struct {
	text, finish string
	model        string
	attempts     int
	elapsed      time.Duration
}

func runCall(ctx context.Context, pol *policy.Policy, req *driver.Request) (runSummary, error) {
	var sum runSummary
	res, err := pol.Model.Generate(ctx, req) // the policy's transforms apply to a whole answer too
	if err != nil {
		return sum, err
	}
	sum.text, sum.finish, sum.model = res.Text(), res.Finish.Unified.String(), res.Meta.ModelID
	return sum, nil
}

func runStream(ctx context.Context, pol *policy.Policy, req *driver.Request, delta func(string)) (runSummary, error) {
	var sum runSummary
	s, err := pol.Model.Stream(ctx, req)
	if err != nil {
		return sum, err
	}
	defer s.Close()
	var text strings.Builder
	for {
		p, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sum, err
		}
		switch p.Kind {
		case abi.KindTextDelta:
			text.WriteString(p.Delta)
			delta(p.Delta)
		case abi.KindResponseMeta:
			if p.Meta != nil {
				sum.model = p.Meta.ModelID
			}
		case abi.KindFinish:
			sum.finish = p.Finish.Reason.Unified.String()
		}
	}
	sum.text = text.String()
	return sum, nil
}

// runOutput is how run reports: the answer and the attempts.
type runOutput interface {
	failed(a *driver.Attempt)
	next(model string, delay time.Duration)
	committed(model string, number int, elapsed time.Duration)
	delta(s string)
	done(s runSummary)
	fail(err error, elapsed time.Duration)
}

// runPlain writes the answer to out (so it pipes) and everything else to log.
type runPlain struct {
	out, log io.Writer
	wrote    bool
	*tally
}

func (o *runPlain) failed(a *driver.Attempt) {
	fmt.Fprintf(o.log, "attempt %d on %s failed: %s: %s (%v)\n", a.Number, a.Model, a.Class, why(a), a.Duration.Round(time.Millisecond))
}

func (o *runPlain) next(model string, delay time.Duration) {
	fmt.Fprintf(o.log, "  → %s after %v\n", model, delay.Round(time.Millisecond))
}

func (o *runPlain) committed(model string, number int, elapsed time.Duration) {
	fmt.Fprintf(o.log, "attempt %d on %s committed after %v\n", number, model, elapsed.Round(time.Millisecond))
}

func (o *runPlain) delta(s string) {
	o.wrote = o.wrote || s != ""
	fmt.Fprint(o.out, s)
}

func (o *runPlain) done(s runSummary) {
	if o.wrote {
		fmt.Fprintln(o.out)
	}
	fmt.Fprintf(o.log, "done: finish %s, %v\n", s.finish, s.elapsed.Round(time.Millisecond))
}

func (o *runPlain) fail(err error, elapsed time.Duration) {
	if o.wrote {
		fmt.Fprintln(o.out)
	}
	fmt.Fprintf(o.log, "retryhost run: %v\n", err)
	n, failed, last := o.counts()
	if last != "" {
		last = ", the last on " + last
	}
	fmt.Fprintf(o.log, "stopped after %d attempt(s) (%d failed%s), %v\n", n, failed, last, elapsed.Round(time.Millisecond))
}

// runJSON writes one event per line, the demo's events.
type runJSON struct {
	enc *json.Encoder
	*tally
}

func (o *runJSON) failed(a *driver.Attempt) {
	_ = o.enc.Encode(jsonEvent{Event: "attempt", Number: a.Number, Model: a.Model, Outcome: a.Class.String(),
		Why: why(a), Status: a.Status, DurationMS: ms(a.Duration)})
}

func (o *runJSON) next(model string, delay time.Duration) {
	_ = o.enc.Encode(jsonEvent{Event: "next", Model: model, DurationMS: ms(delay)})
}

func (o *runJSON) committed(model string, number int, elapsed time.Duration) {
	_ = o.enc.Encode(jsonEvent{Event: "attempt", Number: number, Model: model, Outcome: "committed", DurationMS: ms(elapsed)})
}

func (o *runJSON) delta(s string) { _ = o.enc.Encode(jsonEvent{Event: "text", Text: s}) }

func (o *runJSON) done(s runSummary) {
	_ = o.enc.Encode(jsonEvent{Event: "done", Model: s.model, Finish: s.finish, DurationMS: ms(s.elapsed)})
}

func (o *runJSON) fail(err error, elapsed time.Duration) {
	n, failed, last := o.counts()
	_ = o.enc.Encode(jsonEvent{Event: "error", Why: err.Error(), Model: last, Attempts: n, Failed: failed,
		DurationMS: ms(elapsed)})
}
