// Command finish is a finish-reason condition plugin: it judges result
// attempts (the call succeeded, but the model stopped for a reason a rule
// rejects, such as its content filter or the length limit) and switches to
// the model configured for that reason. Its JSON config is documented in
// README.md.
package main

import (
	"errors"
	"fmt"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/internal/cfgrule"
	"github.com/retryhost/retryhost/plugins/sdk"
	"github.com/retryhost/retryhost/plugins/sdk/condition"
)

func init() {
	condition.Register(func(raw []byte) (condition.Decider, error) { return parse(raw) })
}

func main() {}

// config maps unified finish reasons to the model to switch to.
type config struct {
	// Switch maps a finish reason ("content-filter", "length", "other",
	// "refusal", "error", "tool-calls", "stop") to a model key.
	Switch map[string]string `json:"switch"`
	// Raw maps the provider's own finish word (as sent, such as "SAFETY")
	// to a model key; it is consulted first.
	Raw map[string]string `json:"raw"`
	// MaxAttempts caps the attempts on the target model (0 = the driver's
	// default, 1 for a switch).
	MaxAttempts int `json:"max_attempts"`
}

// The limits the C build has too (plugins/README.md), so both builds
// accept the same configs.
const (
	maxRaw      = 64      // words in "raw"
	maxStr      = 256     // bytes of a word or a model
	maxAttempts = 1000000 // "max_attempts"
)

type finish struct {
	byReason    [8]string // indexed by abi.Reason
	byRaw       map[string]string
	maxAttempts int
}

func parse(raw []byte) (*finish, error) {
	var c config
	if err := cfgrule.Size(raw); err != nil {
		return nil, err
	}
	if err := sdk.DecodeJSON(raw, &c); err != nil {
		return nil, err
	}
	if len(c.Switch) == 0 && len(c.Raw) == 0 {
		return nil, errors.New(`config: nothing to do: give "switch": {"content-filter": "provider/model", …}`)
	}
	if c.MaxAttempts < 0 || c.MaxAttempts > maxAttempts {
		return nil, errors.New(`config: "max_attempts": want an integer 0-1000000`)
	}
	if len(c.Raw) > maxRaw {
		return nil, errors.New(`config: "raw": more than 64 words`)
	}
	f := &finish{byRaw: c.Raw, maxAttempts: c.MaxAttempts}
	for name, model := range c.Switch {
		r, ok := abi.ParseReason(name)
		if !ok || r == abi.ReasonUnknown || int(r) >= len(f.byReason) {
			return nil, fmt.Errorf("config: unknown finish reason %q", name)
		}
		if model == "" {
			return nil, fmt.Errorf("config: %q: empty model", name)
		}
		if len(model) > maxStr {
			return nil, fmt.Errorf("config: %q: a model is longer than 256 bytes", name)
		}
		f.byReason[r] = model
	}
	for word, model := range c.Raw {
		if word == "" || model == "" {
			return nil, errors.New(`config: "raw": empty finish word or model`)
		}
		if len(word) > maxStr || len(model) > maxStr {
			return nil, errors.New(`config: "raw": a word or a model is longer than 256 bytes`)
		}
	}
	return f, nil
}

// Decide switches a result attempt whose finish reason is mapped. Error
// attempts, unmapped reasons and a target equal to the attempt's own model
// (no self-loop) get no opinion.
func (f *finish) Decide(a *abi.Attempt) (abi.Decision, error) {
	if a.Class != abi.ClassNone {
		return abi.Decision{}, nil
	}
	model := f.byRaw[a.Finish.Raw]
	if model == "" && int(a.Finish.Unified) < len(f.byReason) {
		model = f.byReason[a.Finish.Unified]
	}
	if model == "" || model == a.Model {
		return abi.Decision{}, nil
	}
	return abi.Decision{Action: abi.ActionSwitch, Model: model, MaxAttempts: f.maxAttempts}, nil
}
