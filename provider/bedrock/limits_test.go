package bedrock_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
	"github.com/retryhost/retryhost/provider/internal/conformance"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

func event(t *testing.T, typ string, v any) wiretest.Event { return wiretest.JSONEvent(t, typ, v) }

// A provider cannot make a stream hold more than MaxHeld bytes of tool
// input, nor open more than MaxOpen blocks.
func TestStreamLimits(t *testing.T) {
	start := func(i int) wiretest.Event {
		return event(t, "contentBlockStart", map[string]any{"contentBlockIndex": i,
			"start": map[string]any{"toolUse": map[string]any{"toolUseId": "tooluse_1", "name": "f"}}})
	}
	mib := strings.Repeat("a", 1<<20)
	for name, tr := range map[string]*wiretest.Transcript{
		"held": func() *wiretest.Transcript {
			tr := &wiretest.Transcript{Events: []wiretest.Event{start(0)}}
			for i := 0; i <= adapter.MaxHeld>>20; i++ {
				tr.Events = append(tr.Events, event(t, "contentBlockDelta", map[string]any{"contentBlockIndex": 0,
					"delta": map[string]any{"toolUse": map[string]any{"input": mib}}}))
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
			tr.Headers = map[string]string{"Content-Type": "application/vnd.amazon.eventstream"}
			srv := wiretest.ServeFramed(t, tr, frame)
			st, err := model(t, srv.Server).Stream(context.Background(), conformance.Request())
			require.NoError(t, err)
			_, err = wiretest.Collect(st, 10*adapter.MaxOpen)
			conformance.RequireLimit(t, err)
		})
	}
}

// A stream that breaks Converse's rules (tool input for a block that is no
// tool call, a call whose input is not JSON) fails as the provider's
// fault, retryable, not as a cut connection.
func TestMalformedStreamIsServerFault(t *testing.T) {
	for name, events := range map[string][]wiretest.Event{
		"input without a call": {event(t, "contentBlockDelta", map[string]any{"contentBlockIndex": 0,
			"delta": map[string]any{"toolUse": map[string]any{"input": "{}"}}})},
		"input not JSON": {
			event(t, "contentBlockStart", map[string]any{"contentBlockIndex": 0,
				"start": map[string]any{"toolUse": map[string]any{"toolUseId": "tooluse_1", "name": "f"}}}),
			event(t, "contentBlockDelta", map[string]any{"contentBlockIndex": 0,
				"delta": map[string]any{"toolUse": map[string]any{"input": "{\"city\":"}}}),
			event(t, "contentBlockStop", map[string]any{"contentBlockIndex": 0}),
		},
	} {
		t.Run(name, func(t *testing.T) {
			tr := &wiretest.Transcript{Headers: map[string]string{"Content-Type": "application/vnd.amazon.eventstream"}, Events: events}
			srv := wiretest.ServeFramed(t, tr, frame)
			st, err := model(t, srv.Server).Stream(context.Background(), conformance.Request())
			require.NoError(t, err)
			_, err = wiretest.Collect(st, 100)
			var pe *driver.ProviderError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, abi.ClassServer, pe.Class, "%v", err)
			require.True(t, pe.Retryable)
			require.Contains(t, pe.Message, "malformed stream")
		})
	}
}
