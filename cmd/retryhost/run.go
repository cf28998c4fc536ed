package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
)

func init() {
	register(command{
		name:    "run",
		usage:   "run --policy FILE [--call] [--system TEXT] [--json] PROMPT…",
		summary: "send one request under a policy file (real providers: keys from the environment); the answer on stdout, the attempts on stderr",
		run:     runRun,
	})
}

// runStdin is where run reads a prompt of "-"; tests replace it.
var runStdin io.Reader = os.Stdin

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("policy", "", "the policy file (JSON; see policy/testdata/example.json)")
	call := fs.Bool("call", false, "a non-streaming call instead of a stream")
	system := fs.String("system", "", "a system prompt")
	asJSON := fs.Bool("json", false, "print one JSON event per line on stdout instead")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	prompt := strings.Join(fs.Args(), " ")
	if *file == "" || prompt == "" {
		fmt.Fprintln(stderr, "usage: retryhost "+commands["run"].usage)
		fmt.Fprintln(stderr, "(a PROMPT of - reads it from stdin)")
		return exitUsage
	}
	if prompt == "-" {
		b, err := io.ReadAll(runStdin)
		if err != nil {
			fmt.Fprintf(stderr, "retryhost run: reading the prompt: %v\n", err)
			return exitFail
		}
		prompt = strings.TrimSpace(string(b))
	}

	var out runOutput = &runPlain{out: stdout, log: stderr}
	if *asJSON {
		out = &runJSON{enc: json.NewEncoder(stdout)}
	}
	var mu sync.Mutex // the callbacks run on the driver's goroutines
	pol, err := policy.Load(ctx, *file, policy.Options{
		Builtin:       plugins.Module,
		OCI:           policyOCI(),
		RunnerOptions: reportAttempts(&mu, out),
		StreamOptions: []driver.StreamOption{driver.WithOnCommit(func(_ context.Context, c driver.CommitInfo) {
			mu.Lock()
			defer mu.Unlock()
			out.committed(c.Model.Key(), c.Number, c.Elapsed)
		})},
		HostOptions: demoHostOptions(),
	})
	if err != nil {
		fmt.Fprintf(stderr, "retryhost run: %v\n", err)
		if ctx.Err() != nil { // interrupted while loading (plugin loads honour ctx)
			return exitFail
		}
		return exitUsage
	}
	defer func() { _ = pol.Close(context.Background()) }()

	req := &driver.Request{System: *system, Messages: []driver.Message{
		{Role: driver.RoleUser, Content: []driver.Content{{Text: prompt}}},
	}}
	start := time.Now()
	var sum runSummary
	if *call {
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
	if err != nil {
		out.fail(err)
		return exitFail
	}
	sum.elapsed = time.Since(start)
	out.done(sum)
	return exitOK
}

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
	fail(err error)
}

// runPlain writes the answer to out (so it pipes) and everything else to log.
type runPlain struct {
	out, log io.Writer
	wrote    bool
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

func (o *runPlain) fail(err error) {
	if o.wrote {
		fmt.Fprintln(o.out)
	}
	fmt.Fprintf(o.log, "retryhost run: %v\n", err)
}

// runJSON writes one event per line, the demo's events.
type runJSON struct{ enc *json.Encoder }

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

func (o *runJSON) fail(err error) {
	_ = o.enc.Encode(jsonEvent{Event: "error", Why: err.Error()})
}
