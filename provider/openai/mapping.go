package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

func unix(sec int64) time.Time {
	if sec == 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0).UTC()
}

func usage(u *oai.CompletionUsage) abi.Usage {
	return abi.Usage{
		InputTokens:      u.PromptTokens,
		OutputTokens:     u.CompletionTokens,
		CacheReadTokens:  u.PromptTokensDetails.CachedTokens,
		CacheWriteTokens: u.PromptTokensDetails.CacheWriteTokens,
		ReasoningTokens:  u.CompletionTokensDetails.ReasoningTokens,
	}
}

func finishReason(raw string) abi.FinishReason {
	r := abi.FinishReason{Raw: raw}
	switch raw {
	case "stop":
		r.Unified = abi.ReasonStop
	case "length":
		r.Unified = abi.ReasonLength
	case "content_filter":
		r.Unified = abi.ReasonContentFilter
	case "tool_calls", "function_call":
		r.Unified = abi.ReasonToolCalls
	case "":
		r.Unified = abi.ReasonUnknown
	default:
		r.Unified = abi.ReasonOther
	}
	return r
}

// reasoningText reads the "reasoning_content" (DeepSeek, vLLM) or
// "reasoning" (OpenRouter, Ollama) field that compatible servers add.
func reasoningText[F interface{ Raw() string }](extra map[string]F) string {
	for _, k := range [...]string{"reasoning_content", "reasoning"} {
		if f, ok := extra[k]; ok {
			var s string
			if json.Unmarshal([]byte(f.Raw()), &s) == nil && s != "" {
				return s
			}
		}
	}
	return ""
}

// streamError maps an error event inside the stream ({"error": {…}}).
func streamError(provider string, err error) error {
	var se *ssestream.StreamError
	if !errors.As(err, &se) {
		return err
	}
	var body struct {
		Error struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(se.Event.Data, &body)
	code := adapter.RawCode(body.Error.Code)
	msg := body.Error.Message
	if msg == "" {
		msg = se.Message
	}
	return adapter.EventError(provider, body.Error.Type, code, msg, bytes.TrimSpace(se.Event.Data), err)
}
