package gateway

import (
	"encoding/json"

	"github.com/retryhost/retryhost/driver"
)

// A request that fails over to an upstream of the other API gets, besides
// the driver's fields (messages, system, tools, max tokens, temperature,
// top_p, stop), the few request fields that have a faithful translation:
// the tool choice, parallel tool use, and the end-user id. The rest of the
// other format's fields have no meaning there and are not sent.

// toOpenAIFields translates a Messages request's tool_choice and
// metadata.user_id (as `user`, the end-user id OpenAI's API takes) for the
// OpenAI-compatible upstreams named by providers. A metadata that is not
// an object with a string user_id is left out (an Anthropic upstream
// judges it).
func toOpenAIFields(r *driver.Request, fields map[string]json.RawMessage, providers []string) error {
	var tc *struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	}
	if err := field(fields, "tool_choice", &tc); err != nil {
		return badRequest("tool_choice", "tool_choice: want an object with a type")
	}
	out := map[string]any{}
	if tc != nil {
		switch tc.Type {
		case "auto", "none":
			out["tool_choice"] = tc.Type
		case "any":
			out["tool_choice"] = "required"
		case "tool":
			out["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": tc.Name}}
		}
		if tc.DisableParallelToolUse {
			out["parallel_tool_calls"] = false
		}
	}
	var md struct {
		UserID string `json:"user_id"`
	}
	if raw := fields["metadata"]; len(raw) > 0 && json.Unmarshal(raw, &md) == nil && md.UserID != "" {
		out["user"] = md.UserID
	}
	setProviderOptions(r, providers, out)
	return nil
}

// toAnthropicFields translates a Chat Completions request's tool_choice,
// parallel_tool_calls and user for the Anthropic upstreams named by
// providers. Values it cannot translate are left out (an OpenAI upstream
// judges them). It reads them from the fields parseChat decoded, not the
// body again; a value of the wrong type is left out too.
func toAnthropicFields(r *driver.Request, fields map[string]json.RawMessage, providers []string) {
	var f struct {
		ToolChoice        json.RawMessage
		ParallelToolCalls *bool
		User              string
	}
	f.ToolChoice = fields["tool_choice"]
	_ = json.Unmarshal(fields["parallel_tool_calls"], &f.ParallelToolCalls)
	_ = json.Unmarshal(fields["user"], &f.User)
	out := map[string]any{}
	var tc map[string]any
	var s string
	var fn struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	switch {
	case len(f.ToolChoice) == 0 || isNull(f.ToolChoice):
	case json.Unmarshal(f.ToolChoice, &s) == nil:
		switch s {
		case "auto", "none":
			tc = map[string]any{"type": s}
		case "required":
			tc = map[string]any{"type": "any"}
		}
	case json.Unmarshal(f.ToolChoice, &fn) == nil && fn.Type == "function" && fn.Function.Name != "":
		tc = map[string]any{"type": "tool", "name": fn.Function.Name}
	}
	if f.ParallelToolCalls != nil && !*f.ParallelToolCalls {
		if tc == nil {
			tc = map[string]any{"type": "auto"}
		}
		if tc["type"] != "none" {
			tc["disable_parallel_tool_use"] = true
		}
	}
	if tc != nil {
		out["tool_choice"] = tc
	}
	if f.User != "" {
		out["metadata"] = map[string]any{"user_id": f.User}
	}
	setProviderOptions(r, providers, out)
}

func setProviderOptions(r *driver.Request, providers []string, fields map[string]any) {
	if len(fields) == 0 {
		return
	}
	if r.ProviderOptions == nil {
		r.ProviderOptions = make(map[string]any, len(providers))
	}
	for _, p := range providers {
		r.ProviderOptions[p] = fields
	}
}
