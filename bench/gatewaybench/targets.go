package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type target struct {
	name    string
	url     string // chat completions URL
	model   string
	headers http.Header
	pid     int    // the proxy process (0: none)
	note    string // printed beside the row
	stop    func()
	client  *rawClient // the timed requests'
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitUp(ctx context.Context, addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not listening after 30s", addr)
}

func stopProc(cmd *exec.Cmd, done <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func startChild(cmd *exec.Cmd) (<-chan struct{}, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return done, nil
}

// makeTarget starts the target name, the upstream's URL given: errSkip
// for a target this run has no binary or installation for.
func makeTarget(ctx context.Context, name, upstream, dir string) (*target, error) {
	switch name {
	case "direct":
		return &target{name: name, url: upstream + "/v1/chat/completions", model: "m", stop: func() {}}, nil
	case "revproxy":
		return startRevProxy(name, upstream)
	case "retryhost", "retryhost-b", "retryhost-wasm", "retryhost-keys":
		return startRetryhost(ctx, name, upstream, dir)
	case "portkey":
		return startPortkey(ctx, name, upstream, dir)
	}
	return nil, fmt.Errorf("unknown target %q", name)
}

// startRevProxy starts this program as a bare reverse proxy to upstream.
func startRevProxy(name, upstream string) (*target, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-serve-revproxy", upstream, "-held-h2c="+strconv.FormatBool(*heldH2C))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	done, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stopProc(cmd, done)
		return nil, fmt.Errorf("revproxy: %w", err)
	}
	return &target{name: name, url: "http://" + strings.TrimSpace(addr) + "/v1/chat/completions", model: "m", pid: cmd.Process.Pid,
		stop: func() { stdin.Close(); stopProc(cmd, done) }}, nil
}

// startRetryhost starts `retryhost serve` (-retryhost, or -retryhost-b for
// retryhost-b) over a policy of one model on upstream.
func startRetryhost(ctx context.Context, name, upstream, dir string) (*target, error) {
	bin := *rhBin
	if name == "retryhost-b" {
		bin = *rhBinB
	}
	if bin == "" {
		return nil, errSkip("no -" + name + " binary")
	}
	pol, err := retryhostPolicy(name, upstream)
	if err != nil {
		return nil, err
	}
	pf := filepath.Join(dir, name+"-policy.json")
	if err := os.WriteFile(pf, []byte(pol), 0o644); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--policy", pf, "--addr", addr, "--watch=false",
		"--max-concurrent", strconv.Itoa(*upConns), "--max-conns", strconv.Itoa(*upConns), "--upstream-conns", strconv.Itoa(*upConns), "--h2c=" + strconv.FormatBool(*heldH2C)}
	var headers http.Header
	note := ""
	if name == "retryhost-keys" {
		// One virtual key with a request rate kept in process, far above
		// what a run sends: every request pays the key's lookup, route
		// check, admission, x-ratelimit-* headers and settlement, and
		// none is refused.
		// The key file is written here, not with package vkey: the bench
		// drives serve from outside, as a user's file does.
		var raw [32]byte
		_, _ = rand.Read(raw[:])
		secret := "rhk-" + hex.EncodeToString(raw[:])
		sum := sha256.Sum256([]byte(secret))
		kf := filepath.Join(dir, name+"-keys.json")
		keys := fmt.Sprintf(`{"keys": [{"id": "bench", "hash": "sha256:%x", "rpm": %d}]}`, sum, int64(1)<<40)
		if err := os.WriteFile(kf, []byte(keys), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "--keys-file", kf)
		headers = http.Header{"Authorization": {"Bearer " + secret}}
		note = "a virtual key with an rpm (in process) on every request; "
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "BENCH_UPSTREAM_KEY=k", "RETRYHOST_API_KEYS=")
	cmd.Stdout, cmd.Stderr = logf, logf
	done, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	if err := waitUp(ctx, addr); err != nil {
		stopProc(cmd, done)
		return nil, fmt.Errorf("%s: %w (see %s)", name, err, logf.Name())
	}
	return &target{name: name, url: "http://" + addr + "/v1/chat/completions", model: "bench", headers: headers, pid: cmd.Process.Pid,
		note: note + fmt.Sprintf("access log (JSON, one line per request) on, to a file; --upstream-conns %d --max-concurrent %d --max-conns %d; upstream_json %s", *upConns, *upConns, *upConns, *upJSON),
		stop: func() { stopProc(cmd, done); logf.Close() }}, nil
}

// retryhostPolicy is the policy retryhost serves as target name: one model
// on upstream, and for retryhost-wasm a Wasm condition.
func retryhostPolicy(name, upstream string) (string, error) {
	model := fmt.Sprintf(`{"name": "bench", "provider": "openai", "model": "m", "base_url": %q, "api_key_env": "BENCH_UPSTREAM_KEY"`, upstream+"/v1")
	switch *upJSON {
	case "true", "false":
		model += `, "upstream_json": ` + *upJSON
	case "default":
	default:
		return "", fmt.Errorf("-upstream-json %q: true, false or default", *upJSON)
	}
	pol := `{"models": [` + model + `}]}`
	if name == "retryhost-wasm" {
		// One Wasm condition, asked after a failed attempt only (none
		// fails here): what a policy with a plugin costs a request.
		pol = `{"models": [` + model + `}], "rules": [{"plugin": {"builtin": "errmatch", "config": {"rules": [{"status": ["500-599"], "retry": {"max_attempts": 2}}]}}}]}`
	}
	return pol, nil
}

// startPortkey starts Portkey's gateway from -portkey-dir, with the
// headers that send a request to upstream.
func startPortkey(ctx context.Context, name, upstream, dir string) (*target, error) {
	if *pkDir == "" {
		return nil, errSkip("no -portkey-dir (npm absent?)")
	}
	script := filepath.Join(*pkDir, "node_modules/@portkey-ai/gateway/build/start-server.js")
	if _, err := os.Stat(script); err != nil {
		return nil, errSkip(err.Error())
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	logf, err := os.Create(filepath.Join(dir, "portkey.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("node", script, "--port="+port, "--headless")
	cmd.Dir = *pkDir
	cmd.Stdout, cmd.Stderr = logf, logf
	done, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	if err := waitUp(ctx, addr); err != nil {
		stopProc(cmd, done)
		return nil, fmt.Errorf("portkey: %w (see %s)", err, logf.Name())
	}
	h := http.Header{}
	h.Set("x-portkey-provider", "openai")
	h.Set("x-portkey-custom-host", upstream+"/v1")
	h.Set("Authorization", "Bearer k")
	return &target{name: name, url: "http://" + addr + "/v1/chat/completions", model: "m", headers: h, pid: cmd.Process.Pid,
		note: "its source waits 25 ms before forwarding a stream's first chunk",
		stop: func() { stopProc(cmd, done); logf.Close() }}, nil
}

type errSkip string

func (e errSkip) Error() string { return string(e) }
