package policy

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/link/providers"
)

// TestProviderNotLinked: a program that did not import the adapter a
// policy names gets the import to add, at load, with the model's place;
// Validate, which builds no provider, does not need it.
func TestProviderNotLinked(t *testing.T) {
	lookupProvider = func(string) providers.Factory { return nil }
	t.Cleanup(func() { lookupProvider = providers.Lookup })
	doc := []byte("models:\n  - {name: claude, provider: anthropic, model: claude-sonnet-4-5, api_key_env: K}\n")
	opts := Options{Name: "p.yaml", Getenv: func(string) string { return "k" }}
	_, err := Parse(context.Background(), doc, opts)
	require.EqualError(t, err, `p.yaml: line 2:30: models[0].provider: provider anthropic is not linked into this program: import _ "github.com/retryhost/retryhost/provider/anthropic"`)
	require.NoError(t, Validate(context.Background(), doc, opts))
}
