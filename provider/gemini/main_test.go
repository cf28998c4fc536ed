package gemini_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The genai SDK links OpenCensus, whose package init starts a worker
// that lives as long as the process.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}
