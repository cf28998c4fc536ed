//go:build unix

package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/gateway/vkey"
	"github.com/retryhost/retryhost/policy"
)

// BenchmarkRequestVirtualKey is what a virtual key adds to a request (a
// one-chunk stream from a loopback upstream, as BenchmarkRequest's),
// side by side in one run: no key at all; a plain API key
// (WithAPIKeys); a virtual key with an RPM and TPM kept in process
// (vkey.Local: the key's lookup, route check, admission and settlement),
// in a set of one key and in a set of 100,000; then no key again. Beside the wall time it
// reports cpu-ns/op, the process's CPU time (user and system) per request:
// client, upstream and gateway share the process, so a row's difference
// from "none" is what it adds, and on a machine shared with other work
// it varies less than the wall time does.
// go test ./gateway -run '^$' -bench RequestVirtualKey -benchmem (run it
// several times: each run has every row, so the rows of a run compare)
func BenchmarkRequestVirtualKey(b *testing.B) {
	up := newUpstream("primary", act{chunks: []string{"word "}})
	defer up.srv.Close()
	pol := `{"models": [{"name": "primary", "provider": "openai", "model": "m", "base_url": "` + up.url() + `", "api_key_env": "K"}]}`
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	body := streamBody("primary")
	// A secret as long as NewSecret's (47 bytes).
	secret := func(id string) string { return vkey.SecretPrefix + strings.Repeat("0", 43-len(id)) + id }
	// Limits a benchmark never reaches, so that every request is admitted
	// and settled.
	limited := func(id string) *vkey.Key {
		return &vkey.Key{ID: id, Hash: vkey.Hash(secret(id)), Routes: []string{"primary"}, RPM: 1 << 40, TPM: 1 << 50,
			Budget: vkey.Budget{TokensPerDay: 1 << 60}}
	}
	keySet := func(n int) *vkey.Set {
		f := &vkey.File{Keys: make([]*vkey.Key, n)}
		for i := range f.Keys {
			f.Keys[i] = limited(fmt.Sprint("key-", i))
		}
		s, err := f.Set()
		require.NoError(b, err)
		return s
	}
	for _, row := range []struct {
		name, key string
		opts      []Option
	}{
		{"none", "", nil},
		{"api-key", "plain", []Option{WithAPIKeys("plain")}},
		{"vkey-1", secret("key-0"), []Option{WithKeySet(keySet(1))}},
		{"vkey-100k", secret("key-77777"), []Option{WithKeySet(keySet(100_000))}},
		{"none-again", "", nil}, // the baseline again, last: what the rows' order does
	} {
		gw, err := New(context.Background(), Bytes("bench", []byte(pol), policy.Options{Getenv: func(string) string { return "k" }}), row.opts...)
		require.NoError(b, err)
		srv := newTestServer(b, gw)
		post := func() error {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			if row.key != "" {
				req.Header.Set("Authorization", "Bearer "+row.key)
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || n == 0 {
				return fmt.Errorf("status %d, %d bytes", resp.StatusCode, n)
			}
			return nil
		}
		// Warm each row up alike (connections, the heap's size), so that
		// the first row does not pay for the process's start.
		for range 500 {
			require.NoError(b, post())
		}
		b.Run(row.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime()
			defer func() { b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op") }()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := post(); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
		srv.Close()
		require.NoError(b, gw.Close(context.Background()))
	}
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
