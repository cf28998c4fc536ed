//go:build !linux

package host

// cpuClock reports whether threadCPU works here: elsewhere than on Linux
// the call deadline stays wall-clock.
const cpuClock = false

func threadID() int32 { return 0 }

func threadCPU(int32) (int64, bool) { return 0, false }
