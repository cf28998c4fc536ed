package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	require.Contains(t, stdout.String()+stderr.String(), "transforms[0].plugin.oci: oci: reference is not pinned by digest")
}
