package openai_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/provider/internal/adapter"
	"github.com/retryhost/retryhost/provider/internal/conformance"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
	"github.com/retryhost/retryhost/provider/openai"
)

func event(t *testing.T, typ string, v any) wiretest.Event { return wiretest.JSONEvent(t, typ, v) }

func chunk(t *testing.T, delta map[string]any) wiretest.Event {
	return event(t, "", map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": nil}}})
}

func collectLimited(t *testing.T, tr *wiretest.Transcript, opts ...openai.Option) error {
	t.Helper()
	srv := wiretest.Serve(t, tr)
	st, err := model(t, srv, opts...).Stream(context.Background(), request())
	require.NoError(t, err)
	_, err = wiretest.Collect(st, 10*adapter.MaxOpen)
	return err
}

// A provider cannot make a stream hold more than MaxHeld bytes of tool
// input, nor open more than MaxOpen tool calls.
func TestStreamLimits(t *testing.T) {
	mib := strings.Repeat("a", 1<<20)
	t.Run("held", func(t *testing.T) {
		tr := &wiretest.Transcript{Events: []wiretest.Event{chunk(t, map[string]any{"tool_calls": []any{
			map[string]any{"index": 0, "id": "call_1", "type": "function", "function": map[string]any{"name": "f", "arguments": ""}}}})}}
		for i := 0; i <= adapter.MaxHeld>>20; i++ {
			tr.Events = append(tr.Events, chunk(t, map[string]any{"tool_calls": []any{
				map[string]any{"index": 0, "function": map[string]any{"arguments": mib}}}}))
		}
		conformance.RequireLimit(t, collectLimited(t, tr))
	})
	t.Run("held refusal", func(t *testing.T) {
		var tr wiretest.Transcript
		for i := 0; i <= adapter.MaxHeld>>20; i++ {
			tr.Events = append(tr.Events, chunk(t, map[string]any{"refusal": mib}))
		}
		conformance.RequireLimit(t, collectLimited(t, &tr))
	})
	t.Run("open", func(t *testing.T) {
		var calls []any
		for i := 0; i <= adapter.MaxOpen; i++ {
			calls = append(calls, map[string]any{"index": i, "id": fmt.Sprint("call_", i), "type": "function",
				"function": map[string]any{"name": "f", "arguments": ""}})
		}
		tr := &wiretest.Transcript{Events: []wiretest.Event{chunk(t, map[string]any{"tool_calls": calls})}}
		conformance.RequireLimit(t, collectLimited(t, tr))
	})
}

func TestResponsesStreamLimits(t *testing.T) {
	mib := strings.Repeat("a", 1<<20)
	added := func(i int) wiretest.Event {
		return event(t, "response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": i,
			"item": map[string]any{"id": fmt.Sprint("fc_", i), "type": "function_call", "call_id": fmt.Sprint("call_", i), "name": "f", "arguments": ""}})
	}
	t.Run("held", func(t *testing.T) {
		tr := &wiretest.Transcript{Events: []wiretest.Event{added(0)}}
		for i := 0; i <= adapter.MaxHeld>>20; i++ {
			tr.Events = append(tr.Events, event(t, "response.function_call_arguments.delta",
				map[string]any{"type": "response.function_call_arguments.delta", "item_id": "fc_0", "output_index": 0, "delta": mib}))
		}
		conformance.RequireLimit(t, collectLimited(t, tr, openai.WithResponsesAPI()))
	})
	t.Run("held refusal", func(t *testing.T) {
		var tr wiretest.Transcript
		for i := 0; i <= adapter.MaxHeld>>20; i++ {
			tr.Events = append(tr.Events, event(t, "response.refusal.delta",
				map[string]any{"type": "response.refusal.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": mib}))
		}
		conformance.RequireLimit(t, collectLimited(t, &tr, openai.WithResponsesAPI()))
	})
	t.Run("open", func(t *testing.T) {
		var tr wiretest.Transcript
		for i := 0; i <= adapter.MaxOpen; i++ {
			tr.Events = append(tr.Events, added(i))
		}
		conformance.RequireLimit(t, collectLimited(t, &tr, openai.WithResponsesAPI()))
	})
}
