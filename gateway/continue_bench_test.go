package gateway

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/policy"
)

// BenchmarkContinuation measures continuation after the commit through the
// gateway, sequential requests from a plain HTTP client to loopback
// upstreams, an answer of 100 content chunks:
//
//   - off, on-idle: the primary answers whole, with after_commit "error"
//     (the default) and "continue": what having continuation on costs when
//     nothing fails (the hot path);
//   - continued: the primary cuts the stream after 50 chunks and the backup
//     continues with 50; seam-µs is the client's wait between the last
//     chunk of the primary and the first of the backup;
//   - fresh-backup: a new request served by the backup, ttfc-µs its time to
//     first content through the gateway (the client's hop included);
//   - backup-direct: the same request straight to the backup, ttfc-µs the
//     new attempt's own time to first content (an HTTP request to the
//     upstream and its first chunk). seam-µs minus this ttfc-µs is what
//     the continuation adds: the rules, the continuation request, the
//     splice and the seam's trim.
//
// go test ./gateway -run '^$' -bench Continuation -benchmem -count 6
func BenchmarkContinuation(b *testing.B) {
	words := func(w string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = w
		}
		return out
	}
	primary, backup := newUpstream("primary"), newUpstream("backup", act{chunks: words("more ", 50)})
	defer primary.srv.Close()
	defer backup.srv.Close()
	serve := func(extra string) string {
		pol := `{"models": [
			{"name": "primary", "provider": "openai", "model": "m", "base_url": "` + primary.url() + `", "api_key_env": "K"},
			{"name": "backup", "provider": "openai", "model": "m", "base_url": "` + backup.url() + `", "api_key_env": "K"}],
			"cooldown": null,
			"rules": [{"when": {"class": ["network", "server", "overloaded"]}, "action": "switch", "model": "backup"}]` + extra + `}`
		gw, err := New(context.Background(), Bytes("bench", []byte(pol), policy.Options{Getenv: func(string) string { return "k" }}))
		require.NoError(b, err)
		b.Cleanup(func() { _ = gw.Close(context.Background()) })
		return newTestServer(b, gw).URL + "/v1/chat/completions"
	}
	off, on := serve(""), serve(`, "after_commit": "continue"`)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer hc.CloseIdleConnections()

	// read posts a request for model and reads the answer's data lines:
	// the number of content chunks, the time to the first, and the wait
	// between the last "word" chunk and the first "more" chunk.
	type read struct {
		chunks      int
		ttfc, seam  time.Duration
		done, error bool
	}
	get := func(b *testing.B, url, model string) read {
		start := time.Now()
		resp, err := hc.Post(url, "application/json", strings.NewReader(streamBody(model)))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
		var r read
		var lastWord time.Time
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			now := time.Now()
			switch {
			case line == "data: [DONE]":
				r.done = true
			case strings.Contains(line, `"error"`):
				r.error = true
			case strings.Contains(line, `"content":"word `):
				lastWord = now
			case strings.Contains(line, `"content":"more `):
				if r.seam == 0 && !lastWord.IsZero() {
					r.seam = now.Sub(lastWord)
				}
			default:
				continue
			}
			if strings.Contains(line, `"content":"`) {
				if r.chunks == 0 {
					r.ttfc = now.Sub(start)
				}
				r.chunks++
			}
		}
		return r
	}
	row := func(name, url, model string, primaryAct act, chunks, primaryHits, backupHits int, metric string) {
		b.Run(name, func(b *testing.B) {
			primary.play(primaryAct)
			primary.reset()
			backup.reset()
			var sum time.Duration
			b.ReportAllocs()
			for b.Loop() {
				r := get(b, url, model)
				if r.chunks != chunks || !r.done || r.error {
					b.Fatalf("%d content chunks of %d, [DONE] %v, an error %v; primary %d backup %d", r.chunks, chunks, r.done, r.error, len(primary.requests()), len(backup.requests()))
				}
				switch metric {
				case "seam-µs":
					sum += r.seam
				case "ttfc-µs":
					sum += r.ttfc
				}
			}
			if metric != "" {
				b.ReportMetric(float64(sum.Microseconds())/float64(b.N), metric)
			}
			if p, q := len(primary.requests()), len(backup.requests()); p != primaryHits*b.N || q != backupHits*b.N {
				b.Fatalf("upstream requests: primary %d, backup %d for %d requests", p, q, b.N)
			}
		})
	}
	whole := act{chunks: words("word ", 100)}
	cut := act{chunks: words("word ", 50), cut: true}
	row("off", off, "primary", whole, 100, 1, 0, "")
	row("on-idle", on, "primary", whole, 100, 1, 0, "")
	row("continued", on, "primary", cut, 100, 1, 1, "seam-µs")
	row("fresh-backup", on, "backup", whole, 50, 0, 1, "ttfc-µs")
	row("backup-direct", backup.url()+"/chat/completions", "m", whole, 50, 0, 1, "ttfc-µs")
}
