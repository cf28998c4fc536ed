package bedrock_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The SDK decodes a stream on goroutines of its own: none may outlive the
// test that opened the stream.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
