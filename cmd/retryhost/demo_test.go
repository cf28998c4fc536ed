package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// durations matches the timings the demo prints, which vary by machine.
var durations = regexp.MustCompile(`[0-9]+(\.[0-9]+)?(ns|µs|ms|s)\b`)

func TestDemo_FailsOverToTheAnsweringProvider(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := dispatch(context.Background(), []string{"demo"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	require.Empty(t, stderr.String())
	out := stdout.String()
	require.NotContains(t, out, "\x1b[", "no colour or progress when not a terminal")
	var lines []string
	for _, l := range strings.Split(durations.ReplaceAllString(out, "T"), "\n") {
		if strings.HasPrefix(l, "attempt ") || strings.HasPrefix(l, "           → ") ||
			strings.HasPrefix(l, "answer:") || strings.HasPrefix(l, "done:") {
			lines = append(lines, l)
		}
	}
	require.Equal(t, []string{
		`attempt 1  alpha/gpt-4o         refusal     the text "I'm sorry, but I can't" matched the refusal phrase "i'm sorry, but i can't"  (T)`,
		`           → next: beta/gpt-4o-mini, after waiting T`,
		`attempt 2  beta/gpt-4o-mini     rate-limit  HTTP 429, Retry-After T  (T)`,
		`           → next: beta/gpt-4o-mini, after waiting T`,
		`attempt 3  beta/gpt-4o-mini     rate-limit  HTTP 429, Retry-After T  (T)`,
		`           → next: gamma/llama-3.3-70b, after waiting T`,
		`attempt 4  gamma/llama-3.3-70b  committed   first content reached the caller  (T since the request)`,
		`answer: The capital of France is Paris, on the Seine.`,
		`done: answered by gamma/llama-3.3-70b, finish stop, 4 attempts (3 failed), T`,
	}, lines)
}

func TestDemo_JSONEvents(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := dispatch(context.Background(), []string{"demo", "--json"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	type event struct {
		Event, Model, Outcome, Text, Finish string
		Number, Status, Attempts, Failed    int
		DurationMS                          *float64 `json:"duration_ms"`
	}
	var attempts []string
	var text strings.Builder
	var done *event
	var waited []float64
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var e event
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), sc.Text())
		switch e.Event {
		case "attempt":
			attempts = append(attempts, e.Model+" "+e.Outcome)
		case "next":
			require.NotNil(t, e.DurationMS)
			waited = append(waited, *e.DurationMS)
		case "text":
			text.WriteString(e.Text)
		case "done":
			done = &e
		}
	}
	require.Equal(t, []string{
		"alpha/gpt-4o refusal", "beta/gpt-4o-mini rate-limit", "beta/gpt-4o-mini rate-limit", "gamma/llama-3.3-70b committed",
	}, attempts)
	require.Len(t, waited, 3)
	require.GreaterOrEqual(t, waited[1], float64(demoRetryAfter.Milliseconds()), "the retry honoured Retry-After")
	require.NotNil(t, done)
	require.Equal(t, "gamma/llama-3.3-70b", done.Model)
	require.Equal(t, 4, done.Attempts)
	require.Equal(t, 3, done.Failed)
	require.Equal(t, "stop", done.Finish)
	require.Equal(t, "The capital of France is Paris, on the Seine.", done.Text)
	require.Equal(t, done.Text, text.String(), "every delta streamed once, in order")
}

func TestDemo_CanceledContextFails(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitFail, dispatch(ctx, []string{"demo"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "retryhost demo:")
}

func TestDemoOutput_TerminalGetsColourAndTransientProgress(t *testing.T) {
	var b bytes.Buffer
	o := &plainOutput{w: &b, t: term{tty: true, color: true}}
	o.failed(&driver.Attempt{Number: 2, Model: "beta/m", Class: abi.ClassRateLimit, Status: 429, RetryAfter: demoRetryAfter})
	require.Contains(t, b.String(), ansiRed+"rate-limit")
	require.True(t, o.waiting, "a Retry-After shows a waiting line")
	o.next("beta/m", demoRetryAfter)
	require.Contains(t, b.String(), "\r\x1b[K           → next: beta/m", "the waiting line is erased, not left behind")
	require.False(t, o.waiting)

	b.Reset()
	o = &plainOutput{w: &b, t: term{tty: true}} // NO_COLOR on a terminal
	o.failed(&driver.Attempt{Number: 2, Model: "beta/m", Class: abi.ClassRateLimit, Status: 429, RetryAfter: demoRetryAfter})
	require.NotContains(t, b.String(), "\x1b[3", "no colour")
}
