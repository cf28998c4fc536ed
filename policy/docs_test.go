package policy_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
)

// TestDocsPolicyExamplesBuild keeps the policy reference's examples true:
// the first jsonc and yaml blocks of docs/policy-reference.md parse, and
// build into a runner, a retryable model and the built-in Wasm plugins they
// name.
func TestDocsPolicyExamplesBuild(t *testing.T) {
	page, err := os.ReadFile("../docs/policy-reference.md")
	require.NoError(t, err)
	section := string(page)
	for _, f := range []struct{ fence, name string }{{"```jsonc\n", "README.json"}, {"```yaml\n", "README.yaml"}} {
		t.Run(f.name, func(t *testing.T) {
			_, block, ok := strings.Cut(section, f.fence)
			require.True(t, ok, "docs/policy-reference.md has a %s block", f.fence)
			block, _, ok = strings.Cut(block, "```")
			require.True(t, ok)

			ctx := context.Background()
			p, err := policy.Parse(ctx, []byte(block), policy.Options{
				Name:    f.name,
				Getenv:  func(string) string { return "test-key" },
				Builtin: plugins.Module,
				// The Go guests compile once per machine into the cache the
				// plugins' own tests share, not once per test binary.
				HostOptions: []host.Option{
					host.WithCacheDir(filepath.Join(os.TempDir(), "retryhost-wasmtest-"+runtime.Version())),
					host.WithCallTimeout(10 * time.Second),
				},
			})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, p.Close(ctx)) })
			require.NotNil(t, p.Runner)
			require.NotNil(t, p.Model)
			require.NotNil(t, p.Runtime, "the builtin plugins are loaded")
			require.Len(t, p.Models, 2)
		})
	}
}
