package otel_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// describedModel is a deployment with a key of the user's choosing.
type describedModel struct {
	textModel
	provider, id string
}

func (m *describedModel) Provider() string { return m.provider }
func (m *describedModel) ModelID() string  { return m.id }

// TestTelemetry_keysAreNotProviders: with keys the user chose (two
// deployments of gpt-4o), the GenAI attributes come from the model's
// provider and model id, and retryhost.model is the key that tells the
// deployments apart. Splitting the key "gpt-4o-eu" would report provider
// "unknown".
func TestTelemetry_keysAreNotProviders(t *testing.T) {
	rg := newRig(t)
	eu := &describedModel{textModel: textModel{key: "gpt-4o-eu", err: overloaded()}, provider: "azure", id: "gpt-4o"}
	us := &describedModel{textModel: textModel{key: "gpt-4o-us", text: "ok",
		finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop}}}, provider: "openai", id: "gpt-4o"}
	r, err := driver.New(eu, driver.WithObserver(rg.tel), driver.WithRules(driver.Fallback(us)))
	require.NoError(t, err)
	_, err = r.Generate(t.Context(), &driver.Request{Messages: []driver.Message{driver.UserText("hi")}})
	require.NoError(t, err)
	spans := rg.spans.GetSpans()
	require.Len(t, spans, 3)
	a1, a2 := attrs(spans[0]), attrs(spans[1])
	require.Equal(t, "azure", a1["gen_ai.provider.name"])
	require.Equal(t, "gpt-4o", a1["gen_ai.request.model"])
	require.Equal(t, "gpt-4o-eu", a1["retryhost.model"])
	require.Equal(t, "openai", a2["gen_ai.provider.name"])
	require.Equal(t, "gpt-4o-us", a2["retryhost.model"])
	require.Equal(t, "chat gpt-4o", spans[1].Name)
}
