package openai_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/conformance"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

func TestConformance(t *testing.T) {
	transcripts := map[conformance.Scenario]string{
		conformance.Text: "text", conformance.ToolCall: "tool_call", conformance.Length: "length",
		conformance.RateLimit: "rate_limit_429", conformance.Overloaded: "overloaded_503",
		conformance.ServerError: "server_error_500", conformance.Auth: "auth_401",
		conformance.Refusal: "refusal_field", conformance.GenerateRefusal: "generate_refusal_field",
		conformance.Cut: "cut", conformance.Truncated: "truncated", conformance.StallMid: "stall_mid",
	}
	conformance.Run(t, conformance.Suite{
		Provider: "openai",
		Model: func(t *testing.T, s conformance.Scenario) (driver.Model, *wiretest.Server) {
			srv := wiretest.ServeFile(t, filepath.Join("..", "..", "testdata", "wire", "openai", transcripts[s]+".json"))
			return model(t, srv), srv
		},
		Text:       "Hello! How can I help you today?",
		RetryAfter: 1500 * time.Millisecond,
	})
}
