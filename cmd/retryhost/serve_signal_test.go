package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit"
)

// These tests drive the real `retryhost serve` binary with real signals, as
// an operator (or Kubernetes) would.

// heldUpstream is an OpenAI-compatible upstream whose answers are "first"
// then, once released, " second" and the end.
type heldUpstream struct {
	srv     *httptest.Server
	mu      sync.Mutex
	release chan struct{}
	started chan string // the model of each request, as it starts
}

func newHeldUpstream(t *testing.T) *heldUpstream {
	u := &heldUpstream{release: make(chan struct{}), started: make(chan string, 16)}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		model := regexp.MustCompile(`"model":"([^"]*)"`).FindStringSubmatch(string(b))[1]
		u.mu.Lock()
		release := u.release
		u.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(delta, finish string) {
			fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`+"\n\n", model, delta, finish)
			w.(http.Flusher).Flush()
		}
		chunk(`{"role":"assistant","content":"first"}`, "null")
		u.started <- model
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		chunk(`{"content":" second"}`, "null")
		chunk(`{}`, `"stop"`)
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(func() {
		u.free()
		u.srv.Close()
	})
	return u
}

// free releases the answers held so far; later ones are held again.
func (u *heldUpstream) free() {
	u.mu.Lock()
	defer u.mu.Unlock()
	select {
	case <-u.release:
	default:
		close(u.release)
	}
}

// servedBinary is a running `retryhost serve`.
type servedBinary struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	stderr *testkit.LogBuffer
	exited chan struct{}
}

func startServeBinary(t *testing.T, args ...string) *servedBinary {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin, err := buildOnce()
	require.NoError(t, err)
	b := &servedBinary{t: t, stderr: &testkit.LogBuffer{}, exited: make(chan struct{})}
	b.cmd = exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	b.cmd.Env = append(os.Environ(), "UPSTREAM_KEY=sk-upstream", "RETRYHOST_API_KEYS=")
	b.cmd.Stderr = b.stderr
	require.NoError(t, b.cmd.Start())
	go func() { _ = b.cmd.Wait(); close(b.exited) }()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.exited
	})
	require.Eventually(t, func() bool {
		if m := listening.FindStringSubmatch(b.stderr.String()); m != nil {
			b.addr = strings.TrimPrefix(m[1], "http://")
			return true
		}
		select {
		case <-b.exited:
			t.Fatalf("serve exited: %s", b.stderr.String())
		default:
		}
		return false
	}, 30*time.Second, 5*time.Millisecond)
	return b
}

// base is the URL the binary serves on.
func (b *servedBinary) base() string { return "http://" + b.addr }

func (b *servedBinary) client() oai.Client {
	return oai.NewClient(option.WithBaseURL(b.base()+"/v1"), option.WithAPIKey("k"), option.WithMaxRetries(0))
}

func (b *servedBinary) metrics() string {
	b.t.Helper()
	return metricsAt(b.t, b.base())
}

// metricsAt returns the Prometheus text a gateway at base serves.
func metricsAt(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// waitExit waits for the process (a guard against a hang, not a timing
// assertion) and returns its exit code.
func (b *servedBinary) waitExit() int {
	b.t.Helper()
	select {
	case <-b.exited:
	case <-time.After(time.Minute):
		b.t.Fatalf("serve did not exit: %s", b.stderr.String())
	}
	return b.cmd.ProcessState.ExitCode()
}

func (b *servedBinary) waitLog(s string) {
	b.t.Helper()
	require.Eventually(b.t, func() bool { return strings.Contains(b.stderr.String(), s) }, 30*time.Second, 5*time.Millisecond,
		"no %q in the log: %s", s, b.stderr)
}

// openStream starts a stream and reads its first chunk.
func openStream(t *testing.T, c oai.Client, model string) (*streamReader, string) {
	t.Helper()
	s := c.Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{Model: model,
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
	require.True(t, s.Next(), "no first chunk: %v", s.Err())
	first := s.Current()
	return &streamReader{s: s, text: first.Choices[0].Delta.Content, models: map[string]bool{first.Model: true}}, first.Model
}

type streamReader struct {
	s interface {
		Next() bool
		Current() oai.ChatCompletionChunk
		Err() error
		Close() error
	}
	text   string
	models map[string]bool
}

// rest reads the stream to its end.
func (r *streamReader) rest() (string, map[string]bool, error) {
	defer r.s.Close()
	for r.s.Next() {
		c := r.s.Current()
		r.models[c.Model] = true
		for _, ch := range c.Choices {
			r.text += ch.Delta.Content
		}
	}
	return r.text, r.models, r.s.Err()
}

func writeHeldPolicy(t *testing.T, file, upstream string, routes ...string) {
	var ms []string
	for _, r := range routes {
		ms = append(ms, fmt.Sprintf(`{"name": %q, "provider": "openai", "model": %q, "base_url": %q, "api_key_env": "UPSTREAM_KEY"}`, r, r, upstream+"/v1"))
	}
	writeAtomically(t, file, `{"models": [`+strings.Join(ms, ",")+`], "deadlines": {"first_content": "10s"}}`)
}

// writeAtomically replaces file by a rename, as editors and config
// managers do, so that the watcher never reads it half written.
func writeAtomically(t *testing.T, file, data string) {
	tmp := file + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(data), 0o600))
	require.NoError(t, os.Rename(tmp, file))
}

// serveHeldStream serves route "m" on a held upstream with the given
// drain and returns once a stream through it has read its first chunk:
// the state every signal test starts from.
func serveHeldStream(t *testing.T, drain string) (*heldUpstream, *servedBinary, *streamReader) {
	t.Helper()
	up := newHeldUpstream(t)
	pol := filepath.Join(t.TempDir(), "policy.json")
	writeHeldPolicy(t, pol, up.srv.URL, "m")
	b := startServeBinary(t, "--policy", pol, "--drain", drain)
	st, _ := openStream(t, b.client(), "m")
	<-up.started
	return up, b, st
}

// SIGTERM: the listener closes at once (new connections are refused), a
// stream in flight finishes whole within the drain, and serve exits 0.
func TestServeBinary_SIGTERMDrainsInFlightStreams(t *testing.T) {
	up, b, st := serveHeldStream(t, "30s")

	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	b.waitLog("draining")
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", b.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, 10*time.Second, 5*time.Millisecond, "new connections are refused while draining")
	select {
	case <-b.exited:
		t.Fatalf("serve exited with a stream in flight: %s", b.stderr)
	default:
	}

	up.free()
	text, models, err := st.rest()
	require.NoError(t, err, "the stream in flight finishes whole")
	require.Equal(t, "first second", text)
	require.Equal(t, map[string]bool{"m": true}, models)
	require.Equal(t, exitOK, b.waitExit(), b.stderr.String())
	require.Contains(t, b.stderr.String(), "retryhost serve: stopped")
	require.NotContains(t, b.stderr.String(), "drain deadline passed")
}

// Past the drain deadline a stream still in flight ends with the in-band
// shutting_down error and no [DONE]: the client's SDK reports an error, not
// a complete answer.
func TestServeBinary_SIGTERMPastTheDrainDeadline(t *testing.T) {
	_, b, st := serveHeldStream(t, "300ms")

	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	text, _, err := st.rest()
	require.Error(t, err, "a stream ended by the drain deadline must not read as complete")
	require.Contains(t, err.Error(), "shutting down")
	require.Equal(t, "first", text)
	require.Equal(t, exitOK, b.waitExit(), b.stderr.String())
	require.Contains(t, b.stderr.String(), "drain deadline passed")
	require.Contains(t, b.stderr.String(), `"outcome":"shutdown"`)
}

// A second SIGTERM during the drain ends the process at once, as the CLI
// promises for every command (an operator who does not want to wait).
func TestServeBinary_SecondSignalEndsTheDrain(t *testing.T) {
	_, b, st := serveHeldStream(t, "5m")
	defer st.s.Close()

	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	b.waitLog("draining")
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	code := b.waitExit()
	require.NotEqual(t, exitOK, code, "the second signal ended serve before its drain: %s", b.stderr)
}

// SIGHUP and a change of the file both reload the policy: a stream in
// flight finishes on the policy it started with, new requests get the new
// one; a bad policy is rejected, logged and counted, and the old one stays.
func TestServeBinary_ReloadKeepsInFlightOnTheirVersion(t *testing.T) {
	for _, how := range []string{"SIGHUP", "file change"} {
		t.Run(how, func(t *testing.T) {
			up := newHeldUpstream(t)
			pol := filepath.Join(t.TempDir(), "policy.json")
			writeHeldPolicy(t, pol, up.srv.URL, "old")
			args := []string{"--policy", pol}
			if how == "SIGHUP" {
				args = append(args, "--watch=false")
			}
			b := startServeBinary(t, args...)
			c := b.client()
			st, _ := openStream(t, c, "old")
			<-up.started

			reload := func() {
				if how == "SIGHUP" {
					require.NoError(t, b.cmd.Process.Signal(syscall.SIGHUP))
				}
			}
			time.Sleep(20 * time.Millisecond) // a distinct modification time
			writeHeldPolicy(t, pol, up.srv.URL, "new")
			reload()
			b.waitLog(`"msg":"policy reloaded"`)
			ms, err := c.Models.List(context.Background())
			require.NoError(t, err)
			require.Len(t, ms.Data, 1)
			require.Equal(t, "new", ms.Data[0].ID)

			up.free()
			text, models, err := st.rest()
			require.NoError(t, err, "the stream in flight finished on its own policy")
			require.Equal(t, "first second", text)
			require.Equal(t, map[string]bool{"old": true}, models)

			time.Sleep(20 * time.Millisecond)
			writeAtomically(t, pol, `{"models": [{"name": "broken"`)
			reload()
			b.waitLog("policy reload rejected")
			ms, err = c.Models.List(context.Background())
			require.NoError(t, err)
			require.Equal(t, "new", ms.Data[0].ID, "the old policy stays")
			m := b.metrics()
			require.Contains(t, m, "retryhost_gateway_reload_failures_total 1\n")
			require.Contains(t, m, "retryhost_gateway_reloads_total 1\n")

			require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
			require.Equal(t, exitOK, b.waitExit(), b.stderr.String())
		})
	}
}

// --max-answer caps what a non-streaming request holds until its answer is
// complete: past it the client gets 502 answer_too_large; a stream is not
// bounded by it.
func TestServe_MaxAnswerFlag(t *testing.T) {
	up := newHeldUpstream(t)
	up.free()
	pol := filepath.Join(t.TempDir(), "policy.json")
	writeHeldPolicy(t, pol, up.srv.URL, "m")
	t.Setenv("UPSTREAM_KEY", "sk-upstream")
	base, _, stop := startServe(t, "--policy", pol, "--max-answer", "1")
	c := oai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	_, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "m",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
	var apiErr *oai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadGateway, apiErr.StatusCode)
	require.Equal(t, "answer_too_large", apiErr.Code)
	st, _ := openStream(t, c, "m")
	text, _, err := st.rest()
	require.NoError(t, err)
	require.Equal(t, "first second", text)
	require.Equal(t, exitOK, stop())
	var stderr bytes.Buffer
	require.Equal(t, exitInput, dispatch(context.Background(), []string{"serve", "--max-answer", "0"}, io.Discard, &stderr))
	require.Contains(t, stderr.String(), "max answer bytes must be positive")
}

// A change to a plugin file the policy names by path reloads the policy,
// as a change to the policy file does: a broken plugin is rejected (the
// old policy stays), a good one is taken.
func TestServe_ReloadsWhenAPluginFileChanges(t *testing.T) {
	up := newHeldUpstream(t)
	up.free()
	dir := t.TempDir()
	wasm, err := os.ReadFile("../../plugins/c/refusal.wasm")
	require.NoError(t, err)
	plugin := filepath.Join(dir, "plugins", "refusal.wasm")
	require.NoError(t, os.MkdirAll(filepath.Dir(plugin), 0o755))
	writeAtomically(t, plugin, string(wasm))
	pol := filepath.Join(dir, "policy.json")
	writeAtomically(t, pol, fmt.Sprintf(`{"models": [{"name": "m", "provider": "openai", "model": "m", "base_url": %q, "api_key_env": "UPSTREAM_KEY"}],
		// a relative path: against the policy file's directory
		"transforms": [{"plugin": {"path": "plugins/refusal.wasm"}}]}`, up.srv.URL+"/v1"))
	t.Setenv("UPSTREAM_KEY", "sk-upstream")
	base, stderr, stop := startServe(t, "--policy", pol)
	// Counted from where they stand, not from 0: a loaded machine's first
	// poll may see the files as they were just written.
	count := func(name string) int {
		m := regexp.MustCompile(`(?m)^` + name + ` (\d+)$`).FindStringSubmatch(metricsAt(t, base))
		require.NotNil(t, m, "no %s in /metrics", name)
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		return n
	}
	failures0 := count("retryhost_gateway_reload_failures_total")

	writeAtomically(t, plugin, "not wasm")
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "policy reload rejected") },
		10*time.Second, 20*time.Millisecond, "a broken plugin file was not noticed: %s", stderr)
	require.Greater(t, count("retryhost_gateway_reload_failures_total"), failures0, "the rejected reload is counted")
	resp, body := post(t, base+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the old policy stays: %s", body)

	reloads0 := count("retryhost_gateway_reloads_total")
	writeAtomically(t, plugin, string(wasm))
	require.Eventually(t, func() bool { return count("retryhost_gateway_reloads_total") > reloads0 },
		10*time.Second, 20*time.Millisecond, "a good plugin file was not taken: %s", stderr)
	require.Equal(t, exitOK, stop())
}

func TestPolicyFiles(t *testing.T) {
	dir := t.TempDir()
	js := filepath.Join(dir, "p.json")
	writeAtomically(t, js, `{"models": [{"name": "m", "provider": "openai", "model": "m"}],
		"rules": [{"plugin": {"path": "a.wasm"}}, {"plugin": {"builtin": "refusal"}}, {"plugin": {"path": "/abs/b.wasm"}}],
		"transforms": [{"plugin": {"path": "a.wasm"}}, {"refusal": {}}]}`)
	require.Equal(t, []string{js, filepath.Join(dir, "a.wasm"), "/abs/b.wasm"}, policyFiles(js))
	yml := filepath.Join(dir, "p.yaml")
	writeAtomically(t, yml, "models:\n  - {name: m, provider: openai, model: m}\ntransforms:\n  - plugin: {path: sub/c.wasm}\n")
	require.Equal(t, []string{yml, filepath.Join(dir, "sub", "c.wasm")}, policyFiles(yml))
	bad := filepath.Join(dir, "bad.json")
	writeAtomically(t, bad, `{"models": [`)
	require.Equal(t, []string{bad}, policyFiles(bad))
	require.Equal(t, []string{filepath.Join(dir, "missing.json")}, policyFiles(filepath.Join(dir, "missing.json")))
}
