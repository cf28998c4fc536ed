//go:build wasip1

// Command guest is the custom condition of examples/custom-condition,
// written in Go with the guest SDK and built to Wasm: when a model rejects a
// request because the prompt is longer than its context window (HTTP 400,
// "maximum context length", "context_length_exceeded"), it switches to the
// long-context model named by its config. Every other failure gets no
// opinion, so the rules after it decide. Rebuild with
//
//	make -C examples/custom-condition
package main

import (
	"errors"
	"strings"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/sdk/condition"
)

func init() {
	condition.Register(func(config []byte) (condition.Decider, error) {
		model := strings.TrimSpace(string(config))
		if model == "" {
			return nil, errors.New("config: name the long-context model to switch to, such as anthropic/claude-sonnet-4")
		}
		return contextWindow{model: model}, nil
	})
}

func main() {}

// contextWindow keeps no state between calls, as the ABI asks.
type contextWindow struct{ model string }

// overflow lists how providers say the prompt is too long, lower case, for
// the errors the host's classifier does not know yet.
var overflow = []string{"context_length_exceeded", "maximum context length", "prompt is too long", "context window"}

func (c contextWindow) Decide(a *abi.Attempt) (abi.Decision, error) {
	if a.Model == c.model {
		return abi.Decision{}, nil // never a self-loop
	}
	if a.Class == abi.ClassContextLength { // the host classified it already
		return abi.Decision{Action: abi.ActionSwitch, Model: c.model}, nil
	}
	if a.Status != 400 {
		return abi.Decision{}, nil
	}
	msg := strings.ToLower(a.Message)
	for _, s := range overflow {
		if strings.Contains(msg, s) {
			return abi.Decision{Action: abi.ActionSwitch, Model: c.model}, nil
		}
	}
	return abi.Decision{}, nil
}
