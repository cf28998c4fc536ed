//go:build !linux

package main

// peakRSS is 0 (unknown) where getrusage's units are not KiB.
func peakRSS() uint64 { return 0 }
