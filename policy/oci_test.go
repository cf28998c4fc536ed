package policy_test

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ggcr "github.com/google/go-containerregistry/pkg/registry"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/oci"
	"github.com/retryhost/retryhost/policy"
)

// TestOCIPlugins loads plugins named by OCI reference from a real registry
// on loopback, through Options.OCI.
func TestOCIPlugins(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	c, err := oci.New(oci.WithPlainHTTP(), oci.WithCacheDir(t.TempDir()),
		oci.WithCredentialsFile(filepath.Join(t.TempDir(), "none.json")))
	require.NoError(t, err)
	upper, err := os.ReadFile("../host/testdata/upper.wasm")
	require.NoError(t, err)
	a, err := c.Push(ctx, addr+"/team/upper:v1", upper)
	require.NoError(t, err)

	opts := bound()
	opts.OCI = c.Source
	p, err := policy.Parse(ctx, []byte(`{`+models+`, "transforms": [{"plugin": {"oci": "`+a.Ref+`", "sha256": "`+a.SHA256+`"}}]}`), opts)
	require.NoError(t, err)
	require.NotNil(t, p.Runtime)
	require.NoError(t, p.Close(ctx))

	for _, tc := range []struct{ name, plugin, want string }{
		{"named after the repository", `{"oci": "` + a.Ref + `"}`, `rules[0].plugin: plugin "upper" is not a condition`},
		{"sha256 pin", `{"oci": "` + a.Ref + `", "sha256": "` + strings.Repeat("0", 64) + `"}`, "rules[0].plugin.sha256: the module behind"},
		{"tag refused", `{"oci": "` + addr + `/team/upper:v1"}`, "rules[0].plugin.oci: oci: reference is not pinned by digest"},
		{"path and oci", `{"oci": "` + a.Ref + `", "path": "upper.wasm"}`, "give exactly one of path, builtin or oci"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Parse(ctx, []byte(`{`+models+`, "rules": [{"plugin": `+tc.plugin+`}]}`), opts)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
