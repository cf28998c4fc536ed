//go:build !unix

package plugins_test

// cpuTime is not measured on this platform.
func cpuTime() int64 { return 0 }
