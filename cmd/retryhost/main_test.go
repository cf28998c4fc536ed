package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/retryhost/retryhost/host"
)

func TestMain(m *testing.M) {
	// wazero's interpreter compiles the demo's 2 MB Go plugins in a
	// fraction of the compiler's time under the race detector, and leaves
	// no cache in the user's home.
	demoHostOptions = func() []host.Option { return []host.Option{host.WithInterpreter()} }
	// The demo starts servers, streams and a Wasm host; nothing of them may
	// outlive a run.
	goleak.VerifyTestMain(m)
}
