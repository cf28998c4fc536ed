//go:build linux

package host

import (
	"syscall"
	"unsafe"
)

// cpuClock reports whether threadCPU works here: Linux lets any thread read
// the CPU-time clock of another thread of the same process.
const cpuClock = true

// threadID is the calling OS thread's id (the caller has locked its
// goroutine to the thread).
func threadID() int32 {
	tid, _, _ := syscall.RawSyscall(syscall.SYS_GETTID, 0, 0, 0)
	return int32(tid)
}

// threadCPU returns the CPU time, in nanoseconds, that thread tid of this
// process has run, read from its per-thread CPU clock (the clock id
// pthread_getcpuclockid builds: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)).
func threadCPU(tid int32) (int64, bool) {
	clock := uintptr(int64(^tid)<<3 | 6)
	var ts syscall.Timespec
	if _, _, e := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clock, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0, false
	}
	return ts.Nano(), true
}
