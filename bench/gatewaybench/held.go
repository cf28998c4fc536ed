package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// holdStreams opens n streams at once through t, waits (at most 3 min) until
// each has its first content, reads the proxy's RSS, then releases them all
// (the upstream's /release) and counts those that ended intact.
func holdStreams(ctx context.Context, t *target, upstream string, n int) (h holdResult) {
	warmUp(ctx, t)
	h.rss0, h.anon0 = procMem(t.pid)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var open, ok atomic.Int64
	var wg sync.WaitGroup
	// At most 256 streams are being opened at a time (each slot is freed
	// at its first content, or its failure), so that thousands of dials do
	// not overflow the listen backlog at once.
	opening := make(chan struct{}, 256)
	deadline := time.Now().Add(3 * time.Minute)
	spawn, stopSpawn := context.WithDeadline(ctx, deadline)
	defer stopSpawn()
	for i := 0; i < n; i++ {
		select {
		case opening <- struct{}{}:
		case <-spawn.Done():
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			slot := true
			free := func() {
				if slot {
					slot = false
					<-opening
				}
			}
			defer free()
			body := fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":%q}]}`, t.model, holdPrompt)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, strings.NewReader(body))
			if err != nil {
				return
			}
			for k, v := range t.headers {
				req.Header[k] = v
			}
			req.Header.Set("Content-Type", "application/json")
			c := holdClient
			if *heldH2C && (t.name == "revproxy" || strings.HasPrefix(t.name, "retryhost")) {
				c = holdClientH2C
			}
			resp, err := c.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			first, done, got := false, false, ""
			for sc.Scan() {
				line := sc.Bytes()
				if !bytes.HasPrefix(line, []byte("data:")) {
					continue
				}
				data := bytes.TrimSpace(line[5:])
				if bytes.Equal(data, []byte("[DONE]")) {
					done = true
					continue
				}
				if c, _ := content(data); len(c) != 0 {
					if !first {
						first = true
						open.Add(1)
						free()
					}
					got += string(c)
				}
			}
			if resp.StatusCode == http.StatusOK && done && got == "held " && (c == holdClient || resp.ProtoMajor == 2) {
				ok.Add(1)
			}
		}()
	}
	for open.Load() < int64(n) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // let the proxy settle
	h.rss1, h.anon1 = procMem(t.pid)
	h.opened = int(open.Load())
	if resp, err := http.Post(upstream+"/release", "text/plain", nil); err == nil {
		resp.Body.Close()
	} else {
		fmt.Fprintln(os.Stderr, "release:", err)
	}
	wg.Wait()
	holdClientH2C.CloseIdleConnections()
	h.intact = int(ok.Load())
	return h
}

// warmUp sends a fresh proxy 256 whole streamed requests, 16 at a time,
// before its memory is read for the held streams: what its first
// requests cost once (code pages of its binary faulted in, pools and
// caches made, lazy initialisation) is then in "RSS before", not spread
// over the streams. The connections are closed afterwards.
func warmUp(ctx context.Context, t *target) {
	if t.client == nil {
		return
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 16 {
				t.client.do(ctx, true)
			}
		})
	}
	wg.Wait()
	t.client.closeIdle()
	time.Sleep(200 * time.Millisecond)
}

type holdResult struct {
	opened, intact int
	rss0, rss1     int64 // VmRSS before and held
	anon0, anon1   int64 // RssAnon (the process's own memory, not its binary's pages)
}

// holdClient has no overall timeout (the streams are held on purpose) and no idle pool.
var holdClient = &http.Client{Transport: &http.Transport{DisableCompression: true, DisableKeepAlives: true}}

// holdClientH2C speaks HTTP/2 by prior knowledge (-held-h2c): a new
// connection each time one has 250 streams open.
var holdClientH2C = func() *http.Client {
	tr := &http.Transport{DisableCompression: true, Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}()

// procMem is a process's resident set and the anonymous part of it, in
// bytes (Linux /proc; 0 elsewhere).
func procMem(pid int) (rss, anon int64) {
	if pid == 0 {
		return 0, 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "RssAnon:":
			anon = kb << 10
		}
	}
	return rss, anon
}
