package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"

	oai "github.com/openai/openai-go/v3"

	"github.com/retryhost/retryhost/driver"
)

// WithAssistantPrefix says the provider continues a final assistant
// message marked "prefix": true (DeepSeek's and Mistral's chat APIs): a
// continuation (driver.Request.Continue) is then sent as that message
// alone, with no instruction. Default: off, the continuation is an
// assistant message with the text sent so far followed by a user message
// with the continuation prompt (driver.WithContinuationPrompt), which is
// what OpenAI's own chat models need.
func WithAssistantPrefix() Option { return func(c *config) { c.prefix = true } }

// continuation returns the messages that ask the model to continue c.Text.
func (m *Model) continuation(c *driver.Continuation) []oai.ChatCompletionMessageParamUnion {
	a := oai.AssistantMessage(c.Text)
	if m.prefix {
		a.OfAssistant.SetExtraFields(map[string]any{"prefix": true})
		return []oai.ChatCompletionMessageParamUnion{a}
	}
	return []oai.ChatCompletionMessageParamUnion{a, oai.UserMessage(c.Prompt)}
}

// continueFields checks that a request's forwarded fields leave its answer
// continuable, and appends the continuation to forwarded messages (a
// gateway's): a copy of fields, never the caller's. An answer whose shape
// a second, spliced-on generation would break cannot be continued: several
// choices (n > 1), log probabilities (the continuation's would describe
// different tokens), or a JSON response format (the partial text is not
// valid JSON on its own).
func (m *Model) continueFields(fields map[string]any, c *driver.Continuation) (map[string]any, error) {
	for _, k := range []string{"n", "logprobs", "top_logprobs", "response_format"} {
		v, ok := fields[k]
		if !ok {
			continue
		}
		b, err := jsonOf(v)
		if err != nil {
			return nil, fmt.Errorf("openai: %s: %w", k, err)
		}
		b = bytes.TrimSpace(b)
		switch k {
		case "n":
			if !bytes.Equal(b, []byte("1")) && !bytes.Equal(b, []byte("null")) {
				return nil, fmt.Errorf("openai: n is %s: %w", b, driver.ErrCannotContinue)
			}
		case "logprobs", "top_logprobs":
			if !bytes.Equal(b, []byte("false")) && !bytes.Equal(b, []byte("null")) && !bytes.Equal(b, []byte("0")) {
				return nil, fmt.Errorf("openai: %s is set: %w", k, driver.ErrCannotContinue)
			}
		case "response_format":
			var rf struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(b, &rf)
			if rf.Type == "json_schema" || rf.Type == "json_object" {
				return nil, fmt.Errorf("openai: response_format is %s: %w", rf.Type, driver.ErrCannotContinue)
			}
		}
	}
	raw, ok := fields["messages"]
	if !ok {
		return fields, nil
	}
	b, err := jsonOf(raw)
	if err != nil {
		return nil, fmt.Errorf("openai: messages: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return nil, fmt.Errorf("openai: forwarded messages are not a JSON array")
	}
	out := make([]byte, 0, len(b)+len(c.Text)+len(c.Prompt)+96)
	out = append(out, b[:len(b)-1]...)
	if len(bytes.TrimSpace(b[1:len(b)-1])) > 0 {
		out = append(out, ',')
	}
	for i, msg := range m.continuation(c) {
		j, err := json.Marshal(msg)
		if err != nil {
			return nil, fmt.Errorf("openai: continuation: %w", err)
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, j...)
	}
	out = append(out, ']')
	f := maps.Clone(fields)
	f["messages"] = json.RawMessage(out)
	return f, nil
}

func jsonOf(v any) ([]byte, error) {
	if r, ok := v.(json.RawMessage); ok {
		return r, nil
	}
	return json.Marshal(v)
}
