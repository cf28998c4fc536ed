package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit"
)

// bodyLog keeps the JSON bodies a loopback upstream received.
type bodyLog struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func (l *bodyLog) add(b []byte) {
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	l.mu.Lock()
	l.bodies = append(l.bodies, body)
	l.mu.Unlock()
}

func (l *bodyLog) last(t *testing.T) map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.NotEmpty(t, l.bodies, "the fall-back upstream got no request")
	return l.bodies[len(l.bodies)-1]
}

// recordingGemini answers every call with the SSE events of a recorded
// Gemini transcript and keeps the bodies it received.
func recordingGemini(t *testing.T, transcript string) (*httptest.Server, *bodyLog) {
	t.Helper()
	sse, log := geminiSSE(t, transcript), &bodyLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		log.add(b)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(sse))
	}))
	t.Cleanup(srv.Close)
	return srv, log
}

// crossRig serves a policy whose primary is an OpenAI-compatible model and
// whose backup (the fall-back of defaultRules) is of provider fallback:
// "anthropic", "gemini", "bedrock" (a Claude model) or "bedrock-llama" (a
// model that is not Claude); backupSpec is added to the backup's model
// entry. received returns the body the backup got last.
func crossRig(t *testing.T, fallback, backupSpec string) (r *rig, received func() map[string]any) {
	t.Helper()
	return crossRigFrom(t, "openai", fallback, backupSpec)
}

// crossRigFrom is crossRig with a primary of provider from: "openai" or
// "anthropic"; fallback may be "openai" too.
func crossRigFrom(t *testing.T, from, fallback, backupSpec string) (r *rig, received func() map[string]any) {
	t.Helper()
	r = &rig{t: t, up: map[string]*upstream{}, logs: &testkit.LogBuffer{}}
	primary := newUpstream("primary")
	r.up["primary"] = primary
	primaryURL := primary.url()
	if from == "anthropic" {
		primaryURL = primary.srv.URL
	}
	var backup string
	switch fallback {
	case "anthropic", "openai":
		u := newUpstream("backup")
		r.up["backup"] = u
		base := u.srv.URL
		if fallback == "openai" {
			base = u.url()
		}
		backup = fmt.Sprintf(`{"name": "backup", "provider": %q, "model": "up-backup", "base_url": %q, "api_key_env": "UPSTREAM_KEY"%s}`, fallback, base, backupSpec)
		received = func() map[string]any {
			hits := u.requests()
			require.NotEmpty(t, hits, "the fall-back upstream got no request")
			var body map[string]any
			require.NoError(t, json.Unmarshal(hits[len(hits)-1].raw, &body))
			return body
		}
	case "gemini":
		srv, log := recordingGemini(t, "text")
		backup = fmt.Sprintf(`{"name": "backup", "provider": "gemini", "model": "gemini-2.5-flash", "base_url": %q, "api_key_env": "UPSTREAM_KEY"%s}`, srv.URL, backupSpec)
		received = func() map[string]any { return log.last(t) }
	case "bedrock", "bedrock-llama":
		awsEnv(t)
		srv, _, log := bedrockUpstream(t, "text")
		id := "anthropic.claude-sonnet-4-20250514-v1:0"
		if fallback == "bedrock-llama" {
			id = "meta.llama3-3-70b-instruct-v1:0"
		}
		backup = fmt.Sprintf(`{"name": "backup", "provider": "bedrock", "model": %q, "region": "us-east-1", "base_url": %q%s}`, id, srv.URL, backupSpec)
		received = func() map[string]any { return log.last(t) }
	default:
		t.Fatalf("no fall-back provider %q", fallback)
	}
	r.serve(fmt.Sprintf(`{"models": [{"name": "primary", "provider": %q, "model": "up-primary", "base_url": %q, "api_key_env": "UPSTREAM_KEY"}, %s], %s}`,
		from, primaryURL, backup, defaultRules))
	return r, received
}

// at returns the value at the path of keys in a decoded JSON body (nil
// when absent).
func at(body map[string]any, path ...string) any {
	var v any = body
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

var weatherTool = oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather",
	Description: oai.String("Weather now"),
	Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
		"required": []string{"city"}}})

var citySchema = map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
	"required": []any{"city"}, "additionalProperties": false}

// Each parameter a Chat Completions client sets reaches the fall-back
// model in that provider's own name and shape: the OpenAI-compatible
// primary answers 503, the request fails over to an Anthropic or Gemini
// model, and the fall-back upstream's body is checked.
func TestParametersCrossAFallBack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fallback string
		set      func(p *oai.ChatCompletionNewParams)
		check    func(t *testing.T, body map[string]any)
	}{
		{"max_completion_tokens as max_tokens", "anthropic",
			func(p *oai.ChatCompletionNewParams) { p.MaxCompletionTokens = oai.Int(300) },
			func(t *testing.T, b map[string]any) { require.EqualValues(t, 300, b["max_tokens"]) }},
		{"max_completion_tokens as maxOutputTokens", "gemini",
			func(p *oai.ChatCompletionNewParams) { p.MaxCompletionTokens = oai.Int(300) },
			func(t *testing.T, b map[string]any) {
				require.EqualValues(t, 300, at(b, "generationConfig", "maxOutputTokens"))
			}},
		{"max_tokens as max_tokens", "anthropic",
			func(p *oai.ChatCompletionNewParams) { p.MaxTokens = oai.Int(200) },
			func(t *testing.T, b map[string]any) { require.EqualValues(t, 200, b["max_tokens"]) }},
		{"max_tokens as maxOutputTokens", "gemini",
			func(p *oai.ChatCompletionNewParams) { p.MaxTokens = oai.Int(200) },
			func(t *testing.T, b map[string]any) {
				require.EqualValues(t, 200, at(b, "generationConfig", "maxOutputTokens"))
			}},
		{"temperature above Anthropic's range is clamped to 1", "anthropic",
			func(p *oai.ChatCompletionNewParams) { p.Temperature = oai.Float(1.5) },
			func(t *testing.T, b map[string]any) { require.Equal(t, 1.0, b["temperature"]) }},
		{"temperature in Anthropic's range", "anthropic",
			func(p *oai.ChatCompletionNewParams) { p.Temperature = oai.Float(0.25) },
			func(t *testing.T, b map[string]any) { require.Equal(t, 0.25, b["temperature"]) }},
		{"temperature in Gemini's range, as is", "gemini",
			func(p *oai.ChatCompletionNewParams) { p.Temperature = oai.Float(1.5) },
			func(t *testing.T, b map[string]any) {
				require.Equal(t, 1.5, at(b, "generationConfig", "temperature"))
			}},
		{"top_p", "anthropic",
			func(p *oai.ChatCompletionNewParams) { p.TopP = oai.Float(0.5) },
			func(t *testing.T, b map[string]any) { require.Equal(t, 0.5, b["top_p"]) }},
		{"top_p as topP", "gemini",
			func(p *oai.ChatCompletionNewParams) { p.TopP = oai.Float(0.5) },
			func(t *testing.T, b map[string]any) { require.Equal(t, 0.5, at(b, "generationConfig", "topP")) }},
		{"stop as stop_sequences", "anthropic",
			func(p *oai.ChatCompletionNewParams) {
				p.Stop = oai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"END", "STOP"}}
			},
			func(t *testing.T, b map[string]any) { require.Equal(t, []any{"END", "STOP"}, b["stop_sequences"]) }},
		{"stop as stopSequences", "gemini",
			func(p *oai.ChatCompletionNewParams) {
				p.Stop = oai.ChatCompletionNewParamsStopUnion{OfString: oai.String("END")}
			},
			func(t *testing.T, b map[string]any) {
				require.Equal(t, []any{"END"}, at(b, "generationConfig", "stopSequences"))
			}},
		{"tools as input_schema, tool_choice required as any", "anthropic",
			func(p *oai.ChatCompletionNewParams) {
				p.Tools = []oai.ChatCompletionToolUnionParam{weatherTool}
				p.ToolChoice = oai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: oai.String("required")}
			},
			func(t *testing.T, b map[string]any) {
				tools := b["tools"].([]any)
				require.Len(t, tools, 1)
				require.Equal(t, "get_weather", at(tools[0].(map[string]any), "name"))
				require.Equal(t, map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
					"required": []any{"city"}}, at(tools[0].(map[string]any), "input_schema"))
				require.Equal(t, map[string]any{"type": "any"}, b["tool_choice"])
			}},
		{"tools as functionDeclarations, tool_choice as functionCallingConfig", "gemini",
			func(p *oai.ChatCompletionNewParams) {
				p.Tools = []oai.ChatCompletionToolUnionParam{weatherTool}
				p.ToolChoice = oai.ToolChoiceOptionFunctionToolChoice(oai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"})
			},
			func(t *testing.T, b map[string]any) {
				decls := at(b["tools"].([]any)[0].(map[string]any), "functionDeclarations").([]any)
				require.Len(t, decls, 1)
				d := decls[0].(map[string]any)
				require.Equal(t, "get_weather", d["name"])
				require.Equal(t, map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
					"required": []any{"city"}}, d["parametersJsonSchema"])
				require.Equal(t, map[string]any{"mode": "ANY", "allowedFunctionNames": []any{"get_weather"}},
					at(b, "toolConfig", "functionCallingConfig"))
			}},
		{"response_format json_schema as responseMimeType and responseJsonSchema", "gemini",
			func(p *oai.ChatCompletionNewParams) {
				p.ResponseFormat = oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
					JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "city", Schema: citySchema, Strict: oai.Bool(true)}}}
				p.MaxCompletionTokens = oai.Int(300)
			},
			func(t *testing.T, b map[string]any) {
				require.Equal(t, "application/json", at(b, "generationConfig", "responseMimeType"))
				require.Equal(t, citySchema, at(b, "generationConfig", "responseJsonSchema"))
				// merged into the driver's generationConfig, not over it
				require.EqualValues(t, 300, at(b, "generationConfig", "maxOutputTokens"))
			}},
		{"response_format json_object as responseMimeType", "gemini",
			func(p *oai.ChatCompletionNewParams) {
				p.ResponseFormat = oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
			},
			func(t *testing.T, b map[string]any) {
				require.Equal(t, "application/json", at(b, "generationConfig", "responseMimeType"))
				require.Nil(t, at(b, "generationConfig", "responseJsonSchema"))
			}},
		{"reasoning_effort as a thinking budget, max_tokens above it", "anthropic",
			func(p *oai.ChatCompletionNewParams) { p.ReasoningEffort = shared.ReasoningEffortMedium },
			func(t *testing.T, b map[string]any) {
				require.Equal(t, map[string]any{"type": "enabled", "budget_tokens": 8192.0}, b["thinking"])
				require.EqualValues(t, 8192+4096, b["max_tokens"])
			}},
		{"reasoning_effort as a thinking budget within the client's max tokens", "anthropic",
			func(p *oai.ChatCompletionNewParams) {
				p.ReasoningEffort = shared.ReasoningEffortHigh
				p.MaxCompletionTokens = oai.Int(10000)
			},
			func(t *testing.T, b map[string]any) {
				require.Equal(t, map[string]any{"type": "enabled", "budget_tokens": 5000.0}, b["thinking"])
				require.EqualValues(t, 10000, b["max_tokens"])
			}},
		{"reasoning_effort as thinkingBudget", "gemini",
			func(p *oai.ChatCompletionNewParams) { p.ReasoningEffort = shared.ReasoningEffortLow },
			func(t *testing.T, b map[string]any) {
				require.EqualValues(t, 1024, at(b, "generationConfig", "thinkingConfig", "thinkingBudget"))
			}},
		{"max_completion_tokens as maxTokens", "bedrock",
			func(p *oai.ChatCompletionNewParams) { p.MaxCompletionTokens = oai.Int(300) },
			func(t *testing.T, b map[string]any) {
				require.EqualValues(t, 300, at(b, "inferenceConfig", "maxTokens"))
			}},
		{"max_tokens as maxTokens", "bedrock",
			func(p *oai.ChatCompletionNewParams) { p.MaxTokens = oai.Int(200) },
			func(t *testing.T, b map[string]any) {
				require.EqualValues(t, 200, at(b, "inferenceConfig", "maxTokens"))
			}},
		{"temperature above Converse's range is clamped to 1", "bedrock",
			func(p *oai.ChatCompletionNewParams) { p.Temperature = oai.Float(1.5) },
			func(t *testing.T, b map[string]any) { require.Equal(t, 1.0, at(b, "inferenceConfig", "temperature")) }},
		{"temperature in Converse's range", "bedrock",
			func(p *oai.ChatCompletionNewParams) { p.Temperature = oai.Float(0.25) },
			func(t *testing.T, b map[string]any) { require.Equal(t, 0.25, at(b, "inferenceConfig", "temperature")) }},
		{"top_p as topP", "bedrock",
			func(p *oai.ChatCompletionNewParams) { p.TopP = oai.Float(0.5) },
			func(t *testing.T, b map[string]any) { require.Equal(t, 0.5, at(b, "inferenceConfig", "topP")) }},
		{"stop as stopSequences", "bedrock",
			func(p *oai.ChatCompletionNewParams) {
				p.Stop = oai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"END", "STOP"}}
			},
			func(t *testing.T, b map[string]any) {
				require.Equal(t, []any{"END", "STOP"}, at(b, "inferenceConfig", "stopSequences"))
			}},
		{"tools as toolSpec, tool_choice required as any", "bedrock",
			func(p *oai.ChatCompletionNewParams) {
				p.Tools = []oai.ChatCompletionToolUnionParam{weatherTool}
				p.ToolChoice = oai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: oai.String("required")}
			},
			func(t *testing.T, b map[string]any) {
				tools := at(b, "toolConfig", "tools").([]any)
				require.Len(t, tools, 1)
				spec := at(tools[0].(map[string]any), "toolSpec").(map[string]any)
				require.Equal(t, "get_weather", spec["name"])
				require.Equal(t, "Weather now", spec["description"])
				require.Equal(t, map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
					"required": []any{"city"}}, at(spec, "inputSchema", "json"))
				require.Equal(t, map[string]any{"any": map[string]any{}}, at(b, "toolConfig", "toolChoice"))
			}},
		{"a named tool_choice as toolChoice tool", "bedrock",
			func(p *oai.ChatCompletionNewParams) {
				p.Tools = []oai.ChatCompletionToolUnionParam{weatherTool}
				p.ToolChoice = oai.ToolChoiceOptionFunctionToolChoice(oai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"})
			},
			func(t *testing.T, b map[string]any) {
				require.Equal(t, map[string]any{"tool": map[string]any{"name": "get_weather"}}, at(b, "toolConfig", "toolChoice"))
			}},
		{"tool_choice auto as the default", "bedrock",
			func(p *oai.ChatCompletionNewParams) {
				p.Tools = []oai.ChatCompletionToolUnionParam{weatherTool}
				p.ToolChoice = oai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: oai.String("auto")}
			},
			func(t *testing.T, b map[string]any) {
				require.NotNil(t, at(b, "toolConfig", "tools"))
				require.Nil(t, at(b, "toolConfig", "toolChoice"))
			}},
		{"response_format json_schema as outputConfig's JSON schema", "bedrock",
			func(p *oai.ChatCompletionNewParams) {
				p.ResponseFormat = oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
					JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "city", Schema: citySchema, Strict: oai.Bool(true)}}}
			},
			func(t *testing.T, b map[string]any) {
				require.Equal(t, "json_schema", at(b, "outputConfig", "textFormat", "type"))
				def := at(b, "outputConfig", "textFormat", "structure", "jsonSchema").(map[string]any)
				require.Equal(t, "city", def["name"])
				var schema map[string]any
				require.NoError(t, json.Unmarshal([]byte(def["schema"].(string)), &schema))
				require.Equal(t, citySchema, schema)
			}},
		{"reasoning_effort as a Claude thinking budget, maxTokens above it", "bedrock",
			func(p *oai.ChatCompletionNewParams) { p.ReasoningEffort = shared.ReasoningEffortMedium },
			func(t *testing.T, b map[string]any) {
				require.Equal(t, map[string]any{"type": "enabled", "budget_tokens": 8192.0}, at(b, "additionalModelRequestFields", "thinking"))
				require.EqualValues(t, 8192+4096, at(b, "inferenceConfig", "maxTokens"))
			}},
		{"reasoning_effort as a Claude thinking budget within the client's max tokens", "bedrock",
			func(p *oai.ChatCompletionNewParams) {
				p.ReasoningEffort = shared.ReasoningEffortHigh
				p.MaxCompletionTokens = oai.Int(10000)
			},
			func(t *testing.T, b map[string]any) {
				require.Equal(t, map[string]any{"type": "enabled", "budget_tokens": 5000.0}, at(b, "additionalModelRequestFields", "thinking"))
				require.EqualValues(t, 10000, at(b, "inferenceConfig", "maxTokens"))
			}},
		{"reasoning_effort minimal as no thinking on a model that is not Claude", "bedrock-llama",
			func(p *oai.ChatCompletionNewParams) { p.ReasoningEffort = shared.ReasoningEffortMinimal },
			func(t *testing.T, b map[string]any) { require.Nil(t, b["additionalModelRequestFields"]) }},
	} {
		t.Run(tc.fallback+"/"+tc.name, func(t *testing.T) {
			r, received := crossRig(t, tc.fallback, "")
			r.up["primary"].play(act{status: 503})
			p := params("primary")
			tc.set(&p)
			cc, err := r.client.Chat.Completions.New(context.Background(), p)
			require.NoError(t, err)
			require.Equal(t, "backup", cc.Model)
			tc.check(t, received())
		})
	}
}

// droppedLogs returns the (model, param) of each log line that says a
// parameter was not sent to a model.
func droppedLogs(t *testing.T, logs string) [][2]string {
	t.Helper()
	var out [][2]string
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec struct {
			Msg   string `json:"msg"`
			Level string `json:"level"`
			Model string `json:"model"`
			Param string `json:"param"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "gateway: a parameter the model cannot honour was not sent" {
			require.Equal(t, "WARN", rec.Level)
			out = append(out, [2]string{rec.Model, rec.Param})
		}
	}
	return out
}

// A parameter the fall-back model's provider cannot honour is not sent
// there: one warning naming the model and the parameter, and a count in
// retryhost_gateway_params_dropped_total{model,param}. The primary, which
// honours it, is neither logged nor counted.
func TestParameterTheFallBackCannotHonourIsDropped(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fallback string
		set      func(p *oai.ChatCompletionNewParams)
		param    string
		absent   func(body map[string]any) any
	}{
		{"response_format on Anthropic", "anthropic",
			func(p *oai.ChatCompletionNewParams) {
				p.ResponseFormat = oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
			},
			"response_format", func(b map[string]any) any { return b["response_format"] }},
		{"reasoning_effort beside a temperature Anthropic refuses with thinking", "anthropic",
			func(p *oai.ChatCompletionNewParams) {
				p.ReasoningEffort = shared.ReasoningEffortHigh
				p.Temperature = oai.Float(0.3)
			},
			"reasoning_effort", func(b map[string]any) any { return b["thinking"] }},
		{"more stop sequences than Gemini takes", "gemini",
			func(p *oai.ChatCompletionNewParams) {
				p.Stop = oai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"a", "b", "c", "d", "e", "f"}}
			},
			"stop", func(b map[string]any) any { return at(b, "generationConfig", "stopSequences") }},
		{"response_format json_object on Bedrock", "bedrock",
			func(p *oai.ChatCompletionNewParams) {
				p.ResponseFormat = oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
			},
			"response_format", func(b map[string]any) any { return b["outputConfig"] }},
		{"tool_choice none beside tools on Bedrock", "bedrock",
			func(p *oai.ChatCompletionNewParams) {
				p.Tools = []oai.ChatCompletionToolUnionParam{weatherTool}
				p.ToolChoice = oai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: oai.String("none")}
			},
			"tool_choice", func(b map[string]any) any { return at(b, "toolConfig", "toolChoice") }},
		{"more stop sequences than Converse takes", "bedrock",
			func(p *oai.ChatCompletionNewParams) {
				stops := make([]string, 2501)
				for i := range stops {
					stops[i] = fmt.Sprint("s", i)
				}
				p.Stop = oai.ChatCompletionNewParamsStopUnion{OfStringArray: stops}
			},
			"stop", func(b map[string]any) any { return at(b, "inferenceConfig", "stopSequences") }},
		{"reasoning_effort on a Bedrock model that is not Claude", "bedrock-llama",
			func(p *oai.ChatCompletionNewParams) { p.ReasoningEffort = shared.ReasoningEffortHigh },
			"reasoning_effort", func(b map[string]any) any { return b["additionalModelRequestFields"] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, received := crossRig(t, tc.fallback, "")
			r.up["primary"].play(act{status: 503})
			p := params("primary")
			tc.set(&p)
			cc, err := r.client.Chat.Completions.New(context.Background(), p)
			require.NoError(t, err)
			require.Equal(t, "backup", cc.Model)
			require.Nil(t, tc.absent(received()))
			require.Equal(t, [][2]string{{"backup", tc.param}}, droppedLogs(t, r.logs.String()))
			require.Contains(t, r.metricsText(),
				fmt.Sprintf(`retryhost_gateway_params_dropped_total{model="backup",param=%q} 1`, tc.param))
		})
	}
}

// A model whose policy says "unsupported_params": "skip" is passed over
// for a request with a parameter it cannot honour: the rule that would
// fall back to it does not, and the next rule's model answers. A request
// it can honour still falls back to it.
func TestModelThatSkipsUnsupportedParamsIsPassedOver(t *testing.T) {
	r := &rig{t: t, up: map[string]*upstream{}, logs: &testkit.LogBuffer{}}
	for _, n := range []string{"primary", "backup", "third"} {
		r.up[n] = newUpstream(n)
	}
	r.serve(fmt.Sprintf(`{"models": [
		{"name": "primary", "provider": "openai", "model": "up-primary", "base_url": %q, "api_key_env": "UPSTREAM_KEY"},
		{"name": "backup", "provider": "anthropic", "model": "up-backup", "base_url": %q, "api_key_env": "UPSTREAM_KEY", "unsupported_params": "skip"},
		{"name": "third", "provider": "openai", "model": "up-third", "base_url": %q, "api_key_env": "UPSTREAM_KEY"}],
		"rules": [
			{"when": {"status_range": [500, 599]}, "action": "switch", "model": "backup"},
			{"when": {"status_range": [500, 599]}, "action": "switch", "model": "third"}
		]}`, r.up["primary"].url(), r.up["backup"].srv.URL, r.up["third"].url()))
	for _, tc := range []struct {
		name     string
		set      func(p *oai.ChatCompletionNewParams)
		answered string
	}{
		{"cannot honour response_format: skipped", func(p *oai.ChatCompletionNewParams) {
			p.ResponseFormat = oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
		}, "third"},
		{"honours every parameter: falls back to it", func(p *oai.ChatCompletionNewParams) {
			p.Temperature = oai.Float(0.5)
		}, "backup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, u := range r.up {
				u.reset()
			}
			r.up["primary"].play(act{status: 503})
			p := params("primary")
			tc.set(&p)
			cc, err := r.client.Chat.Completions.New(context.Background(), p)
			require.NoError(t, err)
			require.Equal(t, tc.answered, cc.Model)
			for _, n := range []string{"backup", "third"} {
				require.Equal(t, n == tc.answered, len(r.up[n].requests()) == 1, "%s was asked", n)
			}
		})
	}
	require.Empty(t, droppedLogs(t, r.logs.String()), "a skipped model drops nothing")
}

// A Bedrock model that is not Claude, with "unsupported_params": "skip",
// is passed over for a request whose reasoning_effort it cannot honour,
// and falls back for one it can (no thinking for minimal).
func TestBedrockModelThatSkipsUnsupportedParamsIsPassedOver(t *testing.T) {
	awsEnv(t)
	r := &rig{t: t, up: map[string]*upstream{}, logs: &testkit.LogBuffer{}}
	for _, n := range []string{"primary", "third"} {
		r.up[n] = newUpstream(n)
	}
	srv, paths, _ := bedrockUpstream(t, "text")
	r.serve(fmt.Sprintf(`{"models": [
		{"name": "primary", "provider": "openai", "model": "up-primary", "base_url": %q, "api_key_env": "UPSTREAM_KEY"},
		{"name": "backup", "provider": "bedrock", "model": "meta.llama3-3-70b-instruct-v1:0", "region": "us-east-1", "base_url": %q, "unsupported_params": "skip"},
		{"name": "third", "provider": "openai", "model": "up-third", "base_url": %q, "api_key_env": "UPSTREAM_KEY"}],
		"rules": [
			{"when": {"status_range": [500, 599]}, "action": "switch", "model": "backup"},
			{"when": {"status_range": [500, 599]}, "action": "switch", "model": "third"}
		]}`, r.up["primary"].url(), srv.URL, r.up["third"].url()))
	for _, tc := range []struct {
		effort   shared.ReasoningEffort
		answered string
	}{{shared.ReasoningEffortHigh, "third"}, {shared.ReasoningEffortMinimal, "backup"}} {
		t.Run(string(tc.effort), func(t *testing.T) {
			r.up["primary"].play(act{status: 503})
			p := params("primary")
			p.ReasoningEffort = tc.effort
			cc, err := r.client.Chat.Completions.New(context.Background(), p)
			require.NoError(t, err)
			require.Equal(t, tc.answered, cc.Model)
			require.Equal(t, tc.answered == "backup", len(paths) == 1, "the Bedrock model was asked")
			for len(paths) > 0 {
				<-paths
			}
		})
	}
	require.Empty(t, droppedLogs(t, r.logs.String()), "a skipped model drops nothing")
}

// messagesWeatherTool is a Messages API tool, with the fields a request
// sets beside it.
const messagesWeatherTool = `"tools": [{"name": "get_weather", "description": "Weather now",
	"input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]`

var weatherSchema = map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
	"required": []any{"city"}}

// Each parameter an Anthropic Messages client sets reaches the fall-back
// model in that provider's own name and shape: the Anthropic primary
// answers 503, the request fails over to an OpenAI-compatible, Gemini or
// Bedrock model, and the fall-back upstream's body is checked.
func TestMessagesParametersCrossAFallBack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fallback string
		fields   string // added to the request body
		check    func(t *testing.T, body map[string]any)
	}{
		{"max_tokens", "openai", ``, func(t *testing.T, b map[string]any) {
			require.EqualValues(t, 256, cmp.Or(b["max_completion_tokens"], b["max_tokens"]))
		}},
		{"temperature", "openai", `"temperature": 0.5`, func(t *testing.T, b map[string]any) { require.Equal(t, 0.5, b["temperature"]) }},
		{"top_p", "openai", `"top_p": 0.5`, func(t *testing.T, b map[string]any) { require.Equal(t, 0.5, b["top_p"]) }},
		{"stop_sequences as stop", "openai", `"stop_sequences": ["END", "STOP"]`, func(t *testing.T, b map[string]any) {
			require.Equal(t, []any{"END", "STOP"}, b["stop"])
		}},
		{"system as a system message", "openai", `"system": "Be brief."`, func(t *testing.T, b map[string]any) {
			msg := b["messages"].([]any)[0].(map[string]any)
			require.Contains(t, []any{"system", "developer"}, msg["role"])
			require.Equal(t, "Be brief.", msg["content"])
		}},
		{"tools as functions, tool_choice any as required", "openai", messagesWeatherTool + `, "tool_choice": {"type": "any"}`,
			func(t *testing.T, b map[string]any) {
				fn := at(b["tools"].([]any)[0].(map[string]any), "function").(map[string]any)
				require.Equal(t, "get_weather", fn["name"])
				require.Equal(t, weatherSchema, fn["parameters"])
				require.Equal(t, "required", b["tool_choice"])
			}},
		{"tool_choice tool as a function", "openai", messagesWeatherTool + `, "tool_choice": {"type": "tool", "name": "get_weather"}`,
			func(t *testing.T, b map[string]any) {
				require.Equal(t, map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}, b["tool_choice"])
			}},
		{"thinking budget as reasoning_effort", "openai", `"thinking": {"type": "enabled", "budget_tokens": 10000}`,
			func(t *testing.T, b map[string]any) { require.Equal(t, "medium", b["reasoning_effort"]) }},

		{"max_tokens as maxOutputTokens", "gemini", ``, func(t *testing.T, b map[string]any) {
			require.EqualValues(t, 256, at(b, "generationConfig", "maxOutputTokens"))
		}},
		{"temperature", "gemini", `"temperature": 0.5`, func(t *testing.T, b map[string]any) {
			require.Equal(t, 0.5, at(b, "generationConfig", "temperature"))
		}},
		{"top_p as topP", "gemini", `"top_p": 0.5`, func(t *testing.T, b map[string]any) {
			require.Equal(t, 0.5, at(b, "generationConfig", "topP"))
		}},
		{"top_k as topK", "gemini", `"top_k": 40`, func(t *testing.T, b map[string]any) {
			require.EqualValues(t, 40, at(b, "generationConfig", "topK"))
		}},
		{"stop_sequences as stopSequences", "gemini", `"stop_sequences": ["END"]`, func(t *testing.T, b map[string]any) {
			require.Equal(t, []any{"END"}, at(b, "generationConfig", "stopSequences"))
		}},
		{"system as systemInstruction", "gemini", `"system": [{"type": "text", "text": "Be brief."}]`, func(t *testing.T, b map[string]any) {
			require.Equal(t, "Be brief.", at(b["systemInstruction"].(map[string]any)["parts"].([]any)[0].(map[string]any), "text"))
		}},
		{"tools as functionDeclarations, tool_choice tool as ANY of it", "gemini", messagesWeatherTool + `, "tool_choice": {"type": "tool", "name": "get_weather"}`,
			func(t *testing.T, b map[string]any) {
				d := at(b["tools"].([]any)[0].(map[string]any), "functionDeclarations").([]any)[0].(map[string]any)
				require.Equal(t, "get_weather", d["name"])
				require.Equal(t, weatherSchema, d["parametersJsonSchema"])
				require.Equal(t, map[string]any{"mode": "ANY", "allowedFunctionNames": []any{"get_weather"}},
					at(b, "toolConfig", "functionCallingConfig"))
			}},
		{"tool_choice none as NONE", "gemini", messagesWeatherTool + `, "tool_choice": {"type": "none"}`,
			func(t *testing.T, b map[string]any) {
				require.Equal(t, map[string]any{"mode": "NONE"}, at(b, "toolConfig", "functionCallingConfig"))
			}},
		{"thinking budget as thinkingBudget, at most Gemini's", "gemini", `"max_tokens": 40000, "thinking": {"type": "enabled", "budget_tokens": 30000}`,
			func(t *testing.T, b map[string]any) {
				require.EqualValues(t, 24576, at(b, "generationConfig", "thinkingConfig", "thinkingBudget"))
			}},
		{"thinking disabled as a thinkingBudget of 0", "gemini", `"thinking": {"type": "disabled"}`,
			func(t *testing.T, b map[string]any) {
				require.EqualValues(t, 0, at(b, "generationConfig", "thinkingConfig", "thinkingBudget"))
			}},

		{"max_tokens as maxTokens", "bedrock", ``, func(t *testing.T, b map[string]any) {
			require.EqualValues(t, 256, at(b, "inferenceConfig", "maxTokens"))
		}},
		{"temperature", "bedrock", `"temperature": 0.5`, func(t *testing.T, b map[string]any) {
			require.Equal(t, 0.5, at(b, "inferenceConfig", "temperature"))
		}},
		{"top_p as topP", "bedrock", `"top_p": 0.5`, func(t *testing.T, b map[string]any) {
			require.Equal(t, 0.5, at(b, "inferenceConfig", "topP"))
		}},
		{"top_k as a Claude model's top_k", "bedrock", `"top_k": 40`, func(t *testing.T, b map[string]any) {
			require.EqualValues(t, 40, at(b, "additionalModelRequestFields", "top_k"))
		}},
		{"stop_sequences as stopSequences", "bedrock", `"stop_sequences": ["END"]`, func(t *testing.T, b map[string]any) {
			require.Equal(t, []any{"END"}, at(b, "inferenceConfig", "stopSequences"))
		}},
		{"system as system text", "bedrock", `"system": "Be brief."`, func(t *testing.T, b map[string]any) {
			require.Equal(t, []any{map[string]any{"text": "Be brief."}}, b["system"])
		}},
		{"tools as toolSpec, tool_choice tool as toolChoice tool", "bedrock", messagesWeatherTool + `, "tool_choice": {"type": "tool", "name": "get_weather"}`,
			func(t *testing.T, b map[string]any) {
				spec := at(at(b, "toolConfig", "tools").([]any)[0].(map[string]any), "toolSpec").(map[string]any)
				require.Equal(t, weatherSchema, at(spec, "inputSchema", "json"))
				require.Equal(t, map[string]any{"tool": map[string]any{"name": "get_weather"}}, at(b, "toolConfig", "toolChoice"))
			}},
		{"tool_choice any as toolChoice any", "bedrock", messagesWeatherTool + `, "tool_choice": {"type": "any"}`,
			func(t *testing.T, b map[string]any) {
				require.Equal(t, map[string]any{"any": map[string]any{}}, at(b, "toolConfig", "toolChoice"))
			}},
		{"thinking as a Claude model's thinking", "bedrock", `"max_tokens": 4000, "thinking": {"type": "enabled", "budget_tokens": 2000}`,
			func(t *testing.T, b map[string]any) {
				require.Equal(t, map[string]any{"type": "enabled", "budget_tokens": 2000.0}, at(b, "additionalModelRequestFields", "thinking"))
				require.EqualValues(t, 4000, at(b, "inferenceConfig", "maxTokens"))
			}},
	} {
		t.Run(tc.fallback+"/"+tc.name, func(t *testing.T) {
			r, received := crossRigFrom(t, "anthropic", tc.fallback, "")
			r.up["primary"].play(act{status: 503})
			resp, body := r.rawMessages(messagesBody(tc.fields))
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			require.Contains(t, body, `"model":"backup"`)
			tc.check(t, received())
		})
	}
}

// messagesBody is a Messages request for the route primary with fields
// added (a max_tokens among them replaces the default 256).
func messagesBody(fields string) string {
	body := map[string]any{}
	if err := json.Unmarshal([]byte(`{"model": "primary", "max_tokens": 256, "messages": [{"role": "user", "content": "Weather in Paris?"}]`+
		map[bool]string{true: "", false: ", "}[fields == ""]+fields+`}`), &body); err != nil {
		panic(err)
	}
	b, _ := json.Marshal(body)
	return string(b)
}

// A Messages parameter the fall-back model's provider cannot honour is
// not sent there: one warning naming the model and the parameter, and a
// count in retryhost_gateway_params_dropped_total{model,param}.
func TestMessagesParameterTheFallBackCannotHonourIsDropped(t *testing.T) {
	stops := make([]string, 6)
	for i := range stops {
		stops[i] = fmt.Sprint("s", i)
	}
	six, _ := json.Marshal(stops)
	for _, tc := range []struct {
		name     string
		fallback string
		fields   string
		param    string
		absent   func(body map[string]any) any
	}{
		{"top_k on OpenAI", "openai", `"top_k": 40`, "top_k", func(b map[string]any) any { return b["top_k"] }},
		{"a thinking type with no translation on OpenAI", "openai", `"thinking": {"type": "adaptive"}`, "thinking",
			func(b map[string]any) any { return b["reasoning_effort"] }},
		{"more stop sequences than Gemini takes", "gemini", `"stop_sequences": ` + string(six), "stop_sequences",
			func(b map[string]any) any { return at(b, "generationConfig", "stopSequences") }},
		{"tool_choice none beside tools on Bedrock", "bedrock", messagesWeatherTool + `, "tool_choice": {"type": "none"}`, "tool_choice",
			func(b map[string]any) any { return at(b, "toolConfig", "toolChoice") }},
		{"top_k on a Bedrock model that is not Claude", "bedrock-llama", `"top_k": 40`, "top_k",
			func(b map[string]any) any { return b["additionalModelRequestFields"] }},
		{"thinking on a Bedrock model that is not Claude", "bedrock-llama", `"max_tokens": 4000, "thinking": {"type": "enabled", "budget_tokens": 2000}`, "thinking",
			func(b map[string]any) any { return b["additionalModelRequestFields"] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, received := crossRigFrom(t, "anthropic", tc.fallback, "")
			r.up["primary"].play(act{status: 503})
			resp, body := r.rawMessages(messagesBody(tc.fields))
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			require.Nil(t, tc.absent(received()))
			require.Equal(t, [][2]string{{"backup", tc.param}}, droppedLogs(t, r.logs.String()))
			require.Contains(t, r.metricsText(),
				fmt.Sprintf(`retryhost_gateway_params_dropped_total{model="backup",param=%q} 1`, tc.param))
		})
	}
}

// A model with "unsupported_params": "skip" is passed over for a
// Messages request with a parameter it cannot honour.
func TestMessagesModelThatSkipsUnsupportedParamsIsPassedOver(t *testing.T) {
	r := &rig{t: t, up: map[string]*upstream{}, logs: &testkit.LogBuffer{}}
	for _, n := range []string{"primary", "backup", "third"} {
		r.up[n] = newUpstream(n)
	}
	r.serve(fmt.Sprintf(`{"models": [
		{"name": "primary", "provider": "anthropic", "model": "up-primary", "base_url": %q, "api_key_env": "UPSTREAM_KEY"},
		{"name": "backup", "provider": "openai", "model": "up-backup", "base_url": %q, "api_key_env": "UPSTREAM_KEY", "unsupported_params": "skip"},
		{"name": "third", "provider": "anthropic", "model": "up-third", "base_url": %q, "api_key_env": "UPSTREAM_KEY"}],
		"rules": [
			{"when": {"status_range": [500, 599]}, "action": "switch", "model": "backup"},
			{"when": {"status_range": [500, 599]}, "action": "switch", "model": "third"}
		]}`, r.up["primary"].srv.URL, r.up["backup"].url(), r.up["third"].srv.URL))
	for _, tc := range []struct{ fields, answered string }{{`"top_k": 40`, "third"}, {`"top_p": 0.5`, "backup"}} {
		t.Run(tc.fields, func(t *testing.T) {
			for _, u := range r.up {
				u.reset()
			}
			r.up["primary"].play(act{status: 503})
			resp, body := r.rawMessages(messagesBody(tc.fields))
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			require.Contains(t, body, `"model":"`+tc.answered+`"`)
		})
	}
	require.Empty(t, droppedLogs(t, r.logs.String()), "a skipped model drops nothing")
}
