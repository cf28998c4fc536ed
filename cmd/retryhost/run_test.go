package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runPolicy writes a policy over two loopback OpenAI-compatible providers
// (the first refuses in plain text, or answers 429 with status429; the
// second answers) and returns its path.
func runPolicy(t *testing.T, status429 bool) string {
	t.Helper()
	first := &fakeProvider{name: "first", model: "gpt-first",
		chunks: []string{"I'm sorry", ", but I can't", " help with that."}}
	if status429 {
		first = &fakeProvider{name: "first", model: "gpt-first", status: http.StatusTooManyRequests,
			header: http.Header{"Retry-After-Ms": {"1"}}, message: "Rate limit reached."}
	}
	second := &fakeProvider{name: "second", model: "gpt-second", chunks: []string{"The capital", " of France", " is Paris."}}
	a, b := first.start(), second.start()
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	t.Setenv("RETRYHOST_RUN_TEST_KEY", "sk-test")
	path := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`{
  // the first model refuses or is rate-limited; the Wasm refusal detector and the rules fail over
  "models": [
    {"name": "first", "provider": "openai", "model": "gpt-first", "base_url": %q, "api_key_env": "RETRYHOST_RUN_TEST_KEY"},
    {"name": "second", "provider": "openai", "model": "gpt-second", "base_url": %q, "api_key_env": "RETRYHOST_RUN_TEST_KEY"}
  ],
  "rules": [{"when": {"class": ["refusal", "rate-limit"]}, "action": "switch", "model": "second"}],
  "transforms": [{"plugin": {"builtin": "refusal"}}]
}`, a.URL+"/v1", b.URL+"/v1")), 0o600))
	return path
}

func TestRun_StreamFailsOverAfterARefusal(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := dispatch(context.Background(), []string{"run", "--policy", runPolicy(t, false), "What", "is", "the", "capital?"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	require.Equal(t, "The capital of France is Paris.\n", stdout.String(), "the answer alone on stdout, once, without the refusal")
	log := durations.ReplaceAllString(stderr.String(), "T")
	require.Equal(t, `attempt 1 on first failed: refusal: the text "I'm sorry, but I can't" matched the refusal phrase "i'm sorry, but i can't" (T)
  → second after T
attempt 2 on second committed after T
done: finish stop, T
`, log)
}

func TestRun_CallFailsOverAfterA429(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := dispatch(context.Background(), []string{"run", "--call", "--policy", runPolicy(t, true), "hi"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	require.Equal(t, "The capital of France is Paris.\n", stdout.String())
	require.Contains(t, stderr.String(), "attempt 1 on first failed: rate-limit: HTTP 429")
}

// A non-streaming call runs the policy's transforms too,
// so the refusal detector fails the refusing model over instead of
// printing its refusal with exit 0.
func TestRun_CallFailsOverAfterARefusal(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := dispatch(context.Background(), []string{"run", "--call", "--policy", runPolicy(t, false), "What", "is", "the", "capital?"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	require.Equal(t, "The capital of France is Paris.\n", stdout.String(), "the answer alone, without the refusal")
	require.Contains(t, stderr.String(), "attempt 1 on first failed: refusal")
}

func TestRun_JSONEvents(t *testing.T) {
	var stdout, stderr bytes.Buffer
	prev := runStdin
	runStdin = strings.NewReader("What is the capital?\n")
	defer func() { runStdin = prev }()
	code := dispatch(context.Background(), []string{"run", "--json", "--policy", runPolicy(t, false), "-"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	require.Empty(t, stderr.String())
	var events []string
	var text strings.Builder
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var e jsonEvent
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), sc.Text())
		events = append(events, e.Event+":"+e.Outcome)
		text.WriteString(e.Text)
	}
	require.Equal(t, []string{"attempt:refusal", "next:", "attempt:committed", "text:", "text:", "text:", "done:"}, events)
	require.Equal(t, "The capital of France is Paris.", text.String())
}

func TestRun_BadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"models": [{"name": "m", "provider": "openia"}]}`), 0o600))
	for _, tc := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"no policy", []string{"run", "hello"}, exitUsage, "usage: retryhost run"},
		{"no prompt", []string{"run", "--policy", bad}, exitUsage, "usage: retryhost run"},
		{"a missing file", []string{"run", "--policy", filepath.Join(dir, "nope.json"), "hi"}, exitInput, "no such file"},
		{"a mistake names its place", []string{"run", "--policy", bad, "hi"}, exitInput, `line 1:39: models[0].provider: unknown provider "openia"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, tc.code, dispatch(context.Background(), tc.args, &stdout, &stderr))
			require.Empty(t, stdout.String())
			require.Contains(t, stderr.String(), tc.err)
		})
	}
}

func TestRun_CanceledFails(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	code := dispatch(ctx, []string{"run", "--policy", runPolicy(t, false), "hi"}, &stdout, &stderr)
	require.Equal(t, exitFail, code)
	require.Contains(t, stderr.String(), "context canceled")
}

// TestPolicyFlagHelpSaysYAML: run and serve load YAML policies as well as
// JSON, so their --policy help must not say "JSON" alone (a user with a
// policy.yaml would think it unsupported).
func TestPolicyFlagHelpSaysYAML(t *testing.T) {
	for _, cmd := range []string{"run", "serve"} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, exitOK, dispatch(context.Background(), []string{cmd, "--help"}, &stdout, &stderr))
		require.Contains(t, stdout.String(), "the policy FILE (JSON or YAML", cmd)
	}
}
