package anthropic_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/provider/internal/adapter"
	"github.com/retryhost/retryhost/provider/internal/conformance"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

func event(t *testing.T, typ string, v map[string]any) wiretest.Event {
	v["type"] = typ
	return wiretest.JSONEvent(t, typ, v)
}

// A provider cannot make a stream hold more than MaxHeld bytes of tool
// input, nor open more than MaxOpen blocks.
func TestStreamLimits(t *testing.T) {
	start := func(i int) wiretest.Event {
		return event(t, "content_block_start", map[string]any{"index": i,
			"content_block": map[string]any{"type": "tool_use", "id": "toolu_1", "name": "f", "input": map[string]any{}}})
	}
	mib := strings.Repeat("a", 1<<20)
	for name, tr := range map[string]*wiretest.Transcript{
		"held": func() *wiretest.Transcript {
			tr := &wiretest.Transcript{Events: []wiretest.Event{start(0)}}
			for i := 0; i <= adapter.MaxHeld>>20; i++ {
				tr.Events = append(tr.Events, event(t, "content_block_delta", map[string]any{"index": 0,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": mib}}))
			}
			return tr
		}(),
		"open": func() *wiretest.Transcript {
			tr := &wiretest.Transcript{}
			for i := 0; i <= adapter.MaxOpen; i++ {
				tr.Events = append(tr.Events, start(i))
			}
			return tr
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			srv := wiretest.Serve(t, tr)
			st, err := model(t, srv).Stream(context.Background(), request())
			require.NoError(t, err)
			_, err = wiretest.Collect(st, 10*adapter.MaxOpen)
			conformance.RequireLimit(t, err)
		})
	}
}
