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
)

// TestInspect_SIGTERMStopsACompile: `plugin inspect` exits on SIGTERM
// while the compile runs, with 128+SIGTERM, instead of compiling to the
// end. The module is the largest Go guest, seconds of compile: the
// default CompileWork refuses, before compiling, any module that would
// compile for longer.
func TestInspect_SIGTERMStopsACompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin, err := buildOnce()
	require.NoError(t, err)
	file, err := filepath.Abs("../../plugins/errmatch/errmatch.wasm")
	require.NoError(t, err)
	cmd := exec.Command(bin, "plugin", "inspect", file, "--cache-dir", "off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// On a loaded machine the process can take seconds to start: first
	// wait until it catches SIGTERM, then until it has spent 300 ms of CPU
	// (starting takes a few): the signal lands in the compile's seconds
	// of CPU, whatever the machine's load.
	waitCatches(t, cmd.Process.Pid, syscall.SIGTERM, exited)
	waitCPU(t, cmd.Process.Pid, 300*time.Millisecond, exited)
	select {
	case err := <-exited:
		t.Fatalf("inspect ended before the signal: %v\n%s", err, out.String())
	default:
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

// waitCPU waits until process pid has run for d of CPU, as Linux shows it
// in /proc/PID/stat (utime and stime, in clock ticks of 10 ms); elsewhere
// it waits a second.
func waitCPU(t *testing.T, pid int, d time.Duration, exited <-chan error) {
	t.Helper()
	stat := fmt.Sprintf("/proc/%d/stat", pid)
	if _, err := os.Stat(stat); err != nil {
		time.Sleep(time.Second)
		return
	}
	require.Eventually(t, func() bool {
		select {
		case err := <-exited:
			t.Fatalf("the process ended before it ran %v of CPU: %v", d, err)
		default:
		}
		b, err := os.ReadFile(stat)
		if err != nil {
			return false
		}
		// The fields after the command's closing parenthesis: state is
		// the first, utime the 12th, stime the 13th.
		_, rest, ok := strings.Cut(string(b), ") ")
		f := strings.Fields(rest)
		if !ok || len(f) < 13 {
			return false
		}
		utime, err1 := strconv.ParseInt(f[11], 10, 64)
		stime, err2 := strconv.ParseInt(f[12], 10, 64)
		return err1 == nil && err2 == nil && time.Duration(utime+stime)*10*time.Millisecond >= d
	}, time.Minute, 5*time.Millisecond)
}
