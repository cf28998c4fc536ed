package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/gateway/vkey"
	"github.com/retryhost/retryhost/internal/testkit/redistest"
)

// keyStorePolicy writes a policy of one route, b, to an upstream that
// answers every request.
func keyStorePolicy(t *testing.T) string {
	t.Helper()
	prov := httptest.NewServer(&spendUpstream{})
	t.Cleanup(prov.Close)
	pol := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(pol, []byte(fmt.Sprintf(`{
	"models": [{"name": "b", "provider": "openai", "model": "model-b", "base_url": %q, "api_key_env": "UPSTREAM_KEY"}],
	"rules": []
}`, prov.URL+"/v1")), 0o600))
	return pol
}

// status sends a chat request with secret to b and returns its status.
func (b *servedBinary) status(t *testing.T, secret string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base()+"/v1/chat/completions",
		strings.NewReader(`{"model": "b", "messages": [{"role": "user", "content": "hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// keysCLI runs `retryhost keys` on the Redis at url and returns what it printed.
func keysCLI(t *testing.T, url string, args ...string) (stdout string) {
	t.Helper()
	code, stdout, stderr := run(t, append(append([]string{"keys"}, args...), "--keys-redis", url)...)
	require.Equal(t, exitOK, code, stderr)
	return strings.TrimSpace(stdout)
}

// TestServeTakesRedisKeyEditsWithoutARestart: a serve on --keys-redis
// admits a key the CLI creates, refuses it once revoked (401), refuses a
// rotated key's old secret and admits its new one, all within the poll
// period and without a restart; a malformed record then keeps the keys
// in use, with one warning; two CLIs creating keys at once both land.
func TestServeTakesRedisKeyEditsWithoutARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a redis-server")
	}
	srv := redistest.Start(t)
	pol := keyStorePolicy(t)
	stay := keysCLI(t, srv.URL(), "create", "stays")
	b := startServeBinary(t, "--policy", pol, "--watch=false", "--drain", "2s", "--keys-redis", srv.URL())
	require.Equal(t, http.StatusOK, b.status(t, stay))

	admitted := func(secret string, want int) {
		t.Helper()
		require.Eventually(t, func() bool { return b.status(t, secret) == want }, 15*time.Second, 20*time.Millisecond,
			"want %d; serve's log:\n%s", want, b.stderr.String())
	}
	a := keysCLI(t, srv.URL(), "create", "team-a", "--rpm", "600", "--meta", "team=a")
	require.True(t, strings.HasPrefix(a, vkey.SecretPrefix), a)
	admitted(a, http.StatusOK)
	keysCLI(t, srv.URL(), "revoke", "team-a")
	admitted(a, http.StatusUnauthorized)

	old := keysCLI(t, srv.URL(), "create", "team-b")
	admitted(old, http.StatusOK)
	rotated := keysCLI(t, srv.URL(), "rotate", "team-b")
	require.NotEqual(t, old, rotated)
	admitted(rotated, http.StatusOK)
	require.Equal(t, http.StatusUnauthorized, b.status(t, old))

	// Two CLIs (processes) at once: both keys land.
	bin, err := buildOnce()
	require.NoError(t, err)
	var wg sync.WaitGroup
	secrets := make([]string, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			out, err := exec.Command(bin, "keys", "create", fmt.Sprint("racer-", i), "--keys-redis", srv.URL()).Output()
			secrets[i], errs[i] = strings.TrimSpace(string(out)), err
		})
	}
	wg.Wait()
	for i := range 2 {
		require.NoError(t, errs[i])
		admitted(secrets[i], http.StatusOK)
	}

	// A malformed record: the set in use stays, with one warning.
	_, err = srv.Do("HSET", "{retryhost:keys}records", "broken", `{"id": "broken", "hash": "md5:00"}`)
	require.NoError(t, err)
	_, err = srv.Do("INCR", "{retryhost:keys}version")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(b.stderr.String(), "Redis key set reload failed") },
		15*time.Second, 20*time.Millisecond)
	require.Equal(t, http.StatusOK, b.status(t, stay))
	require.Equal(t, http.StatusOK, b.status(t, rotated))
	_, err = srv.Do("HDEL", "{retryhost:keys}records", "broken")
	require.NoError(t, err)
	fixed := keysCLI(t, srv.URL(), "create", "after-fix")
	admitted(fixed, http.StatusOK)
	require.Equal(t, 1, strings.Count(b.stderr.String(), "Redis key set reload failed"), b.stderr.String())

	// Redis down: the keys in use stay in force.
	srv.Kill()
	require.Equal(t, http.StatusOK, b.status(t, fixed))
	require.Equal(t, http.StatusUnauthorized, b.status(t, a))
}

// TestServeKeysRedisRefusesToStart: serve does not start on --keys-redis
// beside --keys-file, on a Redis that does not answer, or on a set with a
// malformed record (the error names the key).
func TestServeKeysRedisRefusesToStart(t *testing.T) {
	srv := redistest.Start(t)
	pol := keyStorePolicy(t)
	_, err := srv.Do("HSET", "{retryhost:keys}records", "bad-one", `{"id": "bad-one", "hash": "sha256:00", "rpm": 1}`)
	require.NoError(t, err)
	down := redistest.Start(t)
	downURL := down.URL()
	down.Kill()
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"both homes", []string{"--keys-redis", srv.URL(), "--keys-file", filepath.Join(t.TempDir(), "k.json")}, exitUsage, "--keys-file and --keys-redis"},
		{"redis down", []string{"--keys-redis", downURL}, exitInput, "--keys-redis:"},
		{"malformed record", []string{"--keys-redis", srv.URL()}, exitInput, `"bad-one"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, append([]string{"serve", "--addr", "127.0.0.1:0", "--policy", pol, "--watch=false"}, tc.args...)...)
			require.Equal(t, tc.code, code, stderr)
			require.Contains(t, stderr, tc.msg)
			require.NotContains(t, stderr, "listening on")
		})
	}
}

// TestKeysRedisCLI: the CLI on a Redis key set prints a secret once and
// no hash, and exits as on a key file: 1 for a key it has or lacks, 3
// for a Redis that does not answer.
func TestKeysRedisCLI(t *testing.T) {
	srv := redistest.Start(t)
	url := srv.URL()
	secret := keysCLI(t, url, "create", "team-a", "--route", "gpt-*", "--tpm", "100", "--meta", "owner=ana")
	raw, err := srv.Query("HGET", "{retryhost:keys}records", "team-a")
	require.NoError(t, err)
	require.Len(t, raw, 1)
	require.NotContains(t, raw[0], secret)
	require.Contains(t, raw[0], vkey.Hash(secret))
	for _, args := range [][]string{{"list"}, {"list", "--json"}, {"show", "team-a"}, {"show", "team-a", "--json"}} {
		out := keysCLI(t, url, args...)
		require.Contains(t, out, "team-a")
		require.Contains(t, out, "ana")
		require.NotContains(t, out, secret)
		require.NotContains(t, out, "sha256:")
	}
	require.Contains(t, keysCLI(t, url, "show", "team-a"), "gpt-*")

	// on-store-down reads and sets the set's settings, moving its version.
	require.Equal(t, vkey.StoreDownLocal, keysCLI(t, url, "on-store-down"))
	ver, err := srv.Query("GET", "{retryhost:keys}version")
	require.NoError(t, err)
	require.Empty(t, keysCLI(t, url, "on-store-down", vkey.StoreDownRefuse))
	require.Equal(t, vkey.StoreDownRefuse, keysCLI(t, url, "on-store-down"))
	raw, err = srv.Query("GET", "{retryhost:keys}settings")
	require.NoError(t, err)
	require.Equal(t, []string{`{"on_store_down":"refuse"}`}, raw)
	ver2, err := srv.Query("GET", "{retryhost:keys}version")
	require.NoError(t, err)
	require.NotEqual(t, ver, ver2)

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"create", "team-a"}, exitFail, `already has a key named "team-a"`},
		{[]string{"create", "team-c", "--route", "g*t"}, exitFail, "a prefix ending in *"},
		{[]string{"revoke", "nobody"}, exitFail, `no key named "nobody"`},
		{[]string{"rotate", "nobody"}, exitFail, `no key named "nobody"`},
		{[]string{"show", "nobody"}, exitFail, `no key named "nobody"`},
		{[]string{"list", "--keys-file", "k.json"}, exitUsage, "give one, not both"},
		{[]string{"on-store-down", "open"}, exitUsage, "local or refuse"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := run(t, append(append([]string{"keys"}, tc.args...), "--keys-redis", url)...)
			require.Equal(t, tc.code, code, stderr)
			require.Contains(t, stderr, tc.msg)
			require.Empty(t, stdout)
		})
	}
	keysCLI(t, url, "revoke", "team-a")
	code, stdout, stderr := run(t, "keys", "rotate", "team-a", "--keys-redis", url)
	require.Equal(t, exitFail, code, stderr)
	require.Contains(t, stderr, "is revoked")
	require.Empty(t, stdout)

	srv.Kill()
	for _, args := range [][]string{{"list"}, {"create", "team-d"}, {"rotate", "team-a"}, {"on-store-down", "local"}} {
		code, stdout, stderr := run(t, append(append([]string{"keys"}, args...), "--keys-redis", url)...)
		require.Equal(t, exitInput, code, stderr)
		require.Empty(t, stdout)
	}
}
