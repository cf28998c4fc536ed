//go:build !wasip1

package guest

import "sync/atomic"

// Logger receives the plugin's log lines natively (nil drops them).
var Logger atomic.Pointer[func(level int32, msg string)]

// Log writes one line to Logger.
func Log(level int32, msg string) {
	if f := Logger.Load(); f != nil {
		(*f)(level, msg)
	}
}
