package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/plugins"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = dispatch(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// commandPaths lists every runnable command path: "demo", "plugin inspect", …
func commandPaths() [][]string {
	var out [][]string
	for _, c := range sortedCommands() {
		out = append(out, []string{c.name})
		for _, s := range c.subs {
			out = append(out, []string{c.name, s.name})
		}
	}
	return out
}

func TestHelp_ExitsZeroEverywhereInOneFormatWithin100Columns(t *testing.T) {
	forms := [][]string{{"--help"}, {"-h"}, {"help"}, {"-help"}}
	for _, path := range commandPaths() {
		forms = append(forms,
			append(slices.Clone(path), "--help"),
			append(slices.Clone(path), "-h"),
			append([]string{"help"}, path...),
			// --help wins wherever it is, after arguments and other flags too
			append(slices.Clone(path), "some-arg", "--log-level", "debug", "--help"))
	}
	for _, args := range forms {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, stdout, stderr := run(t, args...)
			require.Equal(t, exitOK, code, stderr)
			require.Empty(t, stderr)
			require.True(t, strings.HasPrefix(stdout, "usage: retryhost"), stdout)
			require.Contains(t, stdout, "\nglobal flags (any command, before or after its arguments):\n  --cache-dir DIR ")
			require.Contains(t, stdout, "  -h, --help ")
			for line := range strings.Lines(stdout) {
				require.LessOrEqual(t, utf8.RuneCountInString(strings.TrimSuffix(line, "\n")), helpWidth, "%q", line)
			}
		})
	}
}

func TestFlags_BeforeOrAfterTheArguments(t *testing.T) {
	pol := runPolicy(t, true) // a 429, then the answer
	for _, args := range [][]string{
		{"run", "--policy", pol, "--call", "hi"},
		{"run", "hi", "--policy", pol, "--call"},
		{"run", "--call", "hi", "--policy=" + pol},
		{"--log-level", "error", "run", "hi", "--call", "--policy", pol},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, stdout, stderr := run(t, args...)
			require.Equal(t, exitOK, code, stderr)
			require.Equal(t, "The capital of France is Paris.\n", stdout)
		})
	}
	// "--" ends the flags: what follows is the prompt, dashes and all.
	code, stdout, stderr := run(t, "run", "--call", "--policy", pol, "--", "--json")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "The capital of France is Paris.\n", stdout, "--json after -- is text, not the flag")

	code, stdout, _ = run(t, "plugin", "inspect", "refusal", "--json")
	require.Equal(t, exitOK, code)
	require.True(t, json.Valid([]byte(stdout)), stdout)
	code, stdout, _ = run(t, "replay", passing, "--json")
	require.Equal(t, exitOK, code)
	require.True(t, json.Valid([]byte(stdout)), stdout)
}

// Each kind of failure has one exit code, whichever command meets it.
func TestExitCodes_OnePerKindOfFailure(t *testing.T) {
	pol := runPolicy(t, false)
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"run", "--policy", missing + ".json", "hi"}, exitInput},
		{[]string{"plugin", "inspect", missing + ".wasm"}, exitInput},
		{[]string{"replay", missing + ".json"}, exitInput},
		{[]string{"run", "--nope", "--policy", pol, "hi"}, exitUsage},
		{[]string{"plugin", "inspect", "--nope", "refusal"}, exitUsage},
		{[]string{"replay", "--nope", passing}, exitUsage},
		{[]string{"demo", "--nope"}, exitUsage},
		{[]string{"version", "extra"}, exitUsage},
		{[]string{"completion", "tcsh"}, exitUsage},
		{[]string{"--log-level", "loud", "version"}, exitUsage},
		{[]string{"version", "--log-format", "xml"}, exitUsage},
		{[]string{"plugin", "frob"}, exitUsage},
		{[]string{"replay", failing}, exitFail},
		{[]string{"plugin", "inspect", "../../host/testdata/nokind.wasm"}, exitFail},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := run(t, tc.args...)
			require.Equal(t, tc.code, code, stderr)
			if tc.code == exitUsage {
				require.Contains(t, stderr, "--help")
			}
		})
	}
}

func TestVersion_FromBuildInfo(t *testing.T) {
	code, stdout, stderr := run(t, "version")
	require.Equal(t, exitOK, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "retryhost "), stdout)
	require.Contains(t, stdout, runtime.Version()+", plugin ABI v1.")
	code, stdout, _ = run(t, "version", "--json")
	require.Equal(t, exitOK, code)
	var v buildVersion
	require.NoError(t, json.Unmarshal([]byte(stdout), &v))
	require.Equal(t, runtime.Version(), v.Go)
	require.NotEmpty(t, v.Version)
	require.NotEmpty(t, v.Wazero, "the wazero dependency's version")
}

func TestRun_StdinIsBoundedAndNotEmpty(t *testing.T) {
	pol := runPolicy(t, false)
	withStdin := func(r io.Reader) (int, string, string) {
		prev := runStdin
		runStdin = r
		defer func() { runStdin = prev }()
		return run(t, "run", "--policy", pol, "-")
	}
	code, stdout, stderr := withStdin(strings.NewReader(" \n\t\n"))
	require.Equal(t, exitInput, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "the prompt on stdin: empty")

	// An endless stdin is cut at the limit, not buffered whole.
	big := &countingReader{}
	code, _, stderr = withStdin(big)
	require.Equal(t, exitInput, code)
	require.Contains(t, stderr, "more than the 8 MiB limit")
	require.LessOrEqual(t, big.n, int64(maxStdin+1<<16), "read at most the limit (and a read's worth)")
}

// countingReader is an endless stdin of 'a's that counts what was read.
type countingReader struct{ n int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	c.n += int64(len(p))
	return len(p), nil
}

func TestReplay_DirectoriesRecurse(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(passing)
	require.NoError(t, err)
	nested := filepath.Join(dir, "team", "rate-limits")
	require.NoError(t, os.MkdirAll(nested, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, ".git"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(nested, "a.json"), b, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.json"), b, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".git", "c.json"), []byte("not a scenario"), 0o600))
	code, stdout, stderr := run(t, "replay", dir)
	require.Equal(t, exitOK, code, stdout+stderr)
	require.Contains(t, stdout, "PASS "+filepath.Join(nested, "a.json"))
	require.Contains(t, stdout, "2 scenario(s): 2 passed, 0 failed")

	empty := t.TempDir()
	code, _, stderr = run(t, "replay", empty)
	require.Equal(t, exitInput, code)
	require.Contains(t, stderr, "no scenario (*.json) in it or under it")
}

func TestPluginInspect_BuiltinsByNameAreAccepted(t *testing.T) {
	for _, p := range plugins.All() {
		t.Run(p.Name, func(t *testing.T) {
			t.Chdir(t.TempDir()) // no file of that name
			code, stdout, stderr := run(t, "plugin", "inspect", p.Name)
			require.Equal(t, exitOK, code, stdout+stderr)
			require.Contains(t, stdout, "file:     "+p.Name+" (built-in)\n")
			require.Contains(t, stdout, "accepted: yes\n")
			require.Contains(t, stdout, "config:   none given; loaded with the built-in's example config")
		})
	}
	// A given config is the one used, and a condition rejects a wrong one.
	code, stdout, _ := run(t, "plugin", "inspect", "errmatch", "--config", `{"rules": [{"status": ["x"]}]}`)
	require.Equal(t, exitFail, code)
	require.Contains(t, stdout, "accepted: no (config-rejected)")

	code, _, stderr := run(t, "plugin", "inspect", "no-such-builtin")
	require.Equal(t, exitInput, code)
	require.Contains(t, stderr, "no such file")
}

func TestPluginInspect_MarksWASIImportsAsStubs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	// The Go build of the refusal plugin imports WASI (the built-ins are C).
	// It runs in the built binary: under the race detector wazero compiles
	// a 4 MB Go guest some twenty times slower, past the compile timeout on
	// a busy machine.
	bin, err := buildOnce()
	require.NoError(t, err)
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, "plugin", "inspect", "../../plugins/refusal/refusal.wasm", "--config", `{"fail": "open"}`)
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Run(), errb.String())
	stdout := out.String()
	require.Contains(t, stdout, "wasi_snapshot_preview1.fd_write(i32, i32, i32, i32) i32  [stub: stdout/stderr to the host's logger")
	require.Contains(t, stdout, "wasi_snapshot_preview1.random_get(i32, i32) i32  [stub: deterministic, not random]")

	code, stdout, _ := run(t, "plugin", "inspect", "--json", "../../host/testdata/forbidden_file.wasm")
	require.Equal(t, exitFail, code)
	var r report
	require.NoError(t, json.Unmarshal([]byte(stdout), &r))
	var found bool
	for _, f := range r.Imports {
		if f.Name == "path_open" {
			found = true
			require.Equal(t, "forbidden", f.WASI)
		}
	}
	require.True(t, found)
}

func TestCompletion_Bash(t *testing.T) {
	code, script, stderr := run(t, "completion", "bash")
	require.Equal(t, exitOK, code, stderr)
	complete := func(words ...string) []string {
		t.Helper()
		file := filepath.Join(t.TempDir(), "c.bash")
		require.NoError(t, os.WriteFile(file, []byte(script), 0o600))
		var q []string
		for _, w := range words {
			q = append(q, fmt.Sprintf("%q", w))
		}
		prog := fmt.Sprintf(`source %q; COMP_WORDS=(%s); COMP_CWORD=%d; _retryhost; printf '%%s\n' "${COMPREPLY[@]}"`,
			file, strings.Join(q, " "), len(words)-1)
		cmd := exec.Command("bash", "--norc", "--noprofile", "-c", prog)
		cmd.Dir = t.TempDir() // no files to complete
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		return strings.Fields(string(out))
	}
	require.Subset(t, complete("retryhost", ""), []string{"completion", "demo", "plugin", "replay", "run", "version"})
	require.Equal(t, []string{"inspect", "push", "pull", "test", "new"}, complete("retryhost", "plugin", ""))
	require.Subset(t, complete("retryhost", "plugin", "inspect", ""), []string{"refusal", "errmatch"})
	require.Subset(t, complete("retryhost", "run", "hi", "--"), []string{"--policy", "--call", "--log-level", "--help"})
	require.Equal(t, []string{"debug"}, complete("retryhost", "run", "--log-level", "de"))
	require.Equal(t, []string{"json"}, complete("retryhost", "--log-format", "j"))
	require.Equal(t, []string{"zsh"}, complete("retryhost", "completion", "z"))
	// A flag's value is not taken for the subcommand.
	require.Subset(t, complete("retryhost", "--log-level", "info", "plugin", ""), []string{"inspect"})
}

func TestCompletion_ZshAndFish(t *testing.T) {
	code, zsh, _ := run(t, "completion", "zsh")
	require.Equal(t, exitOK, code)
	require.True(t, strings.HasPrefix(zsh, "#compdef retryhost\n"))
	require.Contains(t, zsh, "bashcompinit")
	require.Contains(t, zsh, "complete -o default -F _retryhost retryhost")

	code, fish, _ := run(t, "completion", "fish")
	require.Equal(t, exitOK, code)
	for _, want := range []string{
		"complete -c retryhost -n '__fish_use_subcommand' -a run -d ",
		"complete -c retryhost -n '__fish_seen_subcommand_from plugin; and not __fish_seen_subcommand_from inspect push pull test new' -a inspect",
		"complete -c retryhost -n '__fish_seen_subcommand_from run' -l policy -r -F",
		"complete -c retryhost -n '__fish_seen_subcommand_from plugin; and __fish_seen_subcommand_from inspect' -a 'refusal errmatch",
		"-l log-level -x -a 'debug info warn error off'",
	} {
		require.Contains(t, fish, want)
	}
}

// logServer answers every chat completion with a 500, so that the policy's
// condition plugin runs.
func logServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"error": {"message": "boom", "type": "server_error"}}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

func TestLogFlags_RouteTheLibrarysLogs(t *testing.T) {
	t.Setenv("RETRYHOST_RUN_TEST_KEY", "sk-test")
	pol := filepath.Join(t.TempDir(), "policy.json")
	huge, err := filepath.Abs("../../host/testdata/huge.wasm") // logs a line (cut at 1 KiB) on every call
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(pol, []byte(fmt.Sprintf(`{
  "models": [{"name": "m", "provider": "openai", "model": "gpt-x", "base_url": %q, "api_key_env": "RETRYHOST_RUN_TEST_KEY"}],
  "rules": [{"plugin": {"path": %q}}],
  "max_attempts": 2
}`, logServer(t), huge)), 0o600))

	// Default (warn): the plugin's log line and the host's events, no driver info.
	code, _, stderr := run(t, "run", "--call", "--policy", pol, "hi")
	require.Equal(t, exitFail, code, stderr)
	require.Contains(t, stderr, "plugin=", "the plugin's and the host's logs reach stderr")
	require.NotContains(t, stderr, "level=INFO")

	// info adds the driver's attempt events.
	_, _, stderr = run(t, "run", "--call", "--policy", pol, "hi", "--log-level", "info")
	require.Contains(t, stderr, `level=INFO msg="retryhost: attempt end"`)

	// off: none.
	_, _, stderr = run(t, "--log-level", "off", "run", "--call", "--policy", pol, "hi")
	require.NotContains(t, stderr, "level=")
	require.NotContains(t, stderr, "plugin=")

	// json: one object per line, for a log pipeline.
	_, _, stderr = run(t, "run", "--call", "--policy", pol, "hi", "--log-format", "json")
	var objects int
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "{") {
			var m map[string]any
			require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
			require.Contains(t, m, "level")
			objects++
		}
	}
	require.Positive(t, objects)
}

// The compilation cache is best-effort: without a usable directory the
// commands compile in memory and warn.
func TestCache_UnusableDirectoryFallsBackWithAWarning(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notADir, nil, 0o600))
	pol := watPolicy(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		// HOME is a file, so nothing can be made under it (root included).
		{"no usable HOME", map[string]string{"HOME": notADir, "XDG_CACHE_HOME": "", envCacheDir: ""}, nil},
		{"an unusable --cache-dir", nil, []string{"--cache-dir", filepath.Join(notADir, "cache")}},
		{"an unusable " + envCacheDir, map[string]string{envCacheDir: filepath.Join(notADir, "cache")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := append([]string{"run", "--call", "--policy", pol, "hi"}, tc.args...)
			code, stdout, stderr := run(t, args...)
			require.Equal(t, exitOK, code, stderr)
			require.Equal(t, "The capital of France is Paris.\n", stdout)
			require.Contains(t, stderr, "Wasm compilation cache off")
			require.Contains(t, stderr, "not a directory")
		})
	}
	t.Run("demo without a usable HOME", func(t *testing.T) {
		t.Setenv("HOME", notADir)
		t.Setenv("XDG_CACHE_HOME", "")
		t.Setenv(envCacheDir, "")
		code, stdout, stderr := run(t, "demo")
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, "done: answered by")
		require.Contains(t, stderr, "Wasm compilation cache off")
	})
}

// watPolicy is a policy with one answering loopback model and a small Wasm
// transform (WAT: compiled in milliseconds, cached or not).
func watPolicy(t *testing.T) string {
	t.Helper()
	p := &fakeProvider{name: "p", model: "gpt-x", chunks: []string{"The capital", " of France", " is Paris."}}
	srv := p.start()
	t.Cleanup(srv.Close)
	wasm, err := filepath.Abs("../../host/testdata/refusal.wasm")
	require.NoError(t, err)
	t.Setenv("RETRYHOST_RUN_TEST_KEY", "sk-test")
	path := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`{
  "models": [{"name": "p", "provider": "openai", "model": "gpt-x", "base_url": %q, "api_key_env": "RETRYHOST_RUN_TEST_KEY"}],
  "transforms": [{"plugin": {"path": %q}}]
}`, srv.URL+"/v1", wasm)), 0o600))
	return path
}

func TestCache_DirectoryFromTheFlagOrTheEnvironment(t *testing.T) {
	pol := watPolicy(t)
	for _, viaEnv := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "cache")
		args := []string{"run", "--call", "--policy", pol, "hi"}
		if viaEnv {
			t.Setenv(envCacheDir, dir)
		} else {
			args = append(args, "--cache-dir", dir)
		}
		code, _, stderr := run(t, args...)
		require.Equal(t, exitOK, code, stderr)
		require.NotContains(t, stderr, "cache off")
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.NotEmpty(t, entries, "compiled code cached in %s", dir)
	}
	// off: no cache, no warning.
	code, _, stderr := run(t, "run", "--call", "--policy", pol, "hi", "--cache-dir", "off")
	require.Equal(t, exitOK, code, stderr)
	require.NotContains(t, stderr, "cache off")
}

// builtDir holds the binary buildOnce built; TestMain removes it.
var builtDir string

var buildOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "retryhost-cli-")
	if err != nil {
		return "", err
	}
	builtDir = dir
	bin := filepath.Join(dir, "retryhost")
	// Static and stripped, as the container image ships it (deploy/Dockerfile),
	// so the image test measures the size users pull.
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%v: %s", err, out)
	}
	return bin, nil
})

// SIGINT and SIGTERM stop a request the same way: the attempts so far are
// summarised and the exit code is 128+signal.
func TestSignals_StopARunWithASummary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin, err := buildOnce()
	require.NoError(t, err)
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
		name string
	}{
		{syscall.SIGINT, 130, "SIGINT"},
		{syscall.SIGTERM, 143, "SIGTERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A provider that never answers: the request waits until the signal.
			quit := make(chan struct{})
			stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body) // then net/http notices the client leaving
				select {
				case <-r.Context().Done():
				case <-quit:
				}
			}))
			defer stall.Close()
			defer close(quit)
			t.Setenv("RETRYHOST_RUN_TEST_KEY", "sk-test")
			pol := filepath.Join(t.TempDir(), "policy.json")
			require.NoError(t, os.WriteFile(pol, []byte(fmt.Sprintf(`{"models": [
  {"name": "m", "provider": "openai", "model": "gpt-x", "base_url": %q, "api_key_env": "RETRYHOST_RUN_TEST_KEY"}]}`,
				stall.URL+"/v1")), 0o600))
			cmd := exec.Command(bin, "run", "--policy", pol, "hi", "--log-level", "debug")
			stderr, err := cmd.StderrPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			var log strings.Builder
			lines := make(chan string)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			started := false
			hang := time.After(time.Minute) // a guard against a hang, not a timing assertion
			for !started {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("the run ended before its attempt started:\n%s", log.String())
					}
					log.WriteString(l + "\n")
					started = strings.Contains(l, "attempt start")
				case <-hang:
					_ = cmd.Process.Kill()
					t.Fatalf("no attempt started:\n%s", log.String())
				}
			}
			require.NoError(t, cmd.Process.Signal(tc.sig))
			for l := range lines {
				log.WriteString(l + "\n")
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, log.String())
			require.Equal(t, tc.code, ee.ExitCode(), log.String())
			require.Contains(t, log.String(), "retryhost run: interrupted by "+tc.name+"\n")
			require.Contains(t, log.String(), "stopped after 1 attempt(s) (1 failed, the last on m)")
		})
	}
}

// replay routes the plugins' logs and the host's events too.
func TestReplay_LogsReachStderr(t *testing.T) {
	const hostile = "../../testdata/scenarios/hostile-huge-fail-closed.json"
	code, _, stderr := run(t, "replay", hostile)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, `level=WARN msg="plugin instance discarded" plugin=huge.wasm`)
	code, _, stderr = run(t, "replay", hostile, "--log-level", "off")
	require.Equal(t, exitOK, code)
	require.Empty(t, stderr)
}
