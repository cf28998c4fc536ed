//go:build !unix

package vkey

import "time"

// cpuTime is zero where the process's CPU time is not read.
func cpuTime() (time.Duration, int64) { return 0, 0 }
