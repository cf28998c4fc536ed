package policy_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ggcr "github.com/google/go-containerregistry/pkg/registry"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/host"
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
		{"tag refused", `{"oci": "` + addr + `/team/upper:v1"}`, `rules[0].plugin.oci: ` + addr + `/team/upper:v1 names a tag, not a digest: pin it (…@sha256:…), or set "follow_tag": true`},
		{"no tag at all is latest, refused", `{"oci": "` + addr + `/team/upper"}`, `rules[0].plugin.oci: ` + addr + `/team/upper names a tag`},
		{"follow a digest", `{"oci": "` + a.Ref + `", "follow_tag": true}`, "rules[0].plugin.follow_tag: " + a.Ref + " is pinned by digest, which never moves"},
		{"follow and pin", `{"oci": "` + addr + `/team/upper:v1", "follow_tag": true, "sha256": "` + a.SHA256 + `"}`, "rules[0].plugin.sha256: a followed tag's module changes"},
		{"follow a path", `{"path": "upper.wasm", "follow_tag": true}`, "rules[0].plugin.follow_tag: follow_tag applies to an oci reference only"},
		{"path and oci", `{"oci": "` + a.Ref + `", "path": "upper.wasm"}`, "give exactly one of path, builtin or oci"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Parse(ctx, []byte(`{`+models+`, "rules": [{"plugin": `+tc.plugin+`}]}`), opts)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestOCIFollowTag: a tag is accepted with "follow_tag", resolved once per
// load (two plugins naming it get one module), and Moved reports a new
// digest pushed behind it; a pinned reference is never followed.
func TestOCIFollowTag(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	var logs strings.Builder
	c, err := oci.New(oci.WithPlainHTTP(), oci.WithCacheDir(t.TempDir()), oci.WithAllowTags(),
		oci.WithCredentialsFile(filepath.Join(t.TempDir(), "none.json")),
		oci.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	upper, err := os.ReadFile("../host/testdata/upper.wasm")
	require.NoError(t, err)
	refusal, err := os.ReadFile("../host/testdata/refusal.wasm")
	require.NoError(t, err)
	v1, err := c.Push(ctx, addr+"/team/xf:stable", upper)
	require.NoError(t, err)
	pinned, err := c.Push(ctx, addr+"/team/pinned:v1", upper)
	require.NoError(t, err)

	fetches := 0
	opts := bound()
	opts.OCI = func(ref string) host.Source {
		fetches++
		return c.Source(ref)
	}
	tag := addr + "/team/xf:stable"
	doc := `{` + models + `, "transforms": [
		{"plugin": {"oci": "` + tag + `", "follow_tag": true}},
		{"plugin": {"oci": "` + tag + `", "follow_tag": true}},
		{"plugin": {"oci": "` + pinned.Ref + `"}}]}`
	p, err := policy.Parse(ctx, []byte(doc), opts)
	require.NoError(t, err)
	defer p.Close(ctx)
	require.Equal(t, 2, fetches, "one fetch per reference, however many plugins name it")
	require.Equal(t, []string{tag}, p.Followed(), "only the tag is followed")
	require.Equal(t, 1, strings.Count(logs.String(), "tag resolved to digest"), logs.String())
	require.Contains(t, logs.String(), v1.Digest)

	moved, err := p.Moved(ctx)
	require.NoError(t, err)
	require.Nil(t, moved, "nothing pushed: nothing moved")

	v2, err := c.Push(ctx, tag, refusal)
	require.NoError(t, err)
	moved, err = p.Moved(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]string{tag: v2.SHA256}, moved)
	require.Contains(t, logs.String(), v2.Digest, "the new digest is logged")

	srv.Close()
	_, err = p.Moved(ctx)
	require.ErrorContains(t, err, tag, "registry down: the error names the reference")

	// A policy following nothing has nothing to ask.
	still, err := policy.Parse(ctx, []byte(`{`+models+`}`), opts)
	require.NoError(t, err)
	require.Nil(t, still.Followed())
	moved, err = still.Moved(ctx)
	require.NoError(t, err)
	require.Nil(t, moved)
}

// lyingSource reports one module's sha256 and returns another module.
type lyingSource struct{ sum, wasm []byte }

func (l lyingSource) Fetch(context.Context, string) (string, []byte, error) {
	return string(l.sum), l.wasm, nil
}

// TestOCIPluginIsVerifiedLikeAFile: the module an "oci" source returns is
// loaded pinned to the sha256 the source reported (host.WithSHA256), so a
// source whose bytes do not match its sum is refused as a file would be.
func TestOCIPluginIsVerifiedLikeAFile(t *testing.T) {
	upper, err := os.ReadFile("../host/testdata/upper.wasm")
	require.NoError(t, err)
	refusal, err := os.ReadFile("../host/testdata/refusal.wasm")
	require.NoError(t, err)
	sum := sha256.Sum256(upper)
	opts := bound()
	opts.OCI = func(string) host.Source { return lyingSource{sum: []byte(hex.EncodeToString(sum[:])), wasm: refusal} }
	_, err = policy.Parse(context.Background(), []byte(`{`+models+`, "transforms": [{"plugin": {"oci": "r.example/team/upper@sha256:`+
		hex.EncodeToString(sum[:])+`"}}]}`), opts)
	require.ErrorContains(t, err, "transforms[0].plugin: host: load plugin \"upper\": sha256 does not match the pin")
}
