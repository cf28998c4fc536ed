//go:build unix

package vkey

import (
	"syscall"
	"time"
)

// cpuTime is the process's CPU time, user and system, and its minor page
// faults (fresh memory touched: on a VM each costs microseconds of
// system time).
func cpuTime() (time.Duration, int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), int64(ru.Minflt)
}
