package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/gateway/vkey"
)

// createKey runs `retryhost keys create` and returns the secret it printed.
func createKey(t *testing.T, file, id string, flags ...string) string {
	t.Helper()
	code, stdout, stderr := run(t, append([]string{"keys", "create", id, "--keys-file", file}, flags...)...)
	require.Equal(t, exitOK, code, stderr)
	secret := strings.TrimSpace(stdout)
	require.True(t, strings.HasPrefix(secret, vkey.SecretPrefix), stdout)
	return secret
}

// keys create stores only the secret's hash and prints the secret once;
// list and show print neither the secret nor the hash; the file stays one
// serve loads, owner-only.
func TestKeys_CreateStoresOnlyTheHashAndNothingPrintsIt(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys.json")
	secret := createKey(t, file, "team-a", "--route", "gpt-4o", "--route", "claude-*", "--rpm", "60", "--tpm", "1000",
		"--cost-per-day", "2.5", "--tokens-per-month", "900", "--expires", "2030-01-02T00:00:00Z", "--meta", "team=search")
	createKey(t, file, "team-b")

	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NotContains(t, string(raw), secret)
	st, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	set, err := vkey.Load(file)
	require.NoError(t, err)
	k, ok := set.Lookup(secret)
	require.True(t, ok)
	require.Equal(t, "team-a", k.ID)
	require.Equal(t, []string{"gpt-4o", "claude-*"}, k.Routes)
	require.Equal(t, vkey.Budget{CostPerDay: 2.5, TokensPerMonth: 900}, k.Budget)
	require.Equal(t, int64(60), k.RPM)
	require.Equal(t, "search", k.Metadata["team"])
	require.Equal(t, time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC), k.Expires)

	for _, args := range [][]string{
		{"keys", "list", "--keys-file", file},
		{"keys", "list", "--keys-file", file, "--json"},
		{"keys", "show", "team-a", "--keys-file", file},
		{"keys", "show", "team-a", "--keys-file", file, "--json"},
	} {
		code, stdout, stderr := run(t, args...)
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, "team-a")
		require.NotContains(t, stdout+stderr, secret, args)
		require.NotContains(t, stdout+stderr, strings.TrimPrefix(k.Hash, "sha256:"), args)
		require.NotContains(t, stdout, "hash", args)
	}
	_, stdout, _ := run(t, "keys", "list", "--keys-file", file, "--json")
	var views []keyView
	require.NoError(t, json.Unmarshal([]byte(stdout), &views))
	require.Len(t, views, 2)
	require.Equal(t, "valid", views[0].Status)
	require.Equal(t, int64(1000), views[0].TPM)
	_, stdout, _ = run(t, "keys", "show", "team-a", "--keys-file", file)
	require.Contains(t, stdout, "900 tokens/month, cost 2.5/day") // the budget, in words
}

// Each mistake has its own message and exit code, and leaves the file as
// it was.
func TestKeys_Mistakes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "keys.json")
	createKey(t, file, "team-a")
	before, err := os.ReadFile(file)
	require.NoError(t, err)
	corrupt := filepath.Join(dir, "corrupt.json")
	require.NoError(t, os.WriteFile(corrupt, []byte(`{"keys": [{"id": "a"`), 0o600))
	invalid := filepath.Join(dir, "invalid.json")
	require.NoError(t, os.WriteFile(invalid, []byte(`{"keys": [{"id": "a", "hash": "sha256:00"}]}`), 0o600))
	missing := filepath.Join(dir, "missing.json")

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"create", "team-a", "--keys-file", file}, exitFail, `already has a key named "team-a"`},
		{[]string{"create", "bad id", "--keys-file", file}, exitUsage, "letters, digits"},
		{[]string{"create", "team-c", "--keys-file", file, "--rpm", "-1"}, exitUsage, "cannot be negative"},
		{[]string{"create", "team-c", "--keys-file", file, "--expires", "soon"}, exitUsage, "--expires"},
		{[]string{"create", "team-c", "--keys-file", file, "--meta", "novalue"}, exitUsage, "NAME=VALUE"},
		{[]string{"create", "team-c", "--keys-file", file, "--route", "g*t"}, exitFail, "a prefix ending in *"},
		{[]string{"create", "team-c"}, exitUsage, "--keys-file or --keys-redis is required"},
		{[]string{"create", "team-c", "--keys-file", corrupt}, exitInput, "unexpected end of JSON input"},
		{[]string{"list", "--keys-file", missing}, exitInput, "no such key file"},
		{[]string{"list", "--keys-file", corrupt}, exitInput, "unexpected end of JSON input"},
		{[]string{"list", "--keys-file", invalid}, exitInput, "64 hex digits"},
		{[]string{"show", "nobody", "--keys-file", file}, exitFail, `no key named "nobody"`},
		{[]string{"revoke", "nobody", "--keys-file", file}, exitFail, `no key named "nobody"`},
		{[]string{"rotate", "nobody", "--keys-file", file}, exitFail, `no key named "nobody"`},
		{[]string{"rotate", "team-a", "--keys-file", missing}, exitInput, "no such key file"},
		{[]string{"revoke", "--keys-file", file}, exitUsage, "want one ID"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := run(t, append([]string{"keys"}, tc.args...)...)
			require.Equal(t, tc.code, code, stderr)
			require.Contains(t, stderr, tc.msg)
			require.Empty(t, stdout, "no secret is printed for a command that failed")
		})
	}
	after, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, string(before), string(after))
	_, err = os.Stat(missing)
	require.ErrorIs(t, err, os.ErrNotExist, "only create makes a file")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 3, "no temporary file is left behind")

	// A rotate of a revoked key is refused; a second revoke changes nothing.
	code, _, stderr := run(t, "keys", "revoke", "team-a", "--keys-file", file)
	require.Equal(t, exitOK, code, stderr)
	code, _, stderr = run(t, "keys", "revoke", "team-a", "--keys-file", file)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "already revoked")
	code, stdout, stderr := run(t, "keys", "rotate", "team-a", "--keys-file", file)
	require.Equal(t, exitFail, code)
	require.Contains(t, stderr, "is revoked")
	require.Empty(t, stdout)
}

// keys revoke and rotate reach a running serve through its reload
// (SIGHUP here; the file watcher takes the same path): the revoked key
// gets 401, the rotated key's old secret 401 and its new one 200, and a
// key left alone is still served.
func TestKeys_RevokeAndRotateReachARunningServe(t *testing.T) {
	dir := t.TempDir()
	file, pol := filepath.Join(dir, "keys.json"), filepath.Join(dir, "policy.json")
	t.Setenv("UPSTREAM_KEY", "sk-upstream")
	servePolicyFile(t, pol, startDemoUpstreamForTest(t), "one")
	gone := createKey(t, file, "gone")
	old := createKey(t, file, "rotated")
	kept := createKey(t, file, "kept")
	// The test process must not die of the SIGHUP should serve not catch it.
	guard := make(chan os.Signal, 1)
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)
	base, stderr, stop := startServe(t, "--policy", pol, "--keys-file", file, "--watch=false")
	for _, s := range []string{gone, old, kept} {
		require.Equal(t, http.StatusOK, modelsStatus(t, base, s))
	}

	code, _, errOut := run(t, "keys", "revoke", "gone", "--keys-file", file)
	require.Equal(t, exitOK, code, errOut)
	code, stdout, errOut := run(t, "keys", "rotate", "rotated", "--keys-file", file)
	require.Equal(t, exitOK, code, errOut)
	fresh := strings.TrimSpace(stdout)
	require.NotEqual(t, old, fresh)
	require.Equal(t, http.StatusOK, modelsStatus(t, base, old), "nothing changes before the reload")

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	require.Eventually(t, func() bool { return modelsStatus(t, base, gone) == http.StatusUnauthorized },
		10*time.Second, 10*time.Millisecond, "%s", stderr)
	require.Equal(t, http.StatusUnauthorized, modelsStatus(t, base, old))
	require.Equal(t, http.StatusOK, modelsStatus(t, base, fresh))
	require.Equal(t, http.StatusOK, modelsStatus(t, base, kept))
	require.Equal(t, exitOK, stop())
}

// keys on-store-down prints a key file's on_store_down (local when the
// file has none) and sets it, keeping the keys; a value other than local
// or refuse is a usage error that leaves the file as it was.
func TestKeys_OnStoreDownOfAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys.json")
	secret := createKey(t, file, "team-a", "--rpm", "5")
	onStoreDown := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := run(t, append([]string{"keys", "on-store-down", "--keys-file", file}, args...)...)
		require.Equal(t, exitOK, code, stderr)
		return strings.TrimSpace(stdout)
	}
	require.Equal(t, vkey.StoreDownLocal, onStoreDown())
	require.Empty(t, onStoreDown(vkey.StoreDownRefuse))
	require.Equal(t, vkey.StoreDownRefuse, onStoreDown())
	set, err := vkey.Load(file)
	require.NoError(t, err)
	require.Equal(t, vkey.StoreDownRefuse, set.OnStoreDown)
	k, ok := set.Lookup(secret)
	require.True(t, ok, "the keys stay")
	require.Equal(t, int64(5), k.RPM)

	before, err := os.ReadFile(file)
	require.NoError(t, err)
	for _, args := range [][]string{{"open"}, {"local", "refuse"}} {
		code, stdout, stderr := run(t, append([]string{"keys", "on-store-down", "--keys-file", file}, args...)...)
		require.Equal(t, exitUsage, code, stderr)
		require.Contains(t, stderr, "local or refuse")
		require.Empty(t, stdout)
	}
	after, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, string(before), string(after))
}
