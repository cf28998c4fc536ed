package oci

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ggcr "github.com/google/go-containerregistry/pkg/registry"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "host", "testdata", name+".wasm"))
	require.NoError(t, err)
	return b
}

func sha(b []byte) string { return digest.FromBytes(b).Encoded() }

// startRegistry serves a real OCI registry (go-containerregistry's) on
// loopback, optionally wrapped, and returns its host:port.
func startRegistry(t testing.TB, wrap func(http.Handler) http.Handler) (string, *httptest.Server) {
	t.Helper()
	var h http.Handler = ggcr.New(ggcr.Logger(nilLogger()))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), srv
}

func newClient(t *testing.T, opts ...Option) (*Client, *testkit.LogBuffer) {
	t.Helper()
	logs := &testkit.LogBuffer{}
	base := []Option{
		WithCacheDir(t.TempDir()),
		WithPlainHTTP(),
		WithCredentialsFile(filepath.Join(t.TempDir(), "none.json")),
		WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
	}
	c, err := New(append(base, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.auth.Client.CloseIdleConnections)
	return c, logs
}

func TestPushPull(t *testing.T) {
	ctx := context.Background()
	addr, _ := startRegistry(t, nil)
	c, _ := newClient(t)
	wasm := fixture(t, "condition")

	pushed, err := c.Push(ctx, addr+"/team/cond:v1", wasm)
	require.NoError(t, err)
	require.Equal(t, sha(wasm), pushed.SHA256)
	require.Equal(t, addr+"/team/cond@"+pushed.Digest, pushed.Ref)
	again, err := c.Push(ctx, addr+"/team/cond:v2", wasm)
	require.NoError(t, err)
	require.Equal(t, pushed.Digest, again.Digest, "the same module pushes to the same digest")

	other, _ := newClient(t) // empty cache: really pulls
	got, err := other.Pull(ctx, pushed.Ref)
	require.NoError(t, err)
	require.Equal(t, wasm, got.Wasm)
	require.Equal(t, pushed.Digest, got.Digest)
	require.Equal(t, MediaType, got.MediaType)

	rt, err := host.New(ctx)
	require.NoError(t, err)
	defer rt.Close(ctx)
	p, err := other.Load(ctx, rt, "cond", pushed.Ref, host.WithConfig([]byte("anthropic/claude")))
	require.NoError(t, err)
	defer p.Close(ctx)
	require.Equal(t, sha(wasm), p.SHA256())
	d, err := p.Decide(ctx, &abi.Attempt{Status: 503})
	require.NoError(t, err)
	require.Equal(t, "anthropic/claude", d.Model)
}

func TestTagNeedsOptIn(t *testing.T) {
	ctx := context.Background()
	addr, _ := startRegistry(t, nil)
	c, _ := newClient(t)
	pushed, err := c.Push(ctx, addr+"/team/cond:v1", fixture(t, "condition"))
	require.NoError(t, err)

	for _, ref := range []string{addr + "/team/cond:v1", addr + "/team/cond"} {
		_, err = c.Pull(ctx, ref)
		require.ErrorIs(t, err, ErrTag, ref)
	}
	tags, logs := newClient(t, WithAllowTags())
	got, err := tags.Pull(ctx, addr+"/team/cond:v1")
	require.NoError(t, err)
	require.Equal(t, pushed.Digest, got.Digest)
	require.Equal(t, pushed.Ref, got.Ref, "the pull reports the reference pinned")
	require.Contains(t, logs.String(), "tag resolved to digest")
	require.Contains(t, logs.String(), pushed.Digest)
}

// tamper rewrites the body of GET responses whose path contains part.
func tamper(part string, edit func([]byte) []byte) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, part) {
				next.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(edit(rec.Body.Bytes()))
		})
	}
}

func TestDigestMismatch(t *testing.T) {
	ctx := context.Background()
	wasm := fixture(t, "condition")
	flip := func(b []byte) []byte {
		b = bytes.Clone(b)
		b[len(b)-1] ^= 0xff
		return b
	}
	for _, part := range []string{"/blobs/", "/manifests/"} {
		t.Run(part, func(t *testing.T) {
			addr, _ := startRegistry(t, tamper(part, flip))
			c, _ := newClient(t)
			pushed, err := c.Push(ctx, addr+"/team/cond:v1", wasm)
			require.NoError(t, err)
			fresh, _ := newClient(t)
			_, err = fresh.Pull(ctx, pushed.Ref)
			require.ErrorIs(t, err, ErrDigest)
			entries, _ := os.ReadDir(filepath.Join(fresh.cfg.cacheDir, "sha256"))
			for _, e := range entries {
				require.NotEqual(t, sha(wasm), e.Name(), "tampered content is never cached")
			}
		})
	}
}

// pushRaw pushes a manifest of manifestType with one layer of layerType.
func pushRaw(t *testing.T, c *Client, ref string, layerType string, manifestType string, layer []byte) string {
	t.Helper()
	ld := content.NewDescriptorFromBytes(layerType, layer)
	empty := ocispec.DescriptorEmptyJSON
	m := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: manifestType,
		Config: ocispec.Descriptor{MediaType: empty.MediaType, Digest: empty.Digest, Size: empty.Size},
		Layers: []ocispec.Descriptor{ld},
	}
	return pushManifest(t, c, ref, m, map[digest.Digest][]byte{ld.Digest: layer, empty.Digest: empty.Data})
}

func TestMediaType(t *testing.T) {
	ctx := context.Background()
	addr, _ := startRegistry(t, nil)
	c, _ := newClient(t)
	wasm := fixture(t, "condition")

	bad := pushRaw(t, c, addr+"/team/tar:v1", "application/vnd.oci.image.layer.v1.tar", ocispec.MediaTypeImageManifest, wasm)
	_, err := c.Pull(ctx, bad)
	require.ErrorIs(t, err, ErrMediaType)

	for _, mt := range []string{WasmLayerMediaType, ModuleWasmLayerMediaType} {
		ok := pushRaw(t, c, addr+"/team/wasm:v1", mt, ocispec.MediaTypeImageManifest, wasm)
		got, err := c.Pull(ctx, ok)
		require.NoError(t, err, mt)
		require.Equal(t, wasm, got.Wasm)
		require.Equal(t, mt, got.MediaType)
	}
}

func TestRegistryDownCacheServes(t *testing.T) {
	ctx := context.Background()
	addr, srv := startRegistry(t, nil)
	pusher, _ := newClient(t)
	pushed, err := pusher.Push(ctx, addr+"/team/cond:v1", fixture(t, "condition"))
	require.NoError(t, err)

	cache := t.TempDir()
	c, _ := newClient(t, WithCacheDir(cache), WithAllowTags())
	_, err = c.Pull(ctx, pushed.Ref)
	require.NoError(t, err)
	srv.Close()

	// A new process (client) on the same cache starts without the registry.
	restarted, _ := newClient(t, WithCacheDir(cache), WithAllowTags())
	got, err := restarted.Pull(ctx, pushed.Ref)
	require.NoError(t, err)
	require.Equal(t, fixture(t, "condition"), got.Wasm)

	_, err = restarted.Pull(ctx, addr+"/team/cond:v1")
	require.Error(t, err, "a tag never resolved with this cache cannot be resolved while the registry is down")

	t.Run("a damaged cache entry is not served", func(t *testing.T) {
		damaged := fixture(t, "condition")
		damaged[len(damaged)-1] ^= 0xff // same size, other bytes
		require.NoError(t, os.WriteFile(filepath.Join(cache, "sha256", pushed.SHA256), damaged, 0o644))
		_, err := restarted.Pull(ctx, pushed.Ref)
		require.Error(t, err, "damaged entry, registry down: an error, never the damaged bytes")
	})
}

func TestAuthRequired(t *testing.T) {
	ctx := context.Background()
	addr, _ := startRegistry(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != "ci" || p != "s3cret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"login"}]}`, http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	anon, _ := newClient(t)
	_, err := anon.Push(ctx, addr+"/team/cond:v1", fixture(t, "condition"))
	require.ErrorIs(t, err, auth.ErrBasicCredentialNotFound)

	dir := t.TempDir()
	t.Setenv("DOCKER_CONFIG", dir)
	login := func(userpass string) {
		cfg := map[string]any{"auths": map[string]any{addr: map[string]string{
			"auth": base64.StdEncoding.EncodeToString([]byte(userpass)),
		}}}
		b, err := json.Marshal(cfg)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600))
	}
	login("ci:wrong")
	wrong, err := New(WithCacheDir(t.TempDir()), WithPlainHTTP())
	require.NoError(t, err)
	defer wrong.auth.Client.CloseIdleConnections()
	_, err = wrong.Push(ctx, addr+"/team/cond:v1", fixture(t, "condition"))
	require.ErrorContains(t, err, "401")

	login("ci:s3cret")

	c, err := New(WithCacheDir(t.TempDir()), WithPlainHTTP()) // the standard credential file
	require.NoError(t, err)
	defer c.auth.Client.CloseIdleConnections()
	pushed, err := c.Push(ctx, addr+"/team/cond:v1", fixture(t, "condition"))
	require.NoError(t, err)
	fresh, err := New(WithCacheDir(t.TempDir()), WithPlainHTTP())
	require.NoError(t, err)
	defer fresh.auth.Client.CloseIdleConnections()
	got, err := fresh.Pull(ctx, pushed.Ref)
	require.NoError(t, err)
	require.Equal(t, pushed.SHA256, got.SHA256)
}

func TestLimits(t *testing.T) {
	ctx := context.Background()
	var blobGets int
	var mu sync.Mutex
	addr, _ := startRegistry(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				mu.Lock()
				blobGets++
				mu.Unlock()
			}
			next.ServeHTTP(w, r)
		})
	})
	wasm := fixture(t, "condition")
	c, _ := newClient(t)
	pushed, err := c.Push(ctx, addr+"/team/cond:v1", wasm)
	require.NoError(t, err)

	t.Run("layer", func(t *testing.T) {
		small, _ := newClient(t, WithLimits(Limits{LayerBytes: int64(len(wasm) - 1)}))
		_, err := small.Pull(ctx, pushed.Ref)
		require.ErrorIs(t, err, ErrTooLarge)
		mu.Lock()
		defer mu.Unlock()
		require.Zero(t, blobGets, "an oversized layer is refused before it is downloaded")
		_, err = small.Push(ctx, addr+"/team/cond:v2", wasm)
		require.ErrorIs(t, err, ErrTooLarge)
	})
	t.Run("manifest", func(t *testing.T) {
		small, _ := newClient(t, WithLimits(Limits{ManifestBytes: 64}))
		_, err := small.Pull(ctx, pushed.Ref)
		require.ErrorIs(t, err, ErrTooLarge)
	})
	t.Run("timeout", func(t *testing.T) {
		hang := make(chan struct{})
		defer close(hang)
		slow, _ := startRegistry(t, func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-hang:
				case <-r.Context().Done():
				}
			})
		})
		c, _ := newClient(t, WithLimits(Limits{Timeout: 50 * time.Millisecond}))
		_, err := c.Pull(ctx, slow+"/team/cond@"+pushed.Digest)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestBadReferences(t *testing.T) {
	c, _ := newClient(t)
	for _, ref := range []string{"", "nohost", "h/r@md5:abc", "h/r@sha256:xyz"} {
		_, err := c.Pull(context.Background(), ref)
		require.ErrorIs(t, err, ErrReference, ref)
	}
	_, err := c.Push(context.Background(), "127.0.0.1:1/r@sha256:"+strings.Repeat("a", 64), []byte("\x00asm"))
	require.ErrorIs(t, err, ErrReference, "push names a tag")
	_, err = c.Push(context.Background(), "127.0.0.1:1/r:v1", []byte("not wasm"))
	require.ErrorIs(t, err, ErrReference)
}

// TestConcurrentCache: replicas sharing one cache directory pull at once.
func TestConcurrentCache(t *testing.T) {
	ctx := context.Background()
	addr, _ := startRegistry(t, nil)
	pusher, _ := newClient(t)
	pushed, err := pusher.Push(ctx, addr+"/team/cond:v1", fixture(t, "condition"))
	require.NoError(t, err)
	cache := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		c, _ := newClient(t, WithCacheDir(cache))
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := c.Pull(ctx, pushed.Ref)
			if err == nil && sha(a.Wasm) != pushed.SHA256 {
				err = io.ErrUnexpectedEOF
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	entries, err := os.ReadDir(filepath.Join(cache, "sha256"))
	require.NoError(t, err)
	for _, e := range entries {
		require.False(t, strings.HasPrefix(e.Name(), ".tmp"), "no temporary file is left behind")
	}
}

// TestWatchTag: a Registry following a tag swaps in the new digest pushed
// behind it; a stream opened before finishes on the old version; the
// registry going down leaves the current version serving.
func TestWatchTag(t *testing.T) {
	ctx := context.Background()
	addr, srv := startRegistry(t, nil)
	c, logs := newClient(t, WithAllowTags())
	upper, refusal := fixture(t, "upper"), fixture(t, "refusal")
	_, err := c.Push(ctx, addr+"/team/xf:stable", upper)
	require.NoError(t, err)

	rt, err := host.New(ctx)
	require.NoError(t, err)
	defer rt.Close(ctx)
	reg := host.NewRegistry(rt)
	defer reg.Close(ctx)
	n, err := reg.LoadSource(ctx, "xf", c.Source(addr+"/team/xf:stable"))
	require.NoError(t, err)
	require.Equal(t, sha(upper), n.Version())
	st, err := n.Open(ctx, abi.StreamInfo{ID: 1})
	require.NoError(t, err)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- reg.WatchSource(wctx, "xf", c.Source(addr+"/team/xf:stable"), 5*time.Millisecond) }()
	_, err = c.Push(ctx, addr+"/team/xf:stable", refusal)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return n.Version() == sha(refusal) }, 10*time.Second, 5*time.Millisecond)

	v, err := st.Part(ctx, &abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: "hi"})
	require.NoError(t, err)
	require.Equal(t, abi.PartReplace, v.Action, "the stream opened before the swap stays on the old version")
	st.Close()

	srv.Close()
	time.Sleep(30 * time.Millisecond) // several failed polls
	require.Equal(t, sha(refusal), n.Version(), "registry down: the current version keeps serving")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Contains(t, logs.String(), "tag resolved to digest")
}

func TestDamagedCacheIsPulledAgain(t *testing.T) {
	ctx := context.Background()
	addr, _ := startRegistry(t, nil)
	c, logs := newClient(t)
	wasm := fixture(t, "condition")
	pushed, err := c.Push(ctx, addr+"/team/cond:v1", wasm)
	require.NoError(t, err)
	entry := filepath.Join(c.cfg.cacheDir, "sha256", pushed.SHA256)
	damaged := bytes.Clone(wasm)
	damaged[0] ^= 0xff
	require.NoError(t, os.WriteFile(entry, damaged, 0o644))

	got, err := c.Pull(ctx, pushed.Ref)
	require.NoError(t, err)
	require.Equal(t, wasm, got.Wasm, "the registry's verified bytes, not the damaged entry")
	require.Contains(t, logs.String(), "cache entry damaged")
	onDisk, err := os.ReadFile(entry)
	require.NoError(t, err)
	require.Equal(t, wasm, onDisk, "the entry is repaired")
}

// benchPushed is where the benchmarks start: a loopback registry holding
// the refusal plugin under team/refusal:tag, pushed by the returned client
// (logging nowhere, opts added), and the tagged reference. It skips when
// the plugin is not built.
func benchPushed(b *testing.B, tag string, opts ...Option) (*Client, Artifact, string) {
	b.Helper()
	addr, _ := startRegistry(b, nil)
	wasm, err := os.ReadFile("../plugins/refusal/refusal.wasm")
	if err != nil {
		b.Skip(err)
	}
	base := []Option{WithCacheDir(b.TempDir()), WithPlainHTTP(),
		WithCredentialsFile(filepath.Join(b.TempDir(), "none.json")), WithLogger(slog.New(slog.DiscardHandler))}
	c, err := New(append(base, opts...)...)
	require.NoError(b, err)
	b.Cleanup(c.auth.Client.CloseIdleConnections)
	ref := addr + "/team/refusal:" + tag
	pushed, err := c.Push(context.Background(), ref, wasm)
	require.NoError(b, err)
	return c, pushed, ref
}

// BenchmarkPullCached is what a replica pays per poll of a pinned
// reference, or at start with the module cached: no network.
func BenchmarkPullCached(b *testing.B) {
	ctx := context.Background()
	c, pushed, _ := benchPushed(b, "v1")
	b.SetBytes(int64(len(pushed.Wasm)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Pull(ctx, pushed.Ref); err != nil {
			b.Fatal(err)
		}
	}
}

// TestResolvedDigestIsValidated: a registry answering a tag with a digest
// that is not 64 hex digits cannot make the cache write outside its
// directory.
func TestResolvedDigestIsValidated(t *testing.T) {
	ctx := context.Background()
	addr, _ := startRegistry(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, "/manifests/v1") {
				w.Header().Set("Docker-Content-Digest", "sha256:../../escape")
				w.Header().Set("Content-Type", ocispec.MediaTypeImageManifest)
				w.Header().Set("Content-Length", "2")
				w.WriteHeader(http.StatusOK)
				if r.Method == http.MethodGet {
					_, _ = w.Write([]byte("{}"))
				}
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	c, _ := newClient(t, WithAllowTags())
	_, err := c.Pull(ctx, addr+"/team/cond:v1")
	require.ErrorContains(t, err, "digest") // oras-go refuses it; pull re-checks before using it as a file name
	_, statErr := os.Stat(filepath.Join(c.cfg.cacheDir, "escape"))
	require.ErrorIs(t, statErr, os.ErrNotExist)
}
