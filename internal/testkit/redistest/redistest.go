// Package redistest starts a real redis-server for tests: on a free
// loopback port, with no persistence, stopped at the test's cleanup. A
// test can kill it and start it again on the same port, to see what a
// client does through an outage.
//
// When /usr/bin/redis-server (or redis-server on PATH) is absent, Start
// skips the test, unless the CI environment variable is set: CI installs
// the server (.ci/run), so there a missing binary is a failure, not a
// silent skip.
package redistest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// startWait bounds how long Start waits for a server to answer PING.
const startWait = 10 * time.Second

// Server is one redis-server process. Its methods are safe for concurrent
// use.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	mode mode     // a plain server, a cluster node or a sentinel
	conf []string // a sentinel's configuration lines
	args []string // more flags for redis-server

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	logs *bytes.Buffer
}

// Binary returns the path of redis-server, or "" when it is not installed.
func Binary() string {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server"
	}
	return ""
}

// Start starts a redis-server for t and stops it at t's cleanup. It skips
// t when the server is not installed, unless $CI is set.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := binary(t)
	return startServer(t, &Server{t: t, bin: bin, dir: t.TempDir()})
}

// binary returns redis-server's path or ends t: a skip, or a failure
// when $CI is set.
func binary(t testing.TB) string {
	t.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("redistest: redis-server is not installed, and CI is set (.ci/run installs it: apt-get install redis-server)")
		}
		t.Skip("redistest: redis-server is not installed (apt-get install redis-server); skipping the tests on a real Redis")
	}
	return bin
}

// startServer starts s on a free port and stops it at t's cleanup.
func startServer(t testing.TB, s *Server) *Server {
	t.Helper()
	var err error
	for range 5 { // another process may take the free port before the server binds it
		if s.port, err = freePort(); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Kill stops the server at once (SIGKILL) and waits for it to exit. It is a
// no-op when the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd, s.done = nil, nil
}

// Restart starts the server again on the same port (after Kill), empty: it
// keeps nothing across a restart, as a Redis without persistence does.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var err error
	for range 50 { // the old socket may linger a moment
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart on port %d: %v", s.port, err)
}

// Do sends one command in the inline protocol and returns the first line of
// the reply (a test's view of the keys, without a client library).
func (s *Server) Do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// Clients returns the ids of the server's client connections, not
// counting the one that asks (CLIENT LIST): a connection that stays open
// keeps its id, a new one gets a new id.
func (s *Server) Clients() ([]string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("CLIENT LIST\r\n")); err != nil {
		return nil, err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if err != nil {
		return nil, fmt.Errorf("CLIENT LIST: unexpected reply %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	ids := []string{}
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		if strings.Contains(line, "cmd=client|list") {
			continue // this one
		}
		for _, f := range strings.Fields(line) {
			if id, ok := strings.CutPrefix(f, "id="); ok {
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	logs := &bytes.Buffer{}
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning"}
	switch s.mode {
	case sentinelMode:
		// A sentinel rewrites its configuration file: one per start,
		// written afresh.
		conf := filepath.Join(s.dir, "sentinel.conf")
		if err := os.WriteFile(conf, []byte(strings.Join(s.conf, "\n")+"\n"), 0o600); err != nil {
			return err
		}
		args = append([]string{conf, "--sentinel"}, args...)
	default:
		args = append(args, "--save", "", "--appendonly", "no")
		if s.mode == clusterMode {
			args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
				"--cluster-node-timeout", "1000")
		}
	}
	cmd := exec.Command(s.bin, append(args, s.args...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(startWait)
	for {
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited at start: %s", s.port, strings.TrimSpace(logs.String()))
		default:
		}
		if s.ping() {
			s.cmd, s.done, s.logs = cmd, done, logs
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on port %d did not answer within %v: %s", s.port, startWait, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *Server) ping() bool {
	c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
