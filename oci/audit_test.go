package oci

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry"
)

// pushManifest pushes m (its blobs first) under ref's tag and returns the
// reference pinned by the manifest's digest.
func pushManifest(t *testing.T, c *Client, ref string, m ocispec.Manifest, blobs map[digest.Digest][]byte) string {
	t.Helper()
	ctx := context.Background()
	r, err := registry.ParseReference(ref)
	require.NoError(t, err)
	repo := c.repo(r)
	for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		require.NoError(t, pushBlob(ctx, repo, d, blobs[d.Digest]))
	}
	mb, err := json.Marshal(m)
	require.NoError(t, err)
	md := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, mb)
	require.NoError(t, repo.PushReference(ctx, md, bytes.NewReader(mb), r.Reference))
	return r.Registry + "/" + r.Repository + "@" + md.Digest.String()
}

// TestMediaType_Manifest: the manifest itself must be an image manifest
// with exactly one layer; an index, or a second layer, is not a plugin.
func TestMediaType_Manifest(t *testing.T) {
	ctx := context.Background()
	addr, _ := startRegistry(t, nil)
	c, _ := newClient(t)
	wasm := fixture(t, "condition")
	layer := content.NewDescriptorFromBytes(MediaType, wasm)
	empty := ocispec.DescriptorEmptyJSON
	cfg := ocispec.Descriptor{MediaType: empty.MediaType, Digest: empty.Digest, Size: empty.Size}
	blobs := map[digest.Digest][]byte{layer.Digest: wasm, empty.Digest: empty.Data}
	extra := []byte("\x00asm\x01\x00\x00\x00")
	second := content.NewDescriptorFromBytes(MediaType, extra)
	blobs[second.Digest] = extra

	for _, tc := range []struct {
		name     string
		mt       string
		layers   []ocispec.Descriptor
		want     error
		contains string
	}{
		{"an image manifest", ocispec.MediaTypeImageManifest, []ocispec.Descriptor{layer}, nil, ""},
		{"a Docker v2 manifest", "application/vnd.docker.distribution.manifest.v2+json", []ocispec.Descriptor{layer}, nil, ""},
		{"an index", ocispec.MediaTypeImageIndex, []ocispec.Descriptor{layer}, ErrMediaType, "manifest media type"},
		{"two layers", ocispec.MediaTypeImageManifest, []ocispec.Descriptor{layer, second}, ErrMediaType, "2 layers"},
		{"no layer", ocispec.MediaTypeImageManifest, nil, ErrMediaType, "0 layers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: tc.mt, Config: cfg, Layers: tc.layers}
			ref := pushManifest(t, c, addr+"/team/m:"+strings.ReplaceAll(tc.name, " ", "-"), m, blobs)
			fresh, _ := newClient(t)
			got, err := fresh.Pull(ctx, ref)
			if tc.want == nil {
				require.NoError(t, err)
				require.Equal(t, wasm, got.Wasm)
				return
			}
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, tc.contains)
		})
	}
}

// endless writes zeros until the client stops reading, counting what it
// offered (before each write: the client may have read it and moved on
// while the write is still returning).
func endless(w http.ResponseWriter, r *http.Request, offered *atomic.Int64, contentType string) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(http.StatusOK)
	buf := make([]byte, 32<<10)
	for r.Context().Err() == nil {
		offered.Add(int64(len(buf)))
		if _, err := w.Write(buf); err != nil {
			return
		}
	}
}

// TestOversizedContentIsNotDownloaded: a registry that serves more than it
// declared (a layer bigger than the manifest says, a manifest with no
// length that never ends) cannot make a pull read it all: the pull stops
// just past the limit and fails, and nothing is cached.
func TestOversizedContentIsNotDownloaded(t *testing.T) {
	ctx := context.Background()
	wasm := fixture(t, "condition")
	layerDigest := digest.FromBytes(wasm)
	var pushed string
	var wrote atomic.Int64
	serveEndless := "" // "blob" or "manifest"
	var mu sync.Mutex
	addr, _ := startRegistry(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			what, p := serveEndless, pushed
			mu.Unlock()
			switch {
			case r.Method == http.MethodGet && what == "blob" && strings.HasSuffix(r.URL.Path, "/blobs/"+layerDigest.String()):
				endless(w, r, &wrote, "application/octet-stream")
			case r.Method == http.MethodGet && what == "manifest" && p != "" && strings.HasSuffix(r.URL.Path, "/manifests/"+p):
				endless(w, r, &wrote, ocispec.MediaTypeImageManifest)
			default:
				next.ServeHTTP(w, r)
			}
		})
	})
	c, _ := newClient(t)
	a, err := c.Push(ctx, addr+"/team/cond:v1", wasm)
	require.NoError(t, err)
	mu.Lock()
	pushed = a.Digest
	mu.Unlock()

	// The TCP buffers between the two ends hold a few MiB at most; reading
	// the whole answer would never end.
	const bound = 64 << 20
	for _, what := range []string{"blob", "manifest"} {
		t.Run(what, func(t *testing.T) {
			mu.Lock()
			serveEndless = what
			mu.Unlock()
			wrote.Store(0)
			fresh, _ := newClient(t)
			_, err := fresh.Pull(ctx, a.Ref)
			require.Error(t, err)
			if what == "blob" {
				require.ErrorIs(t, err, ErrDigest, "more bytes than declared")
			} else {
				require.ErrorIs(t, err, ErrTooLarge)
			}
			require.Greater(t, wrote.Load(), int64(len(wasm)), "the registry served more than declared")
			require.Less(t, wrote.Load(), int64(bound), "the pull stopped reading")
			_, statErr := os.Stat(filepath.Join(fresh.cfg.cacheDir, "sha256", a.SHA256))
			require.ErrorIs(t, statErr, os.ErrNotExist, "nothing cached")
		})
	}
}

// TestCacheEntriesAppearWhole: replicas (separate clients on one cache
// directory) writing the same digest at once never let a reader see part
// of an entry: an entry that exists is whole.
func TestCacheEntriesAppearWhole(t *testing.T) {
	dir := t.TempDir()
	big := make([]byte, 4<<20)
	_, _ = rand.Read(big)
	d := digest.FromBytes(big)
	path := filepath.Join(dir, "sha256", d.Encoded())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stores atomic.Int64
	for range 3 {
		c, _ := newClient(t, WithCacheDir(dir))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.store(d, big)
				stores.Add(1)
			}
		}()
	}
	partial, reads := 0, 0
	for reads < 200 || stores.Load() < 30 {
		b, err := os.ReadFile(path)
		if err == nil {
			reads++
			if !bytes.Equal(b, big) {
				partial++
			}
		}
	}
	close(stop)
	wg.Wait()
	require.Zero(t, partial, "a reader saw part of an entry")
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "one entry, no temporary file left behind")
}

// TestConcurrentCache_Processes: two processes pull the same digest into
// one cache directory at once (the registry holds both downloads until
// both have started, so they overlap); both get the verified module, and
// the cache holds each entry once, with no temporary file left.
func TestConcurrentCache_Processes(t *testing.T) {
	if os.Getenv("RETRYHOST_OCI_HELPER_REF") != "" {
		t.Skip("the helper process runs TestHelperPull only")
	}
	ctx := context.Background()
	wasm := fixture(t, "condition")
	layer := "/blobs/" + digest.FromBytes(wasm).String()
	var inFlight atomic.Int32
	both := make(chan struct{})
	var once sync.Once
	addr, _ := startRegistry(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, layer) {
				if inFlight.Add(1) == 2 {
					once.Do(func() { close(both) })
				}
				select {
				case <-both:
				case <-time.After(10 * time.Second): // a helper that never came: the test fails below
				case <-r.Context().Done():
				}
			}
			next.ServeHTTP(w, r)
		})
	})
	pusher, _ := newClient(t)
	a, err := pusher.Push(ctx, addr+"/team/cond:v1", wasm)
	require.NoError(t, err)

	cache := t.TempDir()
	outs := make([]bytes.Buffer, 2)
	cmds := make([]*exec.Cmd, 2)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestHelperPull$", "-test.count=1")
		cmds[i].Env = append(os.Environ(), "RETRYHOST_OCI_HELPER_REF="+a.Ref, "RETRYHOST_OCI_HELPER_CACHE="+cache)
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
		require.NoError(t, cmds[i].Start())
	}
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), outs[i].String())
		require.Contains(t, outs[i].String(), "pulled sha256:"+a.SHA256, outs[i].String())
	}
	require.EqualValues(t, 2, inFlight.Load(), "both processes downloaded the layer")
	entries, err := os.ReadDir(filepath.Join(cache, "sha256"))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.ElementsMatch(t, []string{a.SHA256, strings.TrimPrefix(a.Digest, "sha256:")}, names,
		"the module and its manifest, once each; no temporary file")
	b, err := os.ReadFile(filepath.Join(cache, "sha256", a.SHA256))
	require.NoError(t, err)
	require.Equal(t, wasm, b)
}

// TestHelperPull is the other process of TestConcurrentCache_Processes.
func TestHelperPull(t *testing.T) {
	ref := os.Getenv("RETRYHOST_OCI_HELPER_REF")
	if ref == "" {
		t.Skip("run by TestConcurrentCache_Processes")
	}
	c, _ := newClient(t, WithCacheDir(os.Getenv("RETRYHOST_OCI_HELPER_CACHE")))
	a, err := c.Pull(context.Background(), ref)
	require.NoError(t, err)
	require.Equal(t, a.SHA256, digest.FromBytes(a.Wasm).Encoded())
	fmt.Println("pulled sha256:" + a.SHA256)
}

// module is a made-up module of n bytes (a push checks the magic only).
func module(n int, fill byte) []byte {
	b := bytes.Repeat([]byte{fill}, n)
	copy(b, "\x00asm\x01\x00\x00\x00")
	return b
}

// TestCacheIsBounded: the cache keeps to Limits.CacheBytes by removing the
// least recently used entries after a write; a hit counts as a use; a
// removed entry is pulled again (so it needs the registry), a kept one
// serves with the registry down; old temporary files are removed.
func TestCacheIsBounded(t *testing.T) {
	ctx := context.Background()
	addr, srv := startRegistry(t, nil)
	pusher, _ := newClient(t)
	mods := map[string][]byte{"a": module(1000, 'a'), "b": module(2000, 'b'), "c": module(1500, 'c')}
	pushed := map[string]Artifact{}
	manifest := map[string]int64{}
	for _, n := range []string{"a", "b", "c"} {
		a, err := pusher.Push(ctx, addr+"/team/"+n+":v1", mods[n])
		require.NoError(t, err)
		pushed[n] = a
		fi, err := os.Stat(filepath.Join(pusher.cfg.cacheDir, "sha256", strings.TrimPrefix(a.Digest, "sha256:")))
		require.NoError(t, err)
		manifest[n] = fi.Size()
	}
	limit := int64(1000+2000) + manifest["a"] + manifest["b"] + 64 // a and b fit, not a third module
	c, _ := newClient(t, WithLimits(Limits{CacheBytes: limit}))
	dir := filepath.Join(c.cfg.cacheDir, "sha256")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	stale, fresh := filepath.Join(dir, ".tmp-stale"), filepath.Join(dir, ".tmp-live")
	require.NoError(t, os.WriteFile(stale, []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(fresh, []byte("x"), 0o644))
	old := time.Now().Add(-2 * tmpMaxAge)
	require.NoError(t, os.Chtimes(stale, old, old))

	pull := func(n string) error {
		got, err := c.Pull(ctx, pushed[n].Ref)
		if err == nil {
			require.Equal(t, mods[n], got.Wasm)
		}
		return err
	}
	require.NoError(t, pull("a"))
	require.NoError(t, pull("b"))
	require.NoError(t, pull("a")) // a hit: a is now more recently used than b
	require.NoError(t, pull("c"))

	var names []string
	var total int64
	des, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, de := range des {
		names = append(names, de.Name())
		if fi, err := de.Info(); err == nil && !strings.HasPrefix(de.Name(), ".tmp-") {
			total += fi.Size()
		}
	}
	entries := func(ns ...string) []string {
		var out []string
		for _, n := range ns {
			out = append(out, pushed[n].SHA256, strings.TrimPrefix(pushed[n].Digest, "sha256:"))
		}
		return append(out, ".tmp-live")
	}
	require.ElementsMatch(t, entries("a", "c"), names, "b, the least recently used, went; the stale temporary file too")
	require.LessOrEqual(t, total, limit)

	srv.Close()
	require.NoError(t, pull("a"), "a kept entry serves with the registry down")
	require.Error(t, pull("b"), "a removed entry needs the registry")
}

// TestTagLastResolvedServesWhileRegistryDown: a load of a tag while the
// registry cannot be reached starts on the digest the tag last resolved to
// (from the cache, logged); a poll (a version serving) gets the error; a
// registry that answers no (404, 401) gets no fallback.
func TestTagLastResolvedServesWhileRegistryDown(t *testing.T) {
	ctx := context.Background()
	var answer atomic.Int32 // 0: the registry; else this status for the tag
	addr, srv := startRegistry(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if code := int(answer.Load()); code != 0 && strings.HasSuffix(r.URL.Path, "/manifests/stable") {
				if code == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				}
				http.Error(w, `{"errors":[{"code":"DENIED","message":"no"}]}`, code)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	wasm := fixture(t, "upper")
	pusher, _ := newClient(t)
	pushed, err := pusher.Push(ctx, addr+"/team/xf:stable", wasm)
	require.NoError(t, err)
	tag := addr + "/team/xf:stable"
	cache := t.TempDir()
	first, _ := newClient(t, WithCacheDir(cache), WithAllowTags())
	_, err = first.Pull(ctx, tag)
	require.NoError(t, err)

	for _, code := range []int{http.StatusNotFound, http.StatusUnauthorized} {
		answer.Store(int32(code))
		c, _ := newClient(t, WithCacheDir(cache), WithAllowTags())
		_, err := c.Pull(ctx, tag)
		require.Error(t, err, "%d: the registry said no; no fallback", code)
	}
	answer.Store(http.StatusServiceUnavailable)
	c, logs := newClient(t, WithCacheDir(cache), WithAllowTags())
	got, err := c.Pull(ctx, tag)
	require.NoError(t, err, "503: the registry cannot answer")
	require.Equal(t, pushed.Digest, got.Digest)
	require.Contains(t, logs.String(), "registry unreachable; using the digest the tag last resolved to")

	answer.Store(0)
	srv.Close()
	restarted, logs := newClient(t, WithCacheDir(cache), WithAllowTags())
	got, err = restarted.Pull(ctx, tag)
	require.NoError(t, err, "registry down: the load starts on the last digest")
	require.Equal(t, wasm, got.Wasm)
	require.Equal(t, pushed.Ref, got.Ref)
	require.Contains(t, logs.String(), pushed.Digest)

	_, _, err = restarted.Source(tag).Fetch(ctx, got.SHA256)
	require.Error(t, err, "a poll reports the registry down; what serves keeps serving")

	never, _ := newClient(t, WithAllowTags()) // an empty cache: nothing to fall back on
	_, err = never.Pull(ctx, tag)
	require.Error(t, err)
}

// BenchmarkPollTagUnchanged is what one poll of a followed tag costs when
// the tag has not moved: a HEAD to the registry (loopback here), the
// manifest from the cache, no layer read.
func BenchmarkPollTagUnchanged(b *testing.B) {
	ctx := context.Background()
	c, pushed, ref := benchPushed(b, "stable", WithAllowTags())
	src := c.Source(ref)
	for b.Loop() {
		sum, mod, err := src.Fetch(ctx, pushed.SHA256)
		if err != nil || sum != pushed.SHA256 || mod != nil {
			b.Fatal(sum, err)
		}
	}
}
