package policy_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
)

// TestExampleLoads keeps the commented reference file honest: every field
// it shows loads, and a missing key is named with its line and column.
func TestExampleLoads(t *testing.T) {
	ctx := context.Background()
	p, err := policy.Load(ctx, "testdata/example.json", policy.Options{
		Dir:    "../host/testdata",
		Getenv: func(k string) string { return "key-of-" + k },
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	require.Equal(t, "fast", p.Runner.Base().Key())
	require.Equal(t, "strong", p.Models["strong"].Key())
	require.NotNil(t, p.Runtime)

	_, err = policy.Load(ctx, "testdata/example.json", policy.Options{Dir: "../host/testdata", Getenv: func(string) string { return "" }})
	require.EqualError(t, err, "testdata/example.json: line 8:83: models[0].api_key_env: environment variable OPENAI_API_KEY is not set")
	var perr *policy.Error
	require.ErrorAs(t, err, &perr)
	require.Equal(t, "models[0].api_key_env", perr.Path)
	require.Equal(t, 8, perr.Line)
}

// TestBuiltins: built-in plugin names resolve only when the caller allows
// them, so a typo'd or unexpected name is a load error, not a surprise.
func TestBuiltins(t *testing.T) {
	ctx := context.Background()
	src := []byte(`{
  "models": [{"name": "m", "provider": "openai", "model": "gpt-4o-mini", "api_key_env": "K"}],
  "transforms": [{"plugin": {"builtin": "c-refusal"}}]
}`)
	env := func(string) string { return "k" }
	_, err := policy.Parse(ctx, src, policy.Options{Name: "p.json", Getenv: env})
	var perr *policy.Error
	require.True(t, errors.As(err, &perr), "got %v", err)
	require.Equal(t, "transforms[0].plugin.builtin", perr.Path)

	p, err := policy.Parse(ctx, src, policy.Options{Name: "p.json", Getenv: env, Builtin: plugins.Module})
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	require.NotNil(t, p.Runtime)
	require.NotNil(t, p.Model)
}
