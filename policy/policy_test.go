package policy_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
)

// TestExampleLoads keeps the commented reference files honest: every field
// they show loads, the YAML twin builds the same policy as the JSON, and a
// missing key is named with its line and column.
func TestExampleLoads(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct{ file, missingKey string }{
		{"testdata/example.json", "testdata/example.json: line 12:83: models[0].api_key_env: environment variable OPENAI_API_KEY is not set"},
		{"testdata/example.yaml", "testdata/example.yaml: line 10:18: models[0].api_key_env: environment variable OPENAI_API_KEY is not set"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			p, err := policy.Load(ctx, tt.file, policy.Options{
				Dir:    "../host/testdata",
				Getenv: func(k string) string { return "key-of-" + k },
			})
			require.NoError(t, err)
			defer func() { require.NoError(t, p.Close(ctx)) }()
			require.Equal(t, "fast", p.Runner.Base().Key())
			require.Len(t, p.Models, 5, "4 models and the group smart")
			g, ok := p.Models["smart"].(*driver.DeploymentGroup)
			require.True(t, ok)
			require.Len(t, g.Deployments(), 2)
			for name, want := range map[string][2]string{"fast": {"openai", "gpt-4o-mini"}, "strong": {"anthropic", "claude-sonnet-4-5"},
				"strong-azure": {"azure", "gpt-4o"}, "local": {"vllm", "llama3"}} {
				require.Equal(t, name, p.Models[name].Key())
				provider, id := driver.Describe(p.Models[name])
				require.Equal(t, want, [2]string{provider, id}, name)
			}
			require.NotNil(t, p.Runtime)
			require.NoError(t, policy.ValidateFile(ctx, tt.file, policy.Options{Dir: "../host/testdata", Getenv: func(string) string { return "" }}),
				"Validate needs no key")

			_, err = policy.Load(ctx, tt.file, policy.Options{Dir: "../host/testdata", Getenv: func(string) string { return "" }})
			require.EqualError(t, err, tt.missingKey)
			var perr *policy.Error
			require.ErrorAs(t, err, &perr)
			require.Equal(t, "models[0].api_key_env", perr.Path)
		})
	}
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

// TestByteOrderMarkIsNotAnError: a policy saved by an editor that writes a
// UTF-8 byte order mark first (Notepad, some Windows tools) loads as the
// same file without it, instead of failing on "invalid character 'ï'".
func TestByteOrderMarkIsNotAnError(t *testing.T) {
	ctx := context.Background()
	const model = `{"name": "m", "provider": "openai", "model": "gpt-4o-mini", "api_key_env": "K"}`
	for _, tc := range []struct{ name, src string }{
		{"p.json", `{"models": [` + model + `]}`},
		{"p.jsonc", "// mine\n{\"models\": [" + model + "]}"},
		{"", `{"models": [` + model + `]}`},
		{"p.yaml", "models:\n  - " + model + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, policy.Validate(ctx, []byte("\ufeff"+tc.src), policy.Options{Name: tc.name}))
		})
	}
}

// TestFileTooLarge: a policy file is read under MaxFileSize, so a path to
// a device or a runaway file is refused with a clear error instead of being
// read until the process runs out of memory.
func TestFileTooLarge(t *testing.T) {
	ctx := context.Background()
	big := filepath.Join(t.TempDir(), "big.json")
	require.NoError(t, os.WriteFile(big, nil, 0o600))
	require.NoError(t, os.Truncate(big, policy.MaxFileSize+1)) // sparse: no disk used
	for name, err := range map[string]error{
		"Load":         func() error { _, err := policy.Load(ctx, big, policy.Options{}); return err }(),
		"ValidateFile": policy.ValidateFile(ctx, big, policy.Options{}),
	} {
		require.EqualError(t, err, "read "+big+": larger than the 16 MiB limit of a policy file", name)
		var pathErr *fs.PathError
		require.ErrorAs(t, err, &pathErr, name)
	}
}
