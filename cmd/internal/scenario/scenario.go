// Package scenario runs scenario files: a policy (the policy file's schema,
// inline), a scripted provider per model, what the caller does, and the
// outcome each request must have. Run plays one and reports the actual
// outcome; Diff compares it with the expectation. The format is documented
// in testdata/scenarios/README.md.
package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/internal/leaf/filecap"
	"github.com/retryhost/retryhost/internal/leaf/strict"
	"github.com/retryhost/retryhost/internal/link/policyhook"
	"github.com/retryhost/retryhost/policy"
)

// Duration is a Go duration string ("5ms").
type Duration = strict.Duration

// Scenario is one scenario file.
type Scenario struct {
	Description string `json:"description"`
	// Policy is the policy under test (the policy file's schema). Its
	// scripted models are bound to Scripts.
	Policy policy.File `json:"policy"`
	// Scripts holds each scripted model's attempts, by model name.
	Scripts map[string]*ModelScript `json:"scripts"`
	// LoadError, when set, says the policy must fail to load with an error
	// containing this text; no request runs.
	LoadError string `json:"load_error"`
	// Requests run in order on the same policy (sticky state carries over).
	Requests []Request `json:"requests"`
}

// ModelScript is what a scripted model does on each of its attempts.
type ModelScript struct {
	// Attempts[n] is played by the model's n-th stream in the scenario.
	Attempts []AttemptScript `json:"attempts"`
	// Chaos replaces Attempts with seeded random failures.
	Chaos *Chaos `json:"chaos"`
}

// Chaos is a provider that fails at seeded random points: each attempt
// streams Text in Chunks pieces, and with probability FailRate fails: half
// of the failures are a 503 before the first chunk, half a cut after a
// random chunk (1..Chunks).
type Chaos struct {
	Seed     uint64  `json:"seed"`
	Text     string  `json:"text"`
	Chunks   int     `json:"chunks"`
	FailRate float64 `json:"fail_rate"`
}

// AttemptScript is one attempt: an error when the stream is opened, or the
// steps its stream plays. The stream always starts with stream-start and
// response-metadata parts; a text-start precedes the first text, and a
// text-end and a finish ("stop") close a script that ends without a
// terminal step.
type AttemptScript struct {
	OpenError *ErrorSpec `json:"open_error"`
	Steps     []Step     `json:"steps"`
}

// Step is one step of a script: exactly one of its action fields.
type Step struct {
	Text      *string    `json:"text"`       // a text delta ("" is a heartbeat)
	Part      string     `json:"part"`       // a part by kind ("reasoning-delta", "tool-call", "source", "file", …)
	Delta     string     `json:"delta"`      // with part: its delta, tool input, URL or file data
	Name      string     `json:"name"`       // with part: a tool's name
	Delay     *Duration  `json:"delay"`      // wait, then go on
	Stall     bool       `json:"stall"`      // block until the attempt is canceled
	Cut       bool       `json:"cut"`        // the connection drops (network error)
	Error     *ErrorSpec `json:"error"`      // Recv fails with a provider error
	ErrorPart *ErrorSpec `json:"error_part"` // an error part in the stream
	Finish    string     `json:"finish"`     // a finish part with this reason, then the end
}

// ErrorSpec is a provider error.
type ErrorSpec struct {
	Status    int               `json:"status"`
	Type      string            `json:"type"`
	Message   string            `json:"message"`
	Headers   map[string]string `json:"headers"` // such as {"Retry-After": "0"}
	Retryable *bool             `json:"retryable"`
	After     *Duration         `json:"after"` // open_error only: wait before failing
}

// Request is one request of a scenario: what the caller does, and the
// outcome it must see.
type Request struct {
	Caller Caller  `json:"caller"`
	Expect Outcome `json:"expect"`
}

// Caller is what the caller does besides reading the stream to its end.
type Caller struct {
	Timeout           *Duration `json:"timeout"`             // the caller's own deadline
	CancelAfter       *Duration `json:"cancel_after"`        // cancel after this long
	CancelAfterDeltas int       `json:"cancel_after_deltas"` // cancel after this many text deltas
	CloseAfterDeltas  int       `json:"close_after_deltas"`  // close the stream after this many
	// ReadDelay is how long the caller waits before each Recv, the first
	// included: a slow reader, or one that starts reading late.
	ReadDelay *Duration `json:"read_delay"`
}

// Outcome is what a request did (and, in a scenario, what it must do). Every
// field is compared; an absent one means empty.
type Outcome struct {
	// Attempts lists every attempt as "model: result", result being "ok",
	// an error class ("rate-limit", "network" …), "timeout(<deadline>)",
	// "canceled", "closed" or "plugin(<failure>)".
	Attempts []string `json:"attempts"`
	// Committed names the model whose stream the caller got ("" if none).
	Committed string `json:"committed"`
	// Text is every text delta the caller received, concatenated.
	Text string `json:"text"`
	// Error is the error the caller got, named as an attempt result is, or
	// "max-attempts" or "gave-up"; "" for none.
	Error string `json:"error"`
	// Violations lists broken invariants (an upstream left open, two
	// preambles); always expected empty.
	Violations []string `json:"violations,omitempty"`
	// PluginErrors is what the request's plugins said when they failed,
	// in order, at most 10 (PluginErrorsOmitted counts the others). It is
	// reported, never expected or compared: a scenario states outcomes,
	// not a guest's wording.
	PluginErrors        []PluginError `json:"plugin_errors,omitempty"`
	PluginErrorsOmitted int           `json:"plugin_errors_omitted,omitempty"`
}

// Parse decodes a scenario strictly (unknown fields are errors).
func Parse(data []byte) (*Scenario, *strict.Doc, error) {
	var s Scenario
	doc, err := strict.Decode(data, &s)
	if err != nil {
		return nil, doc, err
	}
	if err := s.validate(doc); err != nil {
		return nil, doc, err
	}
	return &s, doc, nil
}

func (s *Scenario) validate(doc *strict.Doc) error {
	if s.LoadError == "" && len(s.Requests) == 0 {
		return doc.Errorf("requests", "at least one request is required")
	}
	for name, ms := range s.Scripts {
		at := "scripts." + name
		if (ms.Chaos == nil) == (len(ms.Attempts) == 0) {
			return doc.Errorf(at, "give exactly one of attempts or chaos")
		}
		if c := ms.Chaos; c != nil && (c.Text == "" || c.Chunks < 1 || c.FailRate < 0 || c.FailRate > 1) {
			return doc.Errorf(at+".chaos", "needs text, chunks >= 1 and 0 <= fail_rate <= 1")
		}
		for i := range ms.Attempts {
			a := &ms.Attempts[i]
			aat := fmt.Sprintf("%s.attempts[%d]", at, i)
			if a.OpenError != nil && len(a.Steps) > 0 {
				return doc.Errorf(aat, "give open_error or steps, not both")
			}
			for j := range a.Steps {
				if err := a.Steps[j].validate(doc, fmt.Sprintf("%s.steps[%d]", aat, j)); err != nil {
					return err
				}
			}
		}
	}
	for i := range s.Requests {
		if e := &s.Requests[i].Expect; len(e.PluginErrors) > 0 || e.PluginErrorsOmitted != 0 {
			return doc.Errorf(fmt.Sprintf("requests[%d].expect", i), "plugin_errors is reported, not expected")
		}
	}
	for _, m := range s.Policy.Models {
		if m.Provider == "scripted" && s.Scripts[m.Name] == nil {
			return doc.Errorf("scripts", "no script for scripted model %q", m.Name)
		}
	}
	return nil
}

func (st *Step) validate(doc *strict.Doc, at string) error {
	n := 0
	for _, set := range []bool{st.Text != nil, st.Part != "", st.Delay != nil, st.Stall, st.Cut,
		st.Error != nil, st.ErrorPart != nil, st.Finish != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return doc.Errorf(at, "give exactly one of text, part, delay, stall, cut, error, error_part or finish")
	}
	if (st.Delta != "" || st.Name != "") && st.Part == "" {
		return doc.Errorf(at, "delta and name go with part")
	}
	if st.Part != "" && !strings.Contains(", "+stepKinds()+",", ", "+st.Part+",") {
		return doc.Errorf(at+".part", "unknown part kind %q (want one of %s)", st.Part, stepKinds())
	}
	if st.Finish != "" {
		if _, ok := abi.ParseReason(st.Finish); !ok {
			return doc.Errorf(at+".finish", "unknown finish reason %q", st.Finish)
		}
	}
	return nil
}

// Options are the run's environment.
type Options struct {
	// Dir resolves the policy's relative plugin paths (the scenario's directory).
	Dir string
	// Builtin returns a built-in plugin's bytes by name.
	Builtin func(name string) ([]byte, bool)
	// Logger receives the driver's and the host's logs (the plugins' log
	// lines among them). Default: discard.
	Logger *slog.Logger
	// HostOptions are appended to the Wasm runtime's options (a
	// compilation cache).
	HostOptions []host.Option
}

// Result is a scenario's actual outcome.
type Result struct {
	// LoadError is the policy's load error, if it failed to load.
	LoadError string    `json:"load_error,omitempty"`
	Requests  []Outcome `json:"requests"`
}

// RunFile parses and runs the scenario at path. It returns the scenario
// (for Diff) and what actually happened.
func RunFile(ctx context.Context, path string, opts Options) (*Scenario, *Result, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	s, doc, err := Parse(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if opts.Dir == "" {
		opts.Dir = filepath.Dir(path)
	}
	res, err := s.Run(ctx, doc, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, res, nil
}

// readFile reads a scenario under policy.MaxFileSize (a scenario is a
// policy and its scripts: kilobytes), so a device or a runaway file is
// refused instead of read until memory runs out.
func readFile(path string) ([]byte, error) {
	data, err := filecap.Read(path, policy.MaxFileSize)
	if errors.As(err, new(*filecap.TooLargeError)) {
		return nil, &fs.PathError{Op: "read", Path: path,
			Err: fmt.Errorf("larger than the %d MiB limit of a scenario file", policy.MaxFileSize>>20)}
	}
	return data, err
}

// recorder collects what the driver's callbacks report for one request.
type recorder struct {
	mu        sync.Mutex
	committed string
	outcome   *driver.Outcome
}

// Run plays the scenario. An error is a scenario that cannot run (a script
// that is missing); a policy that fails to load is a result.
func (s *Scenario) Run(ctx context.Context, doc *strict.Doc, opts Options) (*Result, error) {
	models := map[string]*scripted{}
	bound := map[string]driver.Model{}
	names := map[string]string{} // key → name
	for name, ms := range s.Scripts {
		m := &scripted{name: name, spec: ms}
		models[name], bound[name] = m, m
	}
	for _, m := range s.Policy.Models {
		if bm, ok := bound[m.Name]; ok {
			names[bm.Key()] = m.Name
		} else {
			names[m.Provider+"/"+m.Model] = m.Name
		}
	}
	nameOf := func(m driver.Model) string {
		if m == nil {
			return ""
		}
		if n, ok := names[m.Key()]; ok {
			return n
		}
		return m.Key()
	}
	rec := &recorder{}
	done := func(_ context.Context, o driver.Outcome) {
		rec.mu.Lock()
		rec.outcome = &o
		rec.mu.Unlock()
	}
	notes := &pluginNotes{lines: map[string][]string{}}
	build := policyhook.Build.(func(context.Context, *strict.Doc, *policy.File, string, policy.Options) (*policy.Policy, error))
	pol, err := build(ctx, doc, &s.Policy, "policy", policy.Options{
		Dir: opts.Dir, Models: bound, Builtin: opts.Builtin, Logger: opts.Logger,
		HostOptions:   append(slices.Clip(opts.HostOptions), notes.hostOptions(opts.Logger)...),
		Getenv:        func(string) string { return "" },
		RunnerOptions: []driver.Option{driver.WithOnSuccess(done), driver.WithOnFailure(done)},
		StreamOptions: []driver.StreamOption{driver.WithOnCommit(func(_ context.Context, c driver.CommitInfo) {
			rec.mu.Lock()
			rec.committed = nameOf(c.Model)
			rec.mu.Unlock()
		})},
	})
	if err != nil {
		return &Result{LoadError: err.Error()}, nil
	}
	defer pol.Close(context.WithoutCancel(ctx))
	res := &Result{}
	for i := range s.Requests {
		*rec = recorder{}
		notes.take() // what the load and the previous request left
		out, final := play(ctx, pol.Model, &s.Requests[i].Caller)
		rec.mu.Lock()
		out.Committed = rec.committed
		if final != nil {
			// The driver's class of the last attempt names a raw error.
			class := abi.ClassNone
			if o := rec.outcome; o != nil && len(o.Attempts) > 0 {
				class = o.Attempts[len(o.Attempts)-1].Class
			}
			out.Error = resultName(final, class)
		}
		if o := rec.outcome; o != nil {
			for _, a := range o.Attempts {
				out.Attempts = append(out.Attempts, nameOf(a.Model)+": "+resultName(a.Err, a.Class))
			}
			notes.verdicts(o)
		} else {
			out.Violations = append(out.Violations, "neither OnSuccess nor OnFailure fired")
		}
		rec.mu.Unlock()
		for _, name := range slices.Sorted(mapsKeys(models)) {
			if n := models[name].leaks(); n > 0 {
				out.Violations = append(out.Violations, fmt.Sprintf("%d upstream stream(s) of %s left open", n, name))
			}
		}
		out.PluginErrors, out.PluginErrorsOmitted = notes.take()
		res.Requests = append(res.Requests, out)
	}
	return res, nil
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// play runs one request as the caller describes and reads it to its end.
// It returns the error the caller got, if any.
func play(ctx context.Context, m *driver.RetryableModel, c *Caller) (out Outcome, final error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.Timeout != nil {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeout(ctx, time.Duration(*c.Timeout))
		defer cancelT()
	}
	if c.CancelAfter != nil {
		t := time.AfterFunc(time.Duration(*c.CancelAfter), cancel)
		defer t.Stop()
	}
	st, err := m.Stream(ctx, &driver.Request{Messages: []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: "hi"}}}}})
	if err != nil {
		return out, err
	}
	var text strings.Builder
	starts, deltas := 0, 0
	for {
		if c.ReadDelay != nil {
			time.Sleep(time.Duration(*c.ReadDelay))
		}
		p, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			final = err
			break
		}
		switch p.Kind {
		case abi.KindStreamStart:
			starts++
		case abi.KindTextDelta:
			text.WriteString(p.Delta)
			deltas++
			if deltas == c.CancelAfterDeltas {
				cancel()
			}
			if deltas == c.CloseAfterDeltas {
				_ = st.Close()
			}
		}
	}
	_ = st.Close()
	out.Text = text.String()
	if starts > 1 {
		out.Violations = append(out.Violations, fmt.Sprintf("the caller saw %d stream-start parts", starts))
	}
	return out, final
}

// resultName names an error the way scenarios spell outcomes; class is the
// driver's classification when known.
func resultName(err error, class abi.ErrorClass) string {
	if err == nil {
		return "ok"
	}
	cause := err
	var re *driver.RetryError
	if errors.As(err, &re) {
		if re.Cause != nil {
			cause = re.Cause
		} else if l := re.Last(); l != nil {
			cause = l
			if n := len(re.Attempts); n > 0 {
				class = re.Attempts[n-1].Class
			}
		}
	}
	var de *driver.DeadlineError
	var pe *host.PluginError
	switch {
	case errors.Is(cause, driver.ErrMaxAttempts):
		return "max-attempts"
	case errors.Is(cause, driver.ErrGaveUp):
		return "gave-up"
	case errors.Is(cause, driver.ErrUnknownModel):
		return "unknown-model"
	case errors.Is(cause, driver.ErrStreamClosed):
		return "closed"
	case errors.As(cause, &de):
		return "timeout(" + de.Deadline.String() + ")"
	case errors.Is(cause, context.Canceled):
		return "canceled"
	case errors.Is(cause, context.DeadlineExceeded):
		return "timeout(caller)"
	case errors.As(cause, &pe):
		return "plugin(" + pluginFailure(pe) + ")"
	}
	if class == abi.ClassNone {
		class = classOf(cause)
	}
	return class.String()
}

func pluginFailure(pe *host.PluginError) string {
	for _, k := range []struct {
		err  error
		name string
	}{{host.ErrTrap, "trap"}, {host.ErrTimeout, "timeout"}, {host.ErrABIViolation, "abi-violation"},
		{host.ErrDisabled, "disabled"}, {host.ErrExit, "exit"}, {host.ErrInstanceLost, "instance-lost"}} {
		if errors.Is(pe, k.err) {
			return k.name
		}
	}
	return "failed"
}

// classOf classifies an error the driver did not (one that reached the
// caller after commit).
func classOf(err error) abi.ErrorClass {
	var pe *driver.ProviderError
	var te *abi.TransformError
	var rf *abi.RefusalError
	switch {
	case errors.As(err, &rf):
		return abi.ClassRefusal
	case errors.As(err, &te):
		return abi.ClassTransform
	case errors.Is(err, io.ErrUnexpectedEOF):
		return abi.ClassNetwork
	case errors.As(err, &pe):
		switch {
		case pe.Status == 429:
			return abi.ClassRateLimit
		case pe.Status == 503 || pe.Status == 529:
			return abi.ClassOverloaded
		case pe.Status >= 500:
			return abi.ClassServer
		case pe.Status == 401 || pe.Status == 403:
			return abi.ClassAuth
		case pe.Status >= 400:
			return abi.ClassClient
		}
	}
	return abi.ClassUnknown
}

// Diff compares a result with the scenario's expectation: "" when they
// match, else a readable account of every difference.
func (s *Scenario) Diff(r *Result) string {
	var b strings.Builder
	if s.LoadError != "" || r.LoadError != "" {
		switch {
		case r.LoadError == "":
			fmt.Fprintf(&b, "load_error:\n  - want an error containing %q\n  + the policy loaded\n", s.LoadError)
		case s.LoadError == "":
			fmt.Fprintf(&b, "load_error:\n  - want the policy to load\n  + %s\n", r.LoadError)
		case !strings.Contains(r.LoadError, s.LoadError):
			fmt.Fprintf(&b, "load_error:\n  - want an error containing %q\n  + %s\n", s.LoadError, r.LoadError)
		}
		return b.String()
	}
	for i := range s.Requests {
		want := s.Requests[i].Expect
		var got Outcome
		if i < len(r.Requests) {
			got = r.Requests[i]
		}
		var d strings.Builder
		if !slices.Equal(want.Attempts, got.Attempts) {
			d.WriteString("  attempts:\n")
			for j := range max(len(want.Attempts), len(got.Attempts)) {
				w, g := at(want.Attempts, j), at(got.Attempts, j)
				if w == g {
					fmt.Fprintf(&d, "      %s\n", w)
					continue
				}
				if w != "" {
					fmt.Fprintf(&d, "    - %s\n", w)
				}
				if g != "" {
					fmt.Fprintf(&d, "    + %s\n", g)
				}
			}
		}
		field := func(name, w, g string) {
			if w != g {
				fmt.Fprintf(&d, "  %s:\n    - %q\n    + %q\n", name, w, g)
			}
		}
		field("committed", want.Committed, got.Committed)
		field("text", want.Text, got.Text)
		field("error", want.Error, got.Error)
		if !slices.Equal(want.Violations, got.Violations) {
			fmt.Fprintf(&d, "  violations:\n    - %q\n    + %q\n", want.Violations, got.Violations)
		}
		if d.Len() > 0 {
			fmt.Fprintf(&b, "request %d:\n%s", i+1, d.String())
		}
	}
	return b.String()
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}
