package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
	"github.com/retryhost/retryhost/plugins/sdk"
)

// backends run every test natively and on the built module.
var backends = []plugintest.Backend{plugintest.Native("errmatch"), plugintest.Wasm("errmatch", "wasm", "errmatch.wasm")}

const exampleConfig = `{
  "rules": [
    {"class": ["canceled"], "give_up": true},
    {"status": [429], "max_attempt": 2, "retry": {"delay": "1s", "backoff": 2, "max_attempts": 3, "retry_after": true}},
    {"status": ["500-599"], "class": ["overloaded", "server"], "model": "openai/*",
     "switch": {"model": "anthropic/claude-sonnet", "timeout": "30s"}},
    {"class": ["context-length"], "switch": {"model": "google/gemini-long", "max_attempts": 1}},
    {"message": "(?i)quota exceeded", "switch": {"model": "local/llama"}},
    {"class": ["refusal", "content-filter"], "error_name": "Refusal", "switch": {"model": "b/m"}},
    {"class": ["timeout"], "min_attempt": 2, "give_up": true}
  ]
}`

func TestDecide(t *testing.T) {
	for _, b := range backends {
		p, err := b.Load(t, []byte(exampleConfig))
		require.NoError(t, err)
		ctx := context.Background()
		retry429 := abi.Decision{Action: abi.ActionRetry, Delay: time.Second, BackoffFactor: 2, MaxAttempts: 3, UseRetryAfter: true}
		for _, tc := range []struct {
			name string
			a    abi.Attempt
			want abi.Decision
		}{
			{"429 retries honouring Retry-After", abi.Attempt{Number: 1, Status: 429, Class: abi.ClassRateLimit, RetryAfter: 3 * time.Second}, retry429},
			{"429 on attempt 3 is past max_attempt", abi.Attempt{Number: 3, Status: 429, Class: abi.ClassRateLimit}, abi.Decision{}},
			{"503 overloaded on openai switches", abi.Attempt{Number: 1, Model: "openai/gpt-4o", Status: 503, Class: abi.ClassOverloaded},
				abi.Decision{Action: abi.ActionSwitch, Model: "anthropic/claude-sonnet", Timeout: 30 * time.Second}},
			{"503 elsewhere: model glob fails", abi.Attempt{Number: 1, Model: "x/y", Status: 503, Class: abi.ClassOverloaded}, abi.Decision{}},
			{"status range AND class: 500 network is not matched", abi.Attempt{Number: 1, Model: "openai/a", Status: 500, Class: abi.ClassNetwork}, abi.Decision{}},
			{"context length", abi.Attempt{Number: 1, Status: 400, Class: abi.ClassContextLength},
				abi.Decision{Action: abi.ActionSwitch, Model: "google/gemini-long", MaxAttempts: 1}},
			{"message pattern", abi.Attempt{Number: 1, Class: abi.ClassClient, Status: 402, Message: "Monthly QUOTA exceeded"},
				abi.Decision{Action: abi.ActionSwitch, Model: "local/llama"}},
			{"refusal by error name", abi.Attempt{Number: 1, Class: abi.ClassRefusal, ErrorName: "RefusalError"},
				abi.Decision{Action: abi.ActionSwitch, Model: "b/m"}},
			{"timeout on first attempt: no opinion", abi.Attempt{Number: 1, Class: abi.ClassTimeout, Deadline: abi.DeadlineFirstContent}, abi.Decision{}},
			{"timeout on second attempt gives up", abi.Attempt{Number: 2, Class: abi.ClassTimeout}, abi.Decision{Action: abi.ActionGiveUp}},
			{"canceled gives up first", abi.Attempt{Number: 1, Status: 429, Class: abi.ClassCanceled}, abi.Decision{Action: abi.ActionGiveUp}},
			{"a result attempt is not an error", abi.Attempt{Number: 1, Status: 200, Finish: abi.FinishReason{Unified: abi.ReasonStop}}, abi.Decision{}},
		} {
			t.Run(b.Name+"/"+tc.name, func(t *testing.T) {
				got, err := p.Decide(ctx, &tc.a)
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
			})
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for i, tc := range []struct{ name, config, err string }{
		{"empty", ``, "no rules"},
		{"no rules", `{"rules":[]}`, "no rules"},
		{"unknown field", `{"rules":[{"code":429,"give_up":true}]}`, "unknown field"},
		{"two actions", `{"rules":[{"give_up":true,"retry":{}}]}`, "exactly one"},
		{"no action", `{"rules":[{"status":[429]}]}`, "exactly one"},
		{"switch without model", `{"rules":[{"switch":{}}]}`, "model is required"},
		{"retry with model", `{"rules":[{"retry":{"model":"x"}}]}`, "model is for switch"},
		{"bad status", `{"rules":[{"status":["5xx"],"give_up":true}]}`, "status"},
		{"inverted range", `{"rules":[{"status":["599-500"],"give_up":true}]}`, "status"},
		{"bad class", `{"rules":[{"class":["slow"],"give_up":true}]}`, `unknown class "slow"`},
		{"bad regexp", `{"rules":[{"message":"(","give_up":true}]}`, "message"},
		{"bad glob", `{"rules":[{"model":"[","give_up":true}]}`, "model"},
		{"bad delay", `{"rules":[{"retry":{"delay":"1 minute"}}]}`, "delay"},
		{"negative backoff", `{"rules":[{"retry":{"backoff":-1}}]}`, "backoff"},
		{"bad attempts", `{"rules":[{"min_attempt":3,"max_attempt":2,"give_up":true}]}`, "min_attempt"},
		{"bad fail", `{"fail":"sideways","rules":[{"give_up":true}]}`, "fail must be"},
	} {
		for _, b := range backends {
			if b.Name != "native" && plugintest.Race && i%4 != 0 {
				continue // under -race, a sample of the rejections crosses the boundary
			}
			t.Run(b.Name+"/"+tc.name, func(t *testing.T) {
				_, err := b.Load(t, []byte(tc.config))
				require.ErrorIs(t, err, sdk.ErrConfigRejected)
				require.ErrorContains(t, err, tc.err)
			})
		}
	}
	for _, b := range backends {
		p, err := b.Load(t, []byte(`{"fail":"closed","rules":[{"give_up":true}]}`))
		require.NoError(t, err)
		require.Equal(t, abi.FailClosed, p.Policy().Fail)
	}
}
