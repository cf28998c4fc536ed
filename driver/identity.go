package driver

import "strings"

// Described is implemented by models that know their provider and model id
// apart from their key. A model's key is its identity in the driver (rules,
// attempt budgets, stickiness, cooldown); with keys the user chooses
// ("gpt-4o-eu", "claude-account-b") the provider and the model id are
// attributes that telemetry and logs report. The adapters in
// provider/openai and provider/anthropic implement it.
type Described interface {
	Provider() string // such as "openai", "azure", "anthropic"
	ModelID() string  // the provider's model id, such as "gpt-4o-mini"
}

// Describe returns m's provider and model id: those of [Described] when m
// implements it, else read from a "provider/model-id" key, else "unknown"
// and the whole key.
func Describe(m Model) (provider, modelID string) {
	if m == nil {
		return "", ""
	}
	if d, ok := m.(Described); ok {
		return d.Provider(), d.ModelID()
	}
	key := m.Key()
	if p, id, ok := strings.Cut(key, "/"); ok {
		return p, id
	}
	return "unknown", key
}

// Provider returns the base model's provider (see [Describe]).
func (m *RetryableModel) Provider() string { p, _ := Describe(m.r.Base()); return p }

// ModelID returns the base model's model id (see [Describe]).
func (m *RetryableModel) ModelID() string { _, id := Describe(m.r.Base()); return id }
