package oci

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// docs/fleet.md ("Plugins from an OCI registry") and the limits table in docs/security.md
// name these media types, defaults and the cache's place; a value changed
// in the code but not in the docs fails here.
func TestDocsDefaults(t *testing.T) {
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skip("no user cache directory here")
	}
	c, err := New()
	require.NoError(t, err)
	for _, tc := range []struct {
		readme    string
		got, want any
	}{
		{"one layer of media type application/vnd.retryhost.plugin.v1+wasm", MediaType, "application/vnd.retryhost.plugin.v1+wasm"},
		{"the wasm OCI conventions' application/vnd.wasm.content.layer.v1+wasm", WasmLayerMediaType, "application/vnd.wasm.content.layer.v1+wasm"},
		{"Istio's application/vnd.module.wasm.content.layer.v1+wasm", ModuleWasmLayerMediaType, "application/vnd.module.wasm.content.layer.v1+wasm"},
		{"OCI plugin manifest: 256 KiB", c.cfg.limits.ManifestBytes, int64(256 << 10)},
		{"OCI plugin layer (the module): 16 MiB", c.cfg.limits.LayerBytes, int64(16 << 20)},
		{"one OCI pull or push: 60 s", c.cfg.limits.Timeout, 60 * time.Second},
		{"the cache keeps to 512 MiB (oci.Limits.CacheBytes)", c.cfg.limits.CacheBytes, int64(512 << 20)},
		{"--plugin-cache default: retryhost/oci in the user's cache directory", c.cfg.cacheDir, filepath.Join(cache, "retryhost", "oci")},
	} {
		require.Equal(t, tc.want, tc.got, "docs: %s", tc.readme)
	}
}
