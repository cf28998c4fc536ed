package main

import "syscall"

// peakRSS is the process's peak resident memory so far (getrusage's
// ru_maxrss, in KiB on Linux).
func peakRSS() uint64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return uint64(ru.Maxrss) << 10
}
