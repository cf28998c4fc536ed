package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ggcr "github.com/google/go-containerregistry/pkg/registry"
	"github.com/stretchr/testify/require"
)

func TestPluginPushPull(t *testing.T) {
	srv := httptest.NewServer(ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials: anonymous
	file := filepath.Join("..", "..", "host", "testdata", "condition.wasm")
	wasm, err := os.ReadFile(file)
	require.NoError(t, err)
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := dispatch(context.Background(), args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	code, out, errOut := run("plugin", "push", "--plain-http", "--plugin-cache", t.TempDir(), file, addr+"/team/cond:v1")
	require.Equal(t, exitOK, code, errOut)
	pinned := strings.TrimSpace(out)
	require.Regexp(t, `^`+addr+`/team/cond@sha256:[0-9a-f]{64}$`, pinned)

	dst := filepath.Join(t.TempDir(), "got.wasm")
	code, out, errOut = run("plugin", "pull", pinned, "--plain-http", "--plugin-cache", t.TempDir(), "-o", dst)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, pinned, strings.TrimSpace(out), "pull prints the reference pinned by digest")
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	require.Equal(t, wasm, got)

	code, _, errOut = run("plugin", "pull", "--plain-http", "--plugin-cache", t.TempDir(), addr+"/team/cond:v1")
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut, "--allow-tag")
	code, out, errOut = run("plugin", "pull", "--allow-tag", "--plain-http", "--plugin-cache", t.TempDir(), addr+"/team/cond:v1")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, pinned, strings.TrimSpace(out))
	require.Contains(t, errOut, "tag resolved to digest")

	code, _, _ = run("plugin", "push", file)
	require.Equal(t, exitUsage, code)
	code, _, _ = run("plugin", "pull")
	require.Equal(t, exitUsage, code)
}

// TestPolicyOCIReference: the CLI's policy commands resolve "oci" plugins
// (here refusing a tag before any network).
func TestPolicyOCIReference(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	file := filepath.Join(t.TempDir(), "p.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"models": [{"name": "a", "provider": "openai", "model": "m", "api_key_env": "K"}],
	  "transforms": [{"plugin": {"oci": "127.0.0.1:1/team/x:v1"}}]}`), 0o644))
	var stdout, stderr bytes.Buffer
	code := dispatch(context.Background(), []string{"policy", "check", file}, &stdout, &stderr)
	require.NotEqual(t, exitOK, code)
	require.Contains(t, stdout.String()+stderr.String(),
		`transforms[0].plugin.oci: 127.0.0.1:1/team/x:v1 names a tag, not a digest: pin it (…@sha256:…), or set "follow_tag": true`)
}

// startRegistry serves an OCI registry on loopback, optionally behind
// basic auth (user ci, password s3cret), and returns its host:port.
func startRegistry(t *testing.T, basicAuth bool) (string, *httptest.Server) {
	t.Helper()
	h := ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); basicAuth && (!ok || u != "ci" || p != "s3cret") {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"login"}]}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), srv
}

func runCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := dispatch(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestPluginPushPull_Credentials: push and pull use the standard Docker
// credential file ($DOCKER_CONFIG/config.json) against a registry that
// requires basic auth.
func TestPluginPushPull_Credentials(t *testing.T) {
	addr, _ := startRegistry(t, true)
	dir := t.TempDir()
	t.Setenv("DOCKER_CONFIG", dir)
	file := filepath.Join("..", "..", "host", "testdata", "condition.wasm")
	login := func(userpass string) {
		b, err := json.Marshal(map[string]any{"auths": map[string]any{addr: map[string]string{
			"auth": base64.StdEncoding.EncodeToString([]byte(userpass)),
		}}})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600))
	}

	code, _, errOut := runCLI("plugin", "push", "--plain-http", "--plugin-cache", t.TempDir(), file, addr+"/team/cond:v1")
	require.Equal(t, exitFail, code, "no credentials")
	require.Contains(t, errOut, "basic credential not found", "the README quotes it")
	login("ci:wrong")
	code, _, errOut = runCLI("plugin", "push", "--plain-http", "--plugin-cache", t.TempDir(), file, addr+"/team/cond:v1")
	require.Equal(t, exitFail, code, "wrong credentials")
	require.Contains(t, errOut, "401")

	login("ci:s3cret")
	code, out, errOut := runCLI("plugin", "push", "--plain-http", "--plugin-cache", t.TempDir(), file, addr+"/team/cond:v1")
	require.Equal(t, exitOK, code, errOut)
	pinned := strings.TrimSpace(out)
	require.Regexp(t, `^`+addr+`/team/cond@sha256:[0-9a-f]{64}$`, pinned, "push prints the digest")
	code, out, errOut = runCLI("plugin", "pull", "--plain-http", "--plugin-cache", t.TempDir(), pinned)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, pinned, strings.TrimSpace(out), "pull prints the digest")

	require.NoError(t, os.Remove(filepath.Join(dir, "config.json")))
	code, _, errOut = runCLI("plugin", "pull", "--plain-http", "--plugin-cache", t.TempDir(), pinned)
	require.Equal(t, exitFail, code, "credentials gone, cache empty: refused")
	require.Contains(t, errOut, "credential")
}

// TestPolicyOCI_FollowTagAndRegistryDown: a policy's tag is refused unless
// its plugin says "follow_tag" (then resolved and logged); with the
// registry down, a pinned reference once cached loads, and so does a
// followed tag once resolved (on its last digest).
func TestPolicyOCI_FollowTagAndRegistryDown(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	addr, srv := startRegistry(t, false)
	cache := t.TempDir()
	file := filepath.Join("..", "..", "host", "testdata", "upper.wasm")
	code, out, errOut := runCLI("plugin", "push", "--plain-http", "--plugin-cache", t.TempDir(), file, addr+"/team/upper:v1")
	require.Equal(t, exitOK, code, errOut)
	pinned := strings.TrimSpace(out)

	write := func(plugin string) string {
		f := filepath.Join(t.TempDir(), "p.json")
		require.NoError(t, os.WriteFile(f, []byte(`{"models": [{"name": "a", "provider": "openai", "model": "m", "api_key_env": "K"}],
		  "transforms": [{"plugin": `+plugin+`}]}`), 0o644))
		return f
	}
	tag := write(`{"oci": "` + addr + `/team/upper:v1"}`)
	follow := write(`{"oci": "` + addr + `/team/upper:v1", "follow_tag": true}`)
	pin := write(`{"oci": "` + pinned + `"}`)
	check := func(f string) (int, string, string) {
		return runCLI("policy", "check", "--registry-plain-http", "--plugin-cache", cache, f)
	}

	code, out, _ = check(tag)
	require.Equal(t, exitFail, code)
	require.Contains(t, out, `names a tag, not a digest: pin it (…@sha256:…), or set "follow_tag": true`)
	code, out, errOut = check(follow)
	require.Equal(t, exitOK, code, out+errOut)
	require.Contains(t, errOut, "tag resolved to digest", "the resolution is logged at the default log level")
	require.Contains(t, errOut, strings.SplitN(pinned, "@", 2)[1])
	code, out, errOut = check(pin)
	require.Equal(t, exitOK, code, out+errOut)

	srv.Close()
	code, out, errOut = check(pin)
	require.Equal(t, exitOK, code, "registry down: the cached digest serves\n%s%s", out, errOut)
	code, out, errOut = check(follow)
	require.Equal(t, exitOK, code, "registry down: a followed tag loads the digest it last resolved to\n%s%s", out, errOut)
	require.Contains(t, errOut, "registry unreachable; using the digest the tag last resolved to")
	code, out, _ = runCLI("policy", "check", "--registry-plain-http", "--plugin-cache", t.TempDir(), follow)
	require.Equal(t, exitFail, code, "registry down, nothing cached: the tag cannot be resolved")
	require.Contains(t, out, addr+"/team/upper:v1")
}

// TestServe_FollowsATag: serve reloads the policy when a new version is
// pushed behind a tag a plugin follows (--plugin-poll), and --plugin-poll
// must be positive.
func TestServe_FollowsATag(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	t.Setenv("UPSTREAM_KEY", "sk-upstream")
	addr, _ := startRegistry(t, false)
	cache := t.TempDir()
	push := func(name string) {
		file := filepath.Join("..", "..", "host", "testdata", name+".wasm")
		code, _, errOut := runCLI("plugin", "push", "--plain-http", "--plugin-cache", t.TempDir(), file, addr+"/team/xf:stable")
		require.Equal(t, exitOK, code, errOut)
	}
	push("upper")
	up := startDemoUpstreamForTest(t)
	pol := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(pol, []byte(`{"models": [{"name": "g", "provider": "openai", "model": "llama", "base_url": "`+up+`", "api_key_env": "UPSTREAM_KEY"}],
		"transforms": [{"plugin": {"oci": "`+addr+`/team/xf:stable", "follow_tag": true}}]}`), 0o600))
	base, stderr, stop := startServe(t, "--policy", pol, "--registry-plain-http", "--plugin-cache", cache, "--plugin-poll", "10ms")
	answer := func() string {
		resp, body := post(t, base+"/v1/chat/completions", `{"model":"g","messages":[{"role":"user","content":"capital of France?"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		var cc struct {
			Choices []struct{ Message struct{ Content string } }
		}
		require.NoError(t, json.Unmarshal([]byte(body), &cc))
		return cc.Choices[0].Message.Content
	}
	require.Equal(t, "THE CAPITAL OF FRANCE IS PARIS, ON THE SEINE.", answer(), "v1 upper-cases")
	push("refusal")
	require.Eventually(t, func() bool { return answer() == "The capital of France is Paris, on the Seine." },
		20*time.Second, 10*time.Millisecond, "v2 passes the text: %s", stderr)
	require.Contains(t, stderr.String(), "a followed plugin has a new version")
	require.Equal(t, exitOK, stop())

	var errBuf bytes.Buffer
	require.Equal(t, exitInput, dispatch(context.Background(), []string{"serve", "--plugin-poll", "0"}, io.Discard, &errBuf))
	require.Contains(t, errBuf.String(), "plugin poll interval must be positive")
}
