package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/internal/leaf/filecap"
)

// testCommand is "plugin test": the plugin author's check, the same on a
// laptop and in the author's CI.
func testCommand() *command {
	c := &command{}
	*c = command{
		name:    "test",
		args:    "PLUGIN.wasm|DIR",
		summary: "build a plugin project if needed, check it against the ABI and run its vectors (exit 1 on a failure)",
		help: "Loads the plugin as serve would (the host's load checks: exports, ABI version, imports, " +
			"limits, init with the vectors' config), runs the protocol on edge inputs (conditions: a result " +
			"attempt, an error with a message larger than the scratch buffer, a long history; transforms: an " +
			"empty stream, a provider error part, heartbeats, a tool call, a delta larger than the scratch " +
			"buffer; a verdict the host refuses, such as a REPLACE list with a framing part, fails the check), " +
			"then the author's vectors, and prints one line per check with the guest's error text and log " +
			"lines on a failure.\n\n" +
			"DIR is a project made by 'plugin new': its Makefile is run first (make builds only what changed), " +
			"then DIR/NAME.wasm is tested (NAME is DIR's base name, or the only .wasm in DIR). The vectors " +
			"are --vectors FILE, else vectors.json beside the plugin, else only the ABI checks run.\n\n" +
			"A vectors file is {\"config\": STRING or JSON, \"vectors\": [...]}; a condition's vector is " +
			"{\"name\", \"attempt\": {\"number\", \"model\", \"class\", \"status\", \"message\", \"retry_after\", ...}, " +
			"\"want\": {\"action\", \"model\", \"delay\", \"max_attempts\", \"use_retry_after\"}}; a transform's " +
			"{\"name\", \"text\" (one text block) or \"parts\": [{\"kind\", \"id\", \"delta\"}, ...], " +
			"\"want\": {\"text\", \"verdicts\", \"error\", \"class\"}} (see docs/plugins.md).\n\n" +
			"Exit 0 when every check passes, 1 when one fails or the build fails, 3 when the plugin or the " +
			"vectors cannot be read.",
		setup: func(fs *flag.FlagSet) runFunc {
			vectors := fs.String("vectors", "", "the vectors `FILE` (default: vectors.json beside the plugin, if any)")
			asJSON := fs.Bool("json", false, "print the results as JSON")
			return func(ctx context.Context, e *env, args []string) int {
				if len(args) != 1 {
					return e.usageError(c, "want one PLUGIN.wasm or project DIR")
				}
				return runPluginTest(ctx, e, args[0], *vectors, *asJSON)
			}
		},
	}
	return c
}

// testReport is what plugin test prints; --json prints it as is.
type testReport struct {
	File   string      `json:"file"`
	SHA256 string      `json:"sha256,omitempty"`
	Kinds  []string    `json:"kinds"`
	Checks []testCheck `json:"checks"`
	Passed int         `json:"passed"`
	Failed int         `json:"failed"`
}

// testCheck is one line of the report: a load, conformance or vector
// check, with the guest's log lines when it failed.
type testCheck struct {
	Kind   string   `json:"kind"` // "load", "abi" or "vector"
	Name   string   `json:"name"`
	Pass   bool     `json:"pass"`
	Detail string   `json:"detail,omitempty"` // what went wrong, or what was found
	Logs   []string `json:"logs,omitempty"`
}

// vectorsFile is the author's vectors.
type vectorsFile struct {
	Config  json.RawMessage `json:"config"`
	Vectors []vector        `json:"vectors"`
}

type vector struct {
	Name    string          `json:"name"`
	Attempt *attemptJSON    `json:"attempt"`
	Text    *string         `json:"text"`
	Parts   []partJSON      `json:"parts"`
	Want    json.RawMessage `json:"want"`
}

// attemptJSON is an abi.Attempt as a vector writes it; absent fields are
// zero (number 1, no Retry-After).
type attemptJSON struct {
	Number     int      `json:"number"`
	Model      string   `json:"model"`
	Class      string   `json:"class"`
	Status     int      `json:"status"`
	ErrorName  string   `json:"error_name"`
	Message    string   `json:"message"`
	RetryAfter string   `json:"retry_after"`
	Retryable  bool     `json:"retryable"`
	Elapsed    string   `json:"elapsed"`
	Finish     string   `json:"finish"`
	Earlier    []string `json:"earlier"` // the models of earlier attempts, oldest first
}

type decisionWant struct {
	Action        string  `json:"action"`
	Model         *string `json:"model"`
	Delay         *string `json:"delay"`
	MaxAttempts   *int    `json:"max_attempts"`
	UseRetryAfter *bool   `json:"use_retry_after"`
	Timeout       *string `json:"timeout"`
}

// partJSON is an abi.Part as a vector writes it.
type partJSON struct {
	Kind    string `json:"kind"`
	ID      string `json:"id,omitempty"`
	Delta   string `json:"delta,omitempty"`
	Tool    string `json:"tool,omitempty"`    // tool-input-start, tool-call: the tool's name
	Input   string `json:"input,omitempty"`   // tool-call: the input JSON
	Message string `json:"message,omitempty"` // error: the provider's error
	URL     string `json:"url,omitempty"`     // source
	Finish  string `json:"finish,omitempty"`  // finish: the unified reason (default stop)
}

type streamWant struct {
	Text     *string  `json:"text"`     // the text deltas that reach the caller, joined
	Verdicts []string `json:"verdicts"` // the verdict on each part, then "end:" the end verdict if called
	Error    *string  `json:"error"`    // the attempt fails with an error containing this
	Class    string   `json:"class"`    // and of this class (refusal, content-filter, transform)
}

func runPluginTest(ctx context.Context, e *env, target, vectorsPath string, asJSON bool) int {
	file, err := resolvePlugin(ctx, e, target)
	if err != nil {
		var be *buildError
		if errors.As(err, &be) {
			return e.errorf(exitFail, "%v", err)
		}
		return e.errorf(exitInput, "%v", err)
	}
	if vectorsPath == "" {
		if p := filepath.Join(filepath.Dir(file), "vectors.json"); fileExists(p) {
			vectorsPath = p
		}
	}
	var vf vectorsFile
	if vectorsPath != "" {
		b, err := filecap.Read(vectorsPath, 16<<20)
		if err != nil {
			return e.errorf(exitInput, "%v", err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&vf); err != nil {
			return e.errorf(exitInput, "%s: %v", vectorsPath, err)
		}
	}
	wasm, err := filecap.Read(file, int64(host.DefaultModuleLimits().ModuleBytes))
	if err != nil {
		return e.errorf(exitInput, "%v", err)
	}
	r, err := testPlugin(ctx, e, file, wasm, vf)
	if err != nil {
		return e.errorf(exitInput, "%s: %v", vectorsPath, err)
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return e.errorf(exitFail, "%v", err)
		}
	} else {
		printTestReport(e.stdout, termFor(e.stdout), r)
	}
	if r.Failed > 0 {
		return exitFail
	}
	return exitOK
}

// buildError is a project whose build failed.
type buildError struct {
	dir string
	err error
}

func (b *buildError) Error() string { return "build of " + b.dir + " failed: " + b.err.Error() }
func (b *buildError) Unwrap() error { return b.err }

// resolvePlugin returns the .wasm to test: target itself, or a project
// directory's build (make, run first).
func resolvePlugin(ctx context.Context, e *env, target string) (string, error) {
	st, err := os.Stat(target)
	if err != nil || !st.IsDir() {
		return target, err
	}
	if fileExists(filepath.Join(target, "Makefile")) {
		cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", target)
		// The build's own output goes to stderr: stdout is the report.
		cmd.Stdout, cmd.Stderr = e.stderr, e.stderr
		if err := cmd.Run(); err != nil {
			return "", &buildError{dir: target, err: err}
		}
	}
	abs, err := filepath.Abs(target)
	if err != nil {
		return "", err
	}
	if p := filepath.Join(target, filepath.Base(abs)+".wasm"); fileExists(p) {
		return p, nil
	}
	found, _ := filepath.Glob(filepath.Join(target, "*.wasm"))
	if len(found) == 1 {
		return found[0], nil
	}
	return "", fmt.Errorf("%s: no %s.wasm and not exactly one .wasm file (found %d)", target, filepath.Base(abs), len(found))
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// logCapture collects the guest's log lines (and the host's own) for the
// check being run.
type logCapture struct {
	mu    sync.Mutex
	lines []string
}

func (c *logCapture) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.lines
	c.lines = nil
	return out
}

func (c *logCapture) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		c.lines = append(c.lines, l)
	}
	return len(b), nil
}

// configOf turns the vectors' config into the bytes init gets: a JSON
// string is its text, any other JSON value its own text.
func configOf(raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		return []byte(s), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return buf.Bytes(), nil
}

// testPlugin loads wasm and runs the checks. The error is for vectors
// that cannot be used (a malformed one), not for a failing check.
func testPlugin(ctx context.Context, e *env, file string, wasm []byte, vf vectorsFile) (*testReport, error) {
	r := &testReport{File: file, Kinds: []string{}, Checks: []testCheck{}}
	config, err := configOf(vf.Config)
	if err != nil {
		return nil, err
	}
	logs := &logCapture{}
	rt, err := host.New(ctx, append(e.hostOptions(ctx), host.WithLogger(testLogger(logs)))...)
	if err != nil {
		return nil, err
	}
	defer rt.Close(ctx)
	add := func(c testCheck) { r.add(c, logs) }
	p, err := rt.Load(ctx, filepath.Base(file), wasm, host.WithConfig(config), host.WithInstances(1))
	if err != nil {
		add(testCheck{Kind: "load", Name: "the host loads it", Detail: err.Error()})
		return r, nil
	}
	defer p.Close(ctx)
	r.SHA256 = p.SHA256()
	add(r.loadCheck(p))
	for _, c := range edgeChecks(ctx, p) {
		add(c)
	}
	for i, v := range vf.Vectors {
		c, err := vectorCheck(ctx, p, i, v)
		if err != nil {
			return nil, err
		}
		add(c)
	}
	return r, nil
}

// testLogger logs the plugin's lines, at every level and with no time,
// to logs, from which a failing check takes them.
func testLogger(logs *logCapture) *slog.Logger {
	return slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
}

// add counts c and appends it; a failing check takes the plugin's log
// lines since the last check, a passing one drops them.
func (r *testReport) add(c testCheck, logs *logCapture) {
	if !c.Pass {
		c.Logs = logs.take()
		r.Failed++
	} else {
		logs.take()
		r.Passed++
	}
	r.Checks = append(r.Checks, c)
}

// loadCheck records what p is and passes the load check.
func (r *testReport) loadCheck(p *host.Plugin) testCheck {
	what := []string{}
	if p.IsCondition() {
		r.Kinds = append(r.Kinds, "condition")
	}
	if p.IsTransform() {
		r.Kinds = append(r.Kinds, "transform")
		what = append(what, p.FailPolicy().String())
	}
	return testCheck{Kind: "load", Name: "the host loads it", Pass: true,
		Detail: strings.Join(append(slices.Clone(r.Kinds), what...), ", ")}
}

// edgeChecks runs p through the ABI's edge cases of its kinds.
func edgeChecks(ctx context.Context, p *host.Plugin) []testCheck {
	var out []testCheck
	if p.IsCondition() {
		for _, c := range conditionEdges() {
			_, err := p.Decide(ctx, &c.a)
			out = append(out, testCheck{Kind: "abi", Name: "decide: " + c.name, Pass: err == nil, Detail: errText(err)})
		}
	}
	if p.IsTransform() {
		for _, c := range transformEdges() {
			res, err := streamThrough(ctx, p, c.parts)
			if err == nil && res.err != nil && c.noError {
				err = fmt.Errorf("failed the attempt: %w", res.err)
			}
			out = append(out, testCheck{Kind: "abi", Name: "stream: " + c.name, Pass: err == nil, Detail: errText(err)})
		}
	}
	return out
}

// vectorCheck runs the i-th vector, v, through p. The error is for a
// vector that cannot be used.
func vectorCheck(ctx context.Context, p *host.Plugin, i int, v vector) (testCheck, error) {
	name := v.Name
	if name == "" {
		name = fmt.Sprintf("vector %d", i+1)
	}
	c := testCheck{Kind: "vector", Name: name}
	switch {
	case v.Attempt != nil:
		if !p.IsCondition() {
			return c, fmt.Errorf("%s: an attempt, but the plugin is not a condition", name)
		}
		a, err := v.Attempt.attempt()
		if err != nil {
			return c, fmt.Errorf("%s: %w", name, err)
		}
		var want decisionWant
		if err := strictJSON(v.Want, &want); err != nil {
			return c, fmt.Errorf("%s: want: %w", name, err)
		}
		d, err := p.Decide(ctx, &a)
		if err != nil {
			c.Detail = "the decide failed: " + err.Error()
		} else {
			c.Detail = want.check(d)
			c.Pass = c.Detail == ""
		}
	case v.Text != nil || v.Parts != nil:
		if !p.IsTransform() {
			return c, fmt.Errorf("%s: parts, but the plugin is not a transform", name)
		}
		parts, err := v.parts()
		if err != nil {
			return c, fmt.Errorf("%s: %w", name, err)
		}
		var want streamWant
		if err := strictJSON(v.Want, &want); err != nil {
			return c, fmt.Errorf("%s: want: %w", name, err)
		}
		res, err := streamThrough(ctx, p, parts)
		if err != nil {
			c.Detail = "the transform failed: " + err.Error()
		} else {
			c.Detail = want.check(res)
			c.Pass = c.Detail == ""
		}
	default:
		return c, fmt.Errorf("%s: neither an attempt nor text or parts", name)
	}
	return c, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func strictJSON(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return errors.New("missing")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

type edgeAttempt struct {
	name string
	a    abi.Attempt
}

// conditionEdges are attempts a condition must answer without failing.
func conditionEdges() []edgeAttempt {
	earlier := make([]abi.AttemptSummary, 64)
	for i := range earlier {
		earlier[i] = abi.AttemptSummary{Model: "openai/gpt-5", Class: abi.ClassServer, Status: 503, Duration: time.Second}
	}
	return []edgeAttempt{
		{"a result attempt (no error, finish stop)", abi.Attempt{Number: 1, Model: "openai/gpt-5", RetryAfter: -1,
			Finish: abi.FinishReason{Unified: abi.ReasonStop, Raw: "stop"}}},
		{"a zero attempt", abi.Attempt{}},
		{"a 429 with Retry-After", abi.Attempt{Number: 1, Model: "openai/gpt-5", Class: abi.ClassRateLimit, Status: 429,
			RetryAfter: 2 * time.Second, Message: "slow down", Retryable: true}},
		{"an error message larger than the scratch buffer", abi.Attempt{Number: 2, Model: "openai/gpt-5", Class: abi.ClassServer,
			Status: 500, RetryAfter: -1, Message: strings.Repeat("x", 200<<10)}},
		{"a long history", abi.Attempt{Number: 65, Model: "openai/gpt-5", Class: abi.ClassServer, Status: 503, RetryAfter: -1,
			Earlier: earlier}},
	}
}

type edgeStream struct {
	name    string
	parts   []abi.Part
	noError bool // the transform must not fail the attempt on it
}

// transformEdges are streams a transform must go through without a
// plugin failure (a trap, a timeout, a verdict the host refuses).
func transformEdges() []edgeStream {
	start := abi.Part{Kind: abi.KindStreamStart}
	meta := abi.Part{Kind: abi.KindResponseMeta, ID: "resp-1", Meta: &abi.ResponseMeta{ID: "resp-1", ModelID: "gpt-5"}}
	finish := abi.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop, Raw: "stop"}}}
	text := func(id string, deltas ...string) []abi.Part {
		ps := []abi.Part{{Kind: abi.KindTextStart, ID: id}}
		for _, d := range deltas {
			ps = append(ps, abi.Part{Kind: abi.KindTextDelta, ID: id, Delta: d})
		}
		return append(ps, abi.Part{Kind: abi.KindTextEnd, ID: id})
	}
	stream := func(mid ...[]abi.Part) []abi.Part {
		ps := []abi.Part{start, meta}
		for _, m := range mid {
			ps = append(ps, m...)
		}
		return append(ps, finish)
	}
	return []edgeStream{
		{name: "an empty stream (start, metadata, finish)", parts: stream()},
		{name: "no parts at all", parts: nil},
		{name: "a provider error part", parts: []abi.Part{start, meta, {Kind: abi.KindTextStart, ID: "t"},
			{Kind: abi.KindTextDelta, ID: "t", Delta: "Hel"}, {Kind: abi.KindError, Err: errors.New("upstream: overloaded")}}},
		{name: "heartbeats (empty deltas)", parts: stream(text("t", "", "Hello", "", "", " world", ""))},
		{name: "reasoning, a tool call and a source", parts: stream(
			[]abi.Part{{Kind: abi.KindReasoningStart, ID: "r"}, {Kind: abi.KindReasoningDelta, ID: "r", Delta: "Let me look."}, {Kind: abi.KindReasoningEnd, ID: "r"}},
			[]abi.Part{{Kind: abi.KindToolInputStart, ID: "c1", Tool: &abi.ToolInfo{Name: "search"}},
				{Kind: abi.KindToolInputDelta, ID: "c1", Delta: `{"q":"x"}`}, {Kind: abi.KindToolInputEnd, ID: "c1"},
				{Kind: abi.KindToolCall, ID: "c1", Tool: &abi.ToolInfo{Name: "search", Input: `{"q":"x"}`}},
				{Kind: abi.KindSource, ID: "s1", Source: &abi.Source{URL: "https://example.com", Title: "Example"}}})},
		{name: "a delta larger than the scratch buffer", parts: stream(text("t", strings.Repeat("lorem ipsum ", 12<<10)))},
		{name: "non-UTF-8 and NUL bytes in a delta", parts: stream(text("t", "a\x00b\xff\xfe c"))},
	}
}

// streamResult is what one stream let through.
type streamResult struct {
	out      []abi.Part
	verdicts []string
	err      error // the verdict's error: the attempt fails
}

// streamThrough drives one stream of p over parts and applies the verdicts
// the host hands the driver over a hold queue (ABI.md §6.3, §6.4: the host
// already turned the guest's verdicts into what the driver applies). The
// error is a failure of the plugin.
func streamThrough(ctx context.Context, p *host.Plugin, parts []abi.Part) (streamResult, error) {
	var r streamResult
	st, err := p.Open(ctx, abi.StreamInfo{ID: 1, Model: "openai/gpt-5", Attempt: 1})
	if err != nil {
		return r, err
	}
	defer st.Close()
	var held []abi.Part
	for i := range parts {
		part := parts[i]
		v, err := st.Part(ctx, &part)
		if err != nil {
			return r, fmt.Errorf("part %d (%s): %w", i+1, part.Kind, err)
		}
		r.verdicts = append(r.verdicts, v.Action.String())
		switch v.Action {
		case abi.PartPass:
			r.out = append(append(r.out, held...), part)
			held = held[:0]
		case abi.PartHold:
			held = append(held, part)
		case abi.PartDrop:
		case abi.PartReplace:
			held = held[:0]
			r.out = append(r.out, v.Replace...)
		case abi.PartDetach:
			r.out = append(append(r.out, held...), part)
			r.out = append(r.out, parts[i+1:]...)
			return r, nil
		case abi.PartError:
			r.err = v.Err
			if r.err == nil {
				r.err = errors.New("an error verdict without an error")
			}
			return r, nil
		}
		if part.Kind == abi.KindError { // the provider's error ends the attempt
			return r, nil
		}
	}
	v, err := st.End(ctx)
	if err != nil {
		return r, fmt.Errorf("end: %w", err)
	}
	r.verdicts = append(r.verdicts, "end:"+v.Action.String())
	switch v.Action {
	case abi.PartReplace:
		r.out = append(r.out, v.Replace...)
	case abi.PartError:
		r.err = v.Err
		if r.err == nil {
			r.err = errors.New("an error verdict without an error")
		}
	default:
		r.out = append(r.out, held...)
	}
	return r, nil
}

func (a *attemptJSON) attempt() (abi.Attempt, error) {
	out := abi.Attempt{Number: a.Number, Model: a.Model, Status: a.Status, ErrorName: a.ErrorName, Message: a.Message,
		Retryable: a.Retryable, RetryAfter: -1}
	if out.Number == 0 {
		out.Number = 1
	}
	if out.Model == "" {
		out.Model = "openai/gpt-5"
	}
	if a.Class != "" {
		c, ok := abi.ParseErrorClass(a.Class)
		if !ok {
			return out, fmt.Errorf("attempt: unknown class %q", a.Class)
		}
		out.Class = c
	}
	if a.RetryAfter != "" {
		d, err := time.ParseDuration(a.RetryAfter)
		if err != nil {
			return out, fmt.Errorf("attempt: retry_after: %w", err)
		}
		out.RetryAfter = d
	}
	if a.Elapsed != "" {
		d, err := time.ParseDuration(a.Elapsed)
		if err != nil {
			return out, fmt.Errorf("attempt: elapsed: %w", err)
		}
		out.Elapsed = d
	}
	if a.Finish != "" {
		f, ok := abi.ParseReason(a.Finish)
		if !ok {
			return out, fmt.Errorf("attempt: unknown finish %q", a.Finish)
		}
		out.Finish = abi.FinishReason{Unified: f, Raw: a.Finish}
	}
	for _, m := range a.Earlier {
		out.Earlier = append(out.Earlier, abi.AttemptSummary{Model: m, Class: abi.ClassServer, Status: 500})
	}
	return out, nil
}

// check returns what differs from d, or "".
func (w *decisionWant) check(d abi.Decision) string {
	var diff []string
	got := func(what string, want, have any) {
		diff = append(diff, fmt.Sprintf("%s: want %v, got %v", what, want, have))
	}
	if w.Action == "" {
		w.Action = "none"
	}
	if d.Action.String() != w.Action {
		got("action", w.Action, d.Action)
	}
	if w.Model != nil && *w.Model != d.Model {
		got("model", fmt.Sprintf("%q", *w.Model), fmt.Sprintf("%q", d.Model))
	}
	if w.Delay != nil {
		if want, err := time.ParseDuration(*w.Delay); err != nil || want != d.Delay {
			got("delay", *w.Delay, d.Delay)
		}
	}
	if w.Timeout != nil {
		if want, err := time.ParseDuration(*w.Timeout); err != nil || want != d.Timeout {
			got("timeout", *w.Timeout, d.Timeout)
		}
	}
	if w.MaxAttempts != nil && *w.MaxAttempts != d.MaxAttempts {
		got("max_attempts", *w.MaxAttempts, d.MaxAttempts)
	}
	if w.UseRetryAfter != nil && *w.UseRetryAfter != d.UseRetryAfter {
		got("use_retry_after", *w.UseRetryAfter, d.UseRetryAfter)
	}
	return strings.Join(diff, "; ")
}

func (v *vector) parts() ([]abi.Part, error) {
	if v.Text != nil {
		if v.Parts != nil {
			return nil, errors.New("both text and parts")
		}
		return []abi.Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindTextStart, ID: "t"},
			{Kind: abi.KindTextDelta, ID: "t", Delta: *v.Text}, {Kind: abi.KindTextEnd, ID: "t"},
			{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop, Raw: "stop"}}}}, nil
	}
	out := make([]abi.Part, 0, len(v.Parts))
	for i, pj := range v.Parts {
		k := abi.KindInvalid
		for c := abi.KindStreamStart; c.Valid(); c++ {
			if c.String() == pj.Kind {
				k = c
			}
		}
		if k == abi.KindInvalid || k == abi.KindRaw {
			return nil, fmt.Errorf("part %d: unknown kind %q", i+1, pj.Kind)
		}
		p := abi.Part{Kind: k, ID: pj.ID, Delta: pj.Delta}
		switch k {
		case abi.KindToolInputStart, abi.KindToolCall, abi.KindToolResult:
			p.Tool = &abi.ToolInfo{Name: pj.Tool, Input: pj.Input}
		case abi.KindSource:
			p.Source = &abi.Source{URL: pj.URL}
		case abi.KindError:
			p.Err = errors.New(pj.Message)
		case abi.KindResponseMeta:
			p.Meta = &abi.ResponseMeta{ID: pj.ID}
		case abi.KindFinish:
			reason := abi.ReasonStop
			if pj.Finish != "" {
				r, ok := abi.ParseReason(pj.Finish)
				if !ok {
					return nil, fmt.Errorf("part %d: unknown finish %q", i+1, pj.Finish)
				}
				reason = r
			}
			p.Finish = &abi.Finish{Reason: abi.FinishReason{Unified: reason, Raw: reason.String()}}
		}
		out = append(out, p)
	}
	return out, nil
}

// check returns what differs from r, or "".
func (w *streamWant) check(r streamResult) string {
	var diff []string
	switch {
	case w.Error != nil && r.err == nil:
		diff = append(diff, fmt.Sprintf("want the attempt to fail with %q, it did not", *w.Error))
	case w.Error == nil && r.err != nil:
		diff = append(diff, "the attempt failed: "+r.err.Error())
	case w.Error != nil && !strings.Contains(r.err.Error(), *w.Error):
		diff = append(diff, fmt.Sprintf("want an error containing %q, got %q", *w.Error, r.err.Error()))
	}
	if w.Class != "" && r.err != nil {
		if c := errClass(r.err); c != w.Class {
			diff = append(diff, fmt.Sprintf("class: want %s, got %s", w.Class, c))
		}
	}
	if w.Text != nil && r.err == nil {
		var b strings.Builder
		for _, p := range r.out {
			if p.Kind == abi.KindTextDelta {
				b.WriteString(p.Delta)
			}
		}
		if b.String() != *w.Text {
			diff = append(diff, fmt.Sprintf("text: want %q, got %q", *w.Text, b.String()))
		}
	}
	if w.Verdicts != nil && !slices.Equal(w.Verdicts, r.verdicts) {
		diff = append(diff, fmt.Sprintf("verdicts: want %s, got %s", strings.Join(w.Verdicts, " "), strings.Join(r.verdicts, " ")))
	}
	return strings.Join(diff, "; ")
}

func errClass(err error) string {
	var re *abi.RefusalError
	if errors.As(err, &re) {
		return abi.ClassRefusal.String()
	}
	var te *abi.TransformError
	if errors.As(err, &te) {
		return te.Class.String()
	}
	return abi.ClassTransform.String()
}

func printTestReport(w io.Writer, t term, r *testReport) {
	var b strings.Builder
	fmt.Fprintf(&b, "plugin %s", r.File)
	if len(r.Kinds) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(r.Kinds, ", "))
	}
	b.WriteString("\n")
	for _, c := range r.Checks {
		mark := t.paint(ansiGreen+ansiBold, "PASS")
		if !c.Pass {
			mark = t.paint(ansiRed+ansiBold, "FAIL")
		}
		fmt.Fprintf(&b, "%s  %-6s %s", mark, c.Kind, c.Name)
		if c.Detail != "" {
			if c.Pass {
				fmt.Fprintf(&b, " (%s)", c.Detail)
			} else {
				fmt.Fprintf(&b, "\n        %s", c.Detail)
			}
		}
		b.WriteString("\n")
		for _, l := range c.Logs {
			fmt.Fprintf(&b, "        log: %s\n", l)
		}
	}
	fmt.Fprintf(&b, "%d passed, %d failed\n", r.Passed, r.Failed)
	io.WriteString(w, b.String())
}
