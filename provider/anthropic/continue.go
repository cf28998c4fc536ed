package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	ant "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// prefill expresses a continuation (driver.Request.Continue) as the
// Messages API does natively: the text already sent becomes the start of
// the assistant's turn, which the model continues. The API rejects a final
// assistant turn that ends in white space, so the text goes without its
// trailing white space (the model then usually writes it again, and the
// driver's splice trims that repeat). A request with extended thinking
// cannot take a prefill: it fails with driver.ErrCannotContinue.
func prefill(p *ant.MessageNewParams, req *driver.Request, name string) error {
	if thinkingOn(req, name) {
		return fmt.Errorf("anthropic: extended thinking takes no prefill: %w", driver.ErrCannotContinue)
	}
	text, err := prefillText(req.Continue)
	if err != nil {
		return err
	}
	if n := len(p.Messages); n > 0 && p.Messages[n-1].OfAssistant != nil {
		// The caller's own prefill: the answer continues it.
		a := p.Messages[n-1].OfAssistant
		a.Content = append(a.Content, ant.NewTextBlock(text))
		return nil
	}
	p.Messages = append(p.Messages, ant.NewAssistantMessage(ant.NewTextBlock(text)))
	return nil
}

func prefillText(c *driver.Continuation) (string, error) {
	text := strings.TrimRight(c.Text, " \t\r\n")
	if text == "" {
		return "", fmt.Errorf("anthropic: nothing but white space to continue: %w", driver.ErrCannotContinue)
	}
	return text, nil
}

// prefillRaw is prefill for forwarded messages (a gateway's, raw JSON in
// the ProviderOptions entry): a copy of fields whose messages end with the
// assistant prefill. The API joins it to a final assistant turn of the
// caller's own.
func prefillRaw(fields map[string]any, c *driver.Continuation) (map[string]any, error) {
	text, err := prefillText(c)
	if err != nil {
		return nil, err
	}
	raw, ok := fields["messages"].(json.RawMessage)
	if !ok {
		if raw, err = json.Marshal(fields["messages"]); err != nil {
			return nil, fmt.Errorf("anthropic: messages: %w", err)
		}
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return nil, errors.New("anthropic: forwarded messages are not a JSON array")
	}
	msg, err := json.Marshal(ant.NewAssistantMessage(ant.NewTextBlock(text)))
	if err != nil {
		return nil, fmt.Errorf("anthropic: prefill: %w", err)
	}
	out := make([]byte, 0, len(raw)+len(msg)+1)
	out = append(out, raw[:len(raw)-1]...)
	if len(bytes.TrimSpace(raw[1:len(raw)-1])) > 0 {
		out = append(out, ',')
	}
	out = append(append(out, msg...), ']')
	f := maps.Clone(fields)
	f["messages"] = json.RawMessage(out)
	return f, nil
}

// thinkingOn reports whether req's forwarded fields (its ProviderOptions
// entry name) turn extended thinking on.
func thinkingOn(req *driver.Request, name string) bool {
	fields, _ := req.ProviderOptions[name].(map[string]any)
	v, ok := fields["thinking"]
	if !ok {
		return false
	}
	b, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			return true
		}
	}
	var t struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(bytes.TrimSpace(b), &t) != nil {
		return !bytes.Equal(bytes.TrimSpace(b), []byte("null"))
	}
	return t.Type != "" && t.Type != "disabled"
}

// UsageSoFar returns the usage the stream reported before its end (the
// input tokens of message_start, the output tokens of the latest
// message_delta), so that a stream cut before its finish still counts in
// the usage a continuation sums (driver.UsageReporter).
func (s *source) UsageSoFar() abi.Usage {
	return usage(s.input, s.output, s.cacheRead, s.cacheWrite, s.thinking)
}
