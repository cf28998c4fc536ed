package oci_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"

	ggcr "github.com/google/go-containerregistry/pkg/registry"

	"github.com/retryhost/retryhost/oci"
)

// Push a module under a tag, then pull it by the digest Push returned:
// the same bytes come back, verified, and are cached by digest.
func Example() {
	ctx := context.Background()
	srv := httptest.NewServer(ggcr.New()) // a registry on loopback
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	cache, _ := os.MkdirTemp("", "oci-example")
	defer os.RemoveAll(cache)

	c, err := oci.New(oci.WithPlainHTTP(), oci.WithCacheDir(cache))
	if err != nil {
		panic(err)
	}
	wasm, _ := os.ReadFile("../host/testdata/condition.wasm")
	pushed, err := c.Push(ctx, addr+"/team/cond:v1", wasm)
	if err != nil {
		panic(err)
	}
	pulled, err := c.Pull(ctx, pushed.Ref)
	if err != nil {
		panic(err)
	}
	_, err = c.Pull(ctx, addr+"/team/cond:v1")
	fmt.Println(pulled.Digest == pushed.Digest, len(pulled.Wasm) == len(wasm), pulled.MediaType)
	fmt.Println(err != nil && strings.Contains(err.Error(), "not pinned by digest"))
	// Output:
	// true true application/vnd.retryhost.plugin.v1+wasm
	// true
}
