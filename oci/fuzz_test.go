package oci

import (
	"errors"
	"os"
	"testing"
)

// FuzzLayerOf: any manifest a registry sends is either one accepted Wasm
// layer within the limits or a typed error; never a panic.
func FuzzLayerOf(f *testing.F) {
	for _, name := range []string{"testdata/manifest.json", "testdata/manifest_docker.json"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"manifests": []}`))
	f.Add([]byte(`{"layers": [{"mediaType": "application/vnd.retryhost.plugin.v1+wasm", "digest": "sha256:zz", "size": -1}]}`))
	c := &Client{cfg: config{limits: DefaultLimits()}}
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := c.layerOf(b)
		if err != nil {
			if !errors.Is(err, ErrMediaType) && !errors.Is(err, ErrReference) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if !layerTypes[l.MediaType] || l.Size < 0 || l.Size > c.cfg.limits.LayerBytes || l.Digest.Validate() != nil {
			t.Fatalf("accepted a bad layer: %+v", l)
		}
	})
}
