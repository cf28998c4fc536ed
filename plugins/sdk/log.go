package sdk

import "github.com/retryhost/retryhost/plugins/sdk/internal/guest"

// Log levels, slog's numbers.
const (
	LevelDebug = -4
	LevelInfo  = 0
	LevelWarn  = 4
	LevelError = 8
)

// Log writes one line to the host's logger (cut at 1024 bytes and rate
// limited by the host). Natively (tests) lines go to the function set with
// [SetLogger], or nowhere.
func Log(level int, msg string) { guest.Log(int32(level), msg) }
