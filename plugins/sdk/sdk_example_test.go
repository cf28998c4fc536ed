//go:build !wasip1

package sdk_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/sdk"
	"github.com/retryhost/retryhost/plugins/sdk/condition"
)

// A condition plugin is registered in an init function of its main
// package; sdk.Load runs it natively, through the same records and
// dispatch as in Wasm, as the plugin's tests do.
func Example() {
	condition.Register(func(config []byte) (condition.Decider, error) {
		fallback := string(config)
		if fallback == "" {
			return nil, errors.New("config: the fallback model is required")
		}
		return condition.Func(func(a *abi.Attempt) (abi.Decision, error) {
			if a.Status == 429 {
				return abi.Decision{Action: abi.ActionSwitch, Model: fallback}, nil
			}
			return abi.Decision{}, nil
		}), nil
	})

	_, err := sdk.Load("rule", nil)
	fmt.Println(err)

	p, _ := sdk.Load("rule", []byte("anthropic/claude"))
	d, _ := p.Decide(context.Background(), &abi.Attempt{Number: 1, Status: 429})
	fmt.Println(d.Action, d.Model)
	d, _ = p.Decide(context.Background(), &abi.Attempt{Number: 1, Status: 500})
	fmt.Println(d.Action)
	// Output:
	// sdk: config rejected: config: the fallback model is required
	// switch anthropic/claude
	// none
}
