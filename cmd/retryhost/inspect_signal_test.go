package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit/wasmgen"
)

// TestInspect_SIGTERMStopsACompile: `plugin inspect` on a module that
// takes wazero a long time to compile (every function within the host's
// per-function limits, 400 of them) exits on SIGTERM while the compile
// runs, with 128+SIGTERM, instead of compiling to the end.
func TestInspect_SIGTERMStopsACompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin, err := buildOnce()
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "slow.wasm")
	require.NoError(t, os.WriteFile(file, wasmgen.SiblingBranchFuncs(400, 2000), 0o600))
	cmd := exec.Command(bin, "plugin", "inspect", file, "--cache-dir", "off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Let it get into the compile; a module this size compiles for tens of
	// seconds, so the signal lands mid-compile. On a loaded machine the
	// process can take seconds to start: first wait until it catches
	// SIGTERM, or the signal would kill it before its handler is there.
	waitCatches(t, cmd.Process.Pid, syscall.SIGTERM, exited)
	select {
	case err := <-exited:
		t.Fatalf("inspect ended before the signal: %v\n%s", err, out.String())
	case <-time.After(time.Second):
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
	case <-time.After(10 * time.Second): // a generous bound: the point is that it exits
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("inspect still ran 10 s after SIGTERM:\n%s", out.String())
	}
	require.Equal(t, 143, cmd.ProcessState.ExitCode(), out.String())
}

// waitCatches waits until process pid has a handler for sig, as Linux
// shows it in /proc/PID/status (SigCgt); elsewhere it waits a few seconds.
func waitCatches(t *testing.T, pid int, sig syscall.Signal, exited <-chan error) {
	t.Helper()
	status := fmt.Sprintf("/proc/%d/status", pid)
	if _, err := os.Stat(status); err != nil {
		time.Sleep(3 * time.Second)
		return
	}
	require.Eventually(t, func() bool {
		select {
		case err := <-exited:
			t.Fatalf("the process ended before it caught %v: %v", sig, err)
		default:
		}
		b, err := os.ReadFile(status)
		if err != nil {
			return false
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
				mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				return err == nil && mask&(1<<(uint(sig)-1)) != 0
			}
		}
		return false
	}, time.Minute, 10*time.Millisecond)
}
