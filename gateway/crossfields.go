package gateway

import (
	"encoding/json"
	"slices"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/anthropic"
	"github.com/retryhost/retryhost/provider/bedrock"
	"github.com/retryhost/retryhost/provider/gemini"
)

// A request that fails over to an upstream of the other API gets, besides
// the driver's fields (messages, system, tools, max tokens, temperature,
// top_p, stop), the few request fields that have a faithful translation:
// the tool choice, parallel tool use, the end-user id, and from Chat
// Completions the reasoning effort (as a thinking budget) and, for Gemini,
// the response format. The rest of the other format's fields have no
// meaning there and are not sent.

// effortBudget is the thinking budget, in tokens, that a Chat Completions
// reasoning_effort becomes: Anthropic's thinking.budget_tokens (0: no
// thinking block; the API's floor is 1024) and Gemini's
// generationConfig.thinkingConfig.thinkingBudget (0 turns thinking off
// where the model allows it; 2.5 Flash takes at most 24,576, 2.5 Pro
// 32,768).
var effortBudget = map[string]struct{ anthropic, gemini int }{
	"none":    {0, 0},
	"minimal": {0, 512},
	"low":     {1024, 1024},
	"medium":  {8192, 8192},
	"high":    {24576, 24576},
	"xhigh":   {32768, 24576},
	"max":     {32768, 24576},
}

// minThinkingBudget is the smallest thinking budget Anthropic's API takes.
const minThinkingBudget = 1024

// messagesExtras are the fields of a Messages request, beyond the
// driver's, that upstreams of the other APIs get translated.
type messagesExtras struct {
	toolChoice *struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	}
	topK     int
	thinking thinkingAsked
	budget   int    // the thinking budget, with thinkingOn
	user     string // metadata.user_id
}

// thinkingAsked is what a Messages request's thinking block asks.
type thinkingAsked int

const (
	thinkingUnset   thinkingAsked = iota
	thinkingOn                    // {"type": "enabled", "budget_tokens": N}
	thinkingOff                   // {"type": "disabled"}
	thinkingUnknown               // any other: no translation
)

// readMessagesExtras reads the fields toOpenAIFields, toGeminiMessages
// and toBedrockMessages translate. A tool_choice that is not an object
// with a type is the client's mistake; a top_k, thinking or metadata of
// the wrong shape is left out (an Anthropic upstream judges it).
func readMessagesExtras(fields map[string]json.RawMessage) (*messagesExtras, error) {
	x := &messagesExtras{}
	if err := field(fields, "tool_choice", &x.toolChoice); err != nil {
		return nil, badRequest("tool_choice", "tool_choice: want an object with a type")
	}
	_ = json.Unmarshal(fields["top_k"], &x.topK)
	if raw := fields["thinking"]; len(raw) > 0 && !isNull(raw) {
		var th struct {
			Type         string `json:"type"`
			BudgetTokens int    `json:"budget_tokens"`
		}
		x.thinking = thinkingUnknown
		if json.Unmarshal(raw, &th) == nil {
			switch {
			case th.Type == "enabled" && th.BudgetTokens > 0:
				x.thinking, x.budget = thinkingOn, th.BudgetTokens
			case th.Type == "disabled":
				x.thinking = thinkingOff
			}
		}
	}
	var md struct {
		UserID string `json:"user_id"`
	}
	if raw := fields["metadata"]; len(raw) > 0 && json.Unmarshal(raw, &md) == nil {
		x.user = md.UserID
	}
	return x, nil
}

// budgetEffort is the Chat Completions reasoning_effort a thinking budget
// becomes: the effort of effortBudget's nearest budget at or below it.
func budgetEffort(budget int) string {
	switch {
	case budget >= effortBudget["high"].anthropic:
		return "high"
	case budget >= effortBudget["medium"].anthropic:
		return "medium"
	}
	return "low"
}

// toOpenAIFields translates a Messages request's tool_choice,
// metadata.user_id (as `user`, the end-user id OpenAI's API takes) and
// thinking budget (as reasoning_effort, budgetEffort) for the
// OpenAI-compatible upstreams named by providers. It returns the
// parameters of the fall-back mapping (docs/gateway.md) it could not
// translate: top_k (OpenAI's API has none) and a thinking block of a type
// it does not know.
func toOpenAIFields(r *driver.Request, x *messagesExtras, providers []string) (dropped []string) {
	out := map[string]any{}
	if tc := x.toolChoice; tc != nil {
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
	if x.user != "" {
		out["user"] = x.user
	}
	switch x.thinking {
	case thinkingOn:
		out["reasoning_effort"] = budgetEffort(x.budget)
	case thinkingUnknown:
		dropped = append(dropped, "thinking")
	}
	if x.topK > 0 {
		dropped = append(dropped, "top_k")
	}
	setProviderOptions(r, providers, out)
	return dropped
}

// toGeminiMessages translates a Messages request's top_k
// (generationConfig.topK), thinking (thinkingConfig.thinkingBudget: the
// budget, at most Gemini's 24,576; disabled: 0) and, with tools,
// tool_choice (functionCallingConfig: auto AUTO, none NONE, any ANY, a
// tool ANY allowing only it) for the Gemini upstreams named by providers.
// It returns the parameters it could not translate: a thinking block of
// a type it does not know, and more stop sequences than the API takes
// (the adapter sends none then).
func toGeminiMessages(r *driver.Request, x *messagesExtras, providers []string) (dropped []string) {
	gc := map[string]any{}
	if x.topK > 0 {
		gc["topK"] = x.topK
	}
	switch x.thinking {
	case thinkingOn:
		gc["thinkingConfig"] = map[string]any{"thinkingBudget": min(x.budget, effortBudget["max"].gemini)}
	case thinkingOff:
		gc["thinkingConfig"] = map[string]any{"thinkingBudget": 0}
	case thinkingUnknown:
		dropped = append(dropped, "thinking")
	}
	if len(r.StopSequences) > gemini.MaxStopSequences {
		dropped = append(dropped, "stop_sequences")
	}
	out := map[string]any{}
	if len(gc) > 0 {
		out["generationConfig"] = gc
	}
	if tc := x.toolChoice; tc != nil && len(r.Tools) > 0 {
		switch tc.Type {
		case "auto", "none", "any":
			mode := map[string]string{"auto": "AUTO", "none": "NONE", "any": "ANY"}[tc.Type]
			out["toolConfig"] = map[string]any{"functionCallingConfig": map[string]any{"mode": mode}}
		case "tool":
			out["toolConfig"] = map[string]any{"functionCallingConfig": map[string]any{"mode": "ANY", "allowedFunctionNames": []string{tc.Name}}}
		}
	}
	setProviderOptions(r, providers, out)
	return dropped
}

// toBedrockMessages translates a Messages request's tool_choice (auto:
// none sent; any; a tool), and for Claude models its thinking budget and
// top_k, into a bedrock.Options for the Bedrock upstreams named by
// providers. It returns the parameters it could not translate, for Claude
// models and for the others: a tool_choice of none beside tools, more
// stop sequences than Converse takes, a thinking block of a type it does
// not know, and on a model that is not Claude top_k and thinking.
func toBedrockMessages(r *driver.Request, x *messagesExtras, providers []string) (claude, others []string) {
	var o bedrock.Options
	var dropped []string
	if tc := x.toolChoice; tc != nil && len(r.Tools) > 0 {
		switch tc.Type {
		case "none":
			dropped = append(dropped, "tool_choice")
		case "any":
			o.ToolChoice = "any"
		case "tool":
			o.ToolChoice, o.ToolName = "tool", tc.Name
		}
	}
	if len(r.StopSequences) > bedrock.MaxStopSequences {
		dropped = append(dropped, "stop_sequences")
	}
	if x.thinking == thinkingUnknown {
		dropped = append(dropped, "thinking")
	}
	claude, others = dropped, slices.Clone(dropped)
	if x.thinking == thinkingOn {
		o.ThinkingBudget = x.budget
		others = append(others, "thinking")
	}
	if x.topK > 0 {
		o.TopK = x.topK
		others = append(others, "top_k")
	}
	setBedrockOptions(r, providers, o)
	return claude, others
}

// toAnthropicFields translates a Chat Completions request's tool_choice,
// parallel_tool_calls, user and reasoning_effort (anthropicThinking) for
// the Anthropic upstreams named by providers. Values it cannot translate
// are left out (an OpenAI upstream judges them). It reads them from the
// fields parseChat decoded, not the body again; a value of the wrong type
// is left out too. It returns the parameters of the fall-back mapping
// (docs/gateway.md) that it could not translate: a response_format asking
// for JSON (the Messages API has none), a reasoning_effort the API would
// refuse.
func toAnthropicFields(r *driver.Request, fields map[string]json.RawMessage, providers []string) (dropped []string) {
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
	var effort string
	if field(fields, "reasoning_effort", &effort) == nil && effort != "" {
		forced := tc != nil && (tc["type"] == "any" || tc["type"] == "tool")
		switch thinking, maxTokens, ok := anthropicThinking(r, effort, forced); {
		case !ok:
			dropped = append(dropped, "reasoning_effort")
		case thinking != nil:
			out["thinking"] = thinking
			if maxTokens > 0 {
				out["max_tokens"] = maxTokens
			}
		}
	}
	if mime, _, ok := geminiResponseFormat(fields["response_format"]); !ok || mime != "" {
		dropped = append(dropped, "response_format")
	}
	setProviderOptions(r, providers, out)
	return dropped
}

// anthropicThinking is the thinking block a reasoning_effort becomes on
// the Messages API, and the max_tokens to send with it when the request
// set none (the API counts thinking in max_tokens, as OpenAI counts
// reasoning in max_completion_tokens, and wants the budget below it): the
// effort's budget (effortBudget) plus anthropic.DefaultMaxTokens for the
// answer. A request that set max tokens keeps them, and the budget is at
// most half of them (at least 1024). ok is false when the effort cannot
// be honoured there: an unknown effort, max tokens of 1024 or fewer, a
// temperature other than 1, a top_p below 0.95, or a forced tool choice
// (the API refuses thinking with those). "none" and "minimal" are
// honoured by sending no thinking block (nil, ok).
func anthropicThinking(r *driver.Request, effort string, forcedTool bool) (thinking map[string]any, maxTokens int, ok bool) {
	b, known := effortBudget[effort]
	switch {
	case !known:
		return nil, 0, false
	case b.anthropic == 0:
		return nil, 0, true
	case (r.Temperature != nil && *r.Temperature != 1) || (r.TopP != nil && *r.TopP < 0.95) || forcedTool:
		return nil, 0, false
	}
	budget := b.anthropic
	if m := r.MaxOutputTokens; m > 0 {
		if m <= minThinkingBudget {
			return nil, 0, false
		}
		budget = min(budget, max(minThinkingBudget, m/2))
	} else {
		maxTokens = budget + anthropic.DefaultMaxTokens
	}
	return map[string]any{"type": "enabled", "budget_tokens": budget}, maxTokens, true
}

// toGeminiFields translates a Chat Completions request's response_format
// (json_object: generationConfig.responseMimeType application/json;
// json_schema: that and its schema as responseJsonSchema, which takes JSON
// Schema as OpenAI's API does), reasoning_effort (thinkingConfig's
// thinkingBudget, effortBudget) and, when the request has tools,
// tool_choice (toolConfig.functionCallingConfig: auto AUTO, none NONE,
// required ANY, a named function ANY allowing only it) for the Gemini
// upstreams named by providers. Values it cannot translate are left out;
// it returns those of the fall-back mapping (docs/gateway.md): a
// response_format or reasoning_effort it does not know, and more stop
// sequences than the API takes (the adapter sends none then).
func toGeminiFields(r *driver.Request, fields map[string]json.RawMessage, providers []string) (dropped []string) {
	gc := map[string]any{}
	switch mime, schema, ok := geminiResponseFormat(fields["response_format"]); {
	case !ok:
		dropped = append(dropped, "response_format")
	case mime != "":
		gc["responseMimeType"] = mime
		if schema != nil {
			gc["responseJsonSchema"] = schema
		}
	}
	var effort string
	if field(fields, "reasoning_effort", &effort) == nil && effort != "" {
		if b, ok := effortBudget[effort]; ok {
			gc["thinkingConfig"] = map[string]any{"thinkingBudget": b.gemini}
		} else {
			dropped = append(dropped, "reasoning_effort")
		}
	}
	if len(r.StopSequences) > gemini.MaxStopSequences {
		dropped = append(dropped, "stop")
	}
	out := map[string]any{}
	if len(gc) > 0 {
		out["generationConfig"] = gc
	}
	if fc := geminiToolChoice(fields["tool_choice"]); fc != nil && len(r.Tools) > 0 {
		out["toolConfig"] = map[string]any{"functionCallingConfig": fc}
	}
	setProviderOptions(r, providers, out)
	return dropped
}

// geminiResponseFormat is the response MIME type and JSON schema a Chat
// Completions response_format asks of Gemini: "" for none (absent, null,
// or text), ok false for one it cannot translate (an unknown type, a
// json_schema without an object schema).
func geminiResponseFormat(raw json.RawMessage) (mime string, schema map[string]any, ok bool) {
	if len(raw) == 0 || isNull(raw) {
		return "", nil, true
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema struct {
			Schema map[string]any `json:"schema"`
		} `json:"json_schema"`
	}
	if json.Unmarshal(raw, &rf) != nil {
		return "", nil, false
	}
	switch rf.Type {
	case "text":
		return "", nil, true
	case "json_object":
		return "application/json", nil, true
	case "json_schema":
		if rf.JSONSchema.Schema == nil {
			return "", nil, false
		}
		return "application/json", rf.JSONSchema.Schema, true
	}
	return "", nil, false
}

// geminiToolChoice is Gemini's functionCallingConfig for a Chat
// Completions tool_choice, nil for none or one it cannot translate.
func geminiToolChoice(raw json.RawMessage) map[string]any {
	if len(raw) == 0 || isNull(raw) {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		mode := map[string]string{"auto": "AUTO", "none": "NONE", "required": "ANY"}[s]
		if mode == "" {
			return nil
		}
		return map[string]any{"mode": mode}
	}
	var fn struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &fn) == nil && fn.Type == "function" && fn.Function.Name != "" {
		return map[string]any{"mode": "ANY", "allowedFunctionNames": []string{fn.Function.Name}}
	}
	return nil
}

// toBedrockFields translates a Chat Completions request's tool_choice
// (auto: none sent, the model's default; required: any; a named function:
// that tool), response_format (json_schema: outputConfig's JSON schema)
// and reasoning_effort (a Claude model's thinking budget, by
// anthropicThinking's rules) into a bedrock.Options for the Bedrock
// upstreams named by providers. Values it cannot translate are left out;
// it returns those of the fall-back mapping (docs/gateway.md), for Claude
// models and for the others: a tool_choice of none beside tools (Converse
// cannot forbid calls), a response_format of json_object (Converse takes
// a schema, not a JSON mode) or one it does not know, more stop sequences
// than Converse takes (the adapter sends none then), and a
// reasoning_effort the model cannot honour (any but none and minimal on
// a model that is not Claude).
func toBedrockFields(r *driver.Request, fields map[string]json.RawMessage, providers []string) (claude, others []string) {
	var o bedrock.Options
	var dropped []string
	switch tc := fields["tool_choice"]; {
	case len(r.Tools) == 0 || len(tc) == 0 || isNull(tc):
	case string(tc) == `"none"`:
		dropped = append(dropped, "tool_choice")
	default:
		if fc := geminiToolChoice(tc); fc != nil && fc["mode"] == "ANY" {
			o.ToolChoice = "any"
			if names, ok := fc["allowedFunctionNames"].([]string); ok {
				o.ToolChoice, o.ToolName = "tool", names[0]
			}
		}
	}
	switch mime, schema, ok := geminiResponseFormat(fields["response_format"]); {
	case !ok || (mime != "" && schema == nil):
		dropped = append(dropped, "response_format")
	case schema != nil:
		var rf struct {
			JSONSchema struct {
				Name string `json:"name"`
			} `json:"json_schema"`
		}
		_ = json.Unmarshal(fields["response_format"], &rf)
		o.JSONSchema, o.SchemaName = schema, rf.JSONSchema.Name
	}
	if len(r.StopSequences) > bedrock.MaxStopSequences {
		dropped = append(dropped, "stop")
	}
	claude, others = dropped, slices.Clone(dropped)
	var effort string
	if field(fields, "reasoning_effort", &effort) == nil && effort != "" {
		forced := o.ToolChoice != ""
		switch thinking, _, ok := anthropicThinking(r, effort, forced); {
		case !ok:
			claude = append(claude, "reasoning_effort")
		case thinking != nil:
			o.ThinkingBudget = thinking["budget_tokens"].(int)
		}
		if b, known := effortBudget[effort]; !known || b.anthropic > 0 {
			others = append(others, "reasoning_effort")
		}
	}
	setBedrockOptions(r, providers, o)
	return claude, others
}

// setBedrockOptions sets o, unless it is the zero Options, as the
// ProviderOptions entry of the Bedrock upstreams named by providers.
func setBedrockOptions(r *driver.Request, providers []string, o bedrock.Options) {
	if o.ToolChoice == "" && o.JSONSchema == nil && o.ThinkingBudget == 0 && o.TopK == 0 {
		return
	}
	if r.ProviderOptions == nil {
		r.ProviderOptions = make(map[string]any, len(providers))
	}
	for _, p := range providers {
		r.ProviderOptions[p] = o
	}
}

// bedrockOthers is the name chatRequest.unhonoured and generation.provOf
// give the Bedrock models of provider prov that are not Claude, which
// honour less than its Claude ones under the same ProviderOptions entry.
func bedrockOthers(prov string) string { return prov + "\x00others" }

// bedrockOthersOf is bedrockOthers of each of provs.
func bedrockOthersOf(provs []string) []string {
	out := make([]string, len(provs))
	for i, p := range provs {
		out[i] = bedrockOthers(p)
	}
	return out
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
