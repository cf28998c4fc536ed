// Package oci pulls and pushes retryhost plugins as OCI artifacts, so a
// fleet of replicas loads the same module from a registry instead of each
// needing the .wasm on its own disk.
//
// A plugin is referenced by digest
// (registry.example.com/team/refusal@sha256:…): the manifest is verified
// against the pin, its single layer must have a Wasm media type
// ([MediaType], or the wasm OCI conventions' [WasmLayerMediaType]), the
// layer is verified against its sha256, cached on disk by digest, and
// loaded through host's own verification ([host.WithSHA256]). A tag
// without a digest is refused unless the client was built with
// [WithAllowTags]; it is then resolved once per pull and logged.
//
// The package lives outside host so that host depends on nothing but the
// standard library and wazero: host sees a plugin from a registry only as a
// [host.Source] (see [Client.Source]).
package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"

	"github.com/retryhost/retryhost/host"
)

// Media types of a plugin artifact.
const (
	// MediaType is the layer media type retryhost pushes: one Wasm module.
	MediaType = "application/vnd.retryhost.plugin.v1+wasm"
	// ArtifactType is the manifest's artifactType retryhost pushes.
	ArtifactType = "application/vnd.retryhost.plugin.v1"
	// WasmLayerMediaType is the layer media type of the CNCF wasm OCI
	// artifact conventions; pulled like [MediaType].
	WasmLayerMediaType = "application/vnd.wasm.content.layer.v1+wasm"
	// ModuleWasmLayerMediaType is the layer media type of the Wasm image
	// format Istio and Envoy pull; pulled like [MediaType].
	ModuleWasmLayerMediaType = "application/vnd.module.wasm.content.layer.v1+wasm"
)

var layerTypes = map[string]bool{MediaType: true, WasmLayerMediaType: true, ModuleWasmLayerMediaType: true}

// manifestTypes are the manifests a plugin may come in; "" because the OCI
// spec only says a manifest SHOULD name its media type.
var manifestTypes = map[string]bool{
	"":                             true,
	ocispec.MediaTypeImageManifest: true,
	"application/vnd.docker.distribution.manifest.v2+json": true,
}

// Errors to branch on with errors.Is; each is wrapped with the reference.
var (
	// ErrTag: the reference names a tag, not a digest, and the client does
	// not allow tags ([WithAllowTags]).
	ErrTag = errors.New("oci: reference is not pinned by digest (a tag needs WithAllowTags)")
	// ErrReference: the reference does not parse, or its digest is not sha256.
	ErrReference = errors.New("oci: invalid reference")
	// ErrMediaType: the manifest is not an image manifest with exactly one
	// layer of a Wasm media type.
	ErrMediaType = errors.New("oci: not a plugin artifact")
	// ErrDigest: a manifest or layer does not match its digest.
	ErrDigest = errors.New("oci: content does not match its digest")
	// ErrTooLarge: a manifest or layer is over its limit ([WithLimits]).
	ErrTooLarge = errors.New("oci: content over the size limit")
)

// Limits bounds what a registry can make a client read.
// A Limits is a plain value, safe to copy.
type Limits struct {
	// ManifestBytes caps a manifest. Default 256 KiB.
	ManifestBytes int64
	// LayerBytes caps the Wasm layer. Default 16 MiB (host's default
	// ModuleBytes).
	LayerBytes int64
	// Timeout bounds one pull or push, resolve included. Default 60s.
	Timeout time.Duration
	// CacheBytes caps the cache directory: after an entry is written, the
	// least recently used entries are removed until the cache fits (never
	// the entry just written). A removed entry is pulled again when next
	// needed, so only a pinned reference whose entry was removed needs the
	// registry to start. Default 512 MiB.
	CacheBytes int64
}

// DefaultLimits returns the limits a [Client] applies unless [WithLimits]
// says otherwise.
func DefaultLimits() Limits {
	return Limits{ManifestBytes: 256 << 10, LayerBytes: 16 << 20, Timeout: time.Minute, CacheBytes: 512 << 20}
}

// An Option configures a [Client].
type Option func(*config)

type config struct {
	cacheDir  string
	allowTags bool
	plainHTTP bool
	limits    Limits
	credFile  string
	logger    *slog.Logger
	client    *http.Client
}

// WithCacheDir sets the on-disk cache, content addressed by sha256 and
// shared safely by concurrent processes. Default: retryhost/oci under
// [os.UserCacheDir].
func WithCacheDir(dir string) Option { return func(c *config) { c.cacheDir = dir } }

// WithAllowTags lets a reference name a tag instead of a digest. The tag
// is resolved to a digest once per pull, and the resolution is logged.
// Default: tags are refused with [ErrTag], as a tag can move under a
// running fleet.
func WithAllowTags() Option { return func(c *config) { c.allowTags = true } }

// WithPlainHTTP talks to the registry over plain HTTP (a registry on
// loopback, a test). Default: HTTPS.
func WithPlainHTTP() Option { return func(c *config) { c.plainHTTP = true } }

// WithLimits sets the size and time limits; zero fields keep their default.
func WithLimits(l Limits) Option {
	return func(c *config) {
		d := DefaultLimits()
		if l.ManifestBytes <= 0 {
			l.ManifestBytes = d.ManifestBytes
		}
		if l.LayerBytes <= 0 {
			l.LayerBytes = d.LayerBytes
		}
		if l.Timeout <= 0 {
			l.Timeout = d.Timeout
		}
		if l.CacheBytes <= 0 {
			l.CacheBytes = d.CacheBytes
		}
		c.limits = l
	}
}

// WithCredentialsFile reads registry credentials from a Docker config
// file. Default: $DOCKER_CONFIG/config.json, else ~/.docker/config.json
// (with its credential helpers); a missing file means anonymous access.
func WithCredentialsFile(path string) Option { return func(c *config) { c.credFile = path } }

// WithLogger logs tag resolutions and cache failures. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithHTTPClient sets the HTTP client under the registry auth. Default: a
// client on a clone of http.DefaultTransport.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.client = hc } }

// Client pulls and pushes plugin artifacts. A Client is safe for
// concurrent use by multiple goroutines.
type Client struct {
	cfg  config
	auth *auth.Client
}

// New returns a client. It fails if the credential file exists but cannot
// be read, or no cache directory can be chosen.
func New(opts ...Option) (*Client, error) {
	cfg := config{limits: DefaultLimits(), logger: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.cacheDir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("oci: no cache directory (use WithCacheDir): %w", err)
		}
		cfg.cacheDir = filepath.Join(d, "retryhost", "oci")
	}
	if cfg.client == nil {
		cfg.client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	var store credentials.Store
	var err error
	if cfg.credFile != "" {
		store, err = credentials.NewStore(cfg.credFile, credentials.StoreOptions{})
	} else {
		store, err = credentials.NewStoreFromDocker(credentials.StoreOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("oci: credentials: %w", err)
	}
	return &Client{cfg: cfg, auth: &auth.Client{
		Client:     cfg.client,
		Credential: credentials.Credential(store),
		Cache:      auth.NewCache(),
	}}, nil
}

// Artifact is one pulled or pushed plugin.
type Artifact struct {
	// Ref is the reference pinned by digest: registry/repository@sha256:….
	Ref string
	// Digest is the manifest's digest, "sha256:…".
	Digest string
	// SHA256 is the module's sha256 (hex), the layer's digest.
	SHA256 string
	// MediaType is the layer's media type.
	MediaType string
	// Wasm is the module (nil from a pull that found it unchanged).
	Wasm []byte
}

func (c *Client) repo(ref registry.Reference) *remote.Repository {
	return &remote.Repository{
		Client:           c.auth,
		Reference:        ref,
		PlainHTTP:        c.cfg.plainHTTP,
		MaxMetadataBytes: c.cfg.limits.ManifestBytes,
	}
}

func parse(s string) (registry.Reference, bool, error) {
	ref, err := registry.ParseReference(s)
	if err != nil {
		return ref, false, fmt.Errorf("%w %q: %w", ErrReference, s, err)
	}
	if ref.Reference == "" {
		ref.Reference = "latest"
	}
	if ref.ValidateReferenceAsDigest() != nil {
		return ref, false, nil
	}
	if d := digest.Digest(ref.Reference); d.Algorithm() != digest.SHA256 {
		return ref, false, fmt.Errorf("%w %q: digest must be sha256", ErrReference, s)
	}
	return ref, true, nil
}

// Pull returns the plugin ref names, from the cache when the pinned
// manifest and its layer are there (so a registry that is down does not
// stop a replica from starting), else from the registry, and caches it.
// A tag ([WithAllowTags]) is resolved by the registry, and what it
// resolved to is recorded in the cache: when the registry cannot answer
// (no connection, a timeout, a 5xx; not a 4xx), the digest the tag last
// resolved to is pulled instead, with a warning logged. A [Client.Source]
// polled while a version serves does not fall back: it returns the error.
//
// # Errors
//
// [ErrTag], [ErrReference], [ErrMediaType], [ErrDigest], [ErrTooLarge], or
// the registry's error (not found, unauthorized, unreachable), wrapped.
func (c *Client) Pull(ctx context.Context, ref string) (Artifact, error) {
	return c.pull(ctx, ref, "", nil)
}

// pull skips reading the layer when its sha256 equals have; lastTag, if
// set, is called with the digest a tag resolved to (for logging changes
// only).
func (c *Client) pull(ctx context.Context, s, have string, resolved func(string) bool) (Artifact, error) {
	ref, pinned, err := parse(s)
	if err != nil {
		return Artifact{}, err
	}
	if !pinned && !c.cfg.allowTags {
		return Artifact{}, fmt.Errorf("%w: %s", ErrTag, s)
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.cfg.limits.Timeout)
	defer cancel()
	repo := c.repo(ref)
	dgst := digest.Digest(ref.Reference)
	if !pinned {
		desc, err := repo.Resolve(ctx, ref.Reference)
		if err != nil {
			// A load (have == "": nothing serving yet) while the registry
			// cannot be reached starts on the digest the tag last
			// resolved to, as a pinned reference starts from the cache; a
			// poll keeps what serves and reports the error.
			last, ok := c.lastTag(ref)
			if have != "" || !ok || parent.Err() != nil || !unreachable(err) {
				return Artifact{}, fmt.Errorf("oci: resolve %s: %w", s, err)
			}
			c.cfg.logger.Warn("oci: registry unreachable; using the digest the tag last resolved to",
				"ref", s, "digest", last.String(), "error", err.Error())
			desc.Digest = last
		}
		dgst = desc.Digest
		if dgst.Validate() != nil || dgst.Algorithm() != digest.SHA256 {
			// validated: the digest names a file in the cache
			return Artifact{}, fmt.Errorf("%w: %s resolved to %q, not a sha256 digest", ErrReference, s, dgst)
		}
		if err == nil {
			c.storeTag(ref, dgst)
			if resolved == nil || resolved(dgst.String()) {
				c.cfg.logger.Info("oci: tag resolved to digest", "ref", s, "digest", dgst.String())
			}
		}
	}
	a := Artifact{Digest: dgst.String()}
	a.Ref = ref.Registry + "/" + ref.Repository + "@" + a.Digest

	mb, err := c.manifest(ctx, repo, dgst)
	if err != nil {
		return Artifact{}, fmt.Errorf("oci: pull %s: %w", s, err)
	}
	layer, err := c.layerOf(mb)
	if err != nil {
		return Artifact{}, fmt.Errorf("oci: pull %s: %w", s, err)
	}
	a.SHA256, a.MediaType = layer.Digest.Encoded(), layer.MediaType
	if a.SHA256 == have {
		return a, nil
	}
	a.Wasm, err = c.blob(ctx, repo, layer)
	if err != nil {
		return Artifact{}, fmt.Errorf("oci: pull %s: %w", s, err)
	}
	return a, nil
}

func (c *Client) manifest(ctx context.Context, repo *remote.Repository, dgst digest.Digest) ([]byte, error) {
	max := c.cfg.limits.ManifestBytes
	if b, ok := c.cached(dgst, max); ok {
		return b, nil
	}
	desc, rc, err := repo.Manifests().FetchReference(ctx, dgst.String())
	if err != nil {
		if errors.Is(err, errdef.ErrSizeExceedsLimit) {
			return nil, fmt.Errorf("%w: manifest: %w", ErrTooLarge, err)
		}
		return nil, err
	}
	defer rc.Close()
	if desc.Size > max {
		return nil, fmt.Errorf("%w: manifest of %d bytes (limit %d)", ErrTooLarge, desc.Size, max)
	}
	b, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: manifest over %d bytes", ErrTooLarge, max)
	}
	if digest.FromBytes(b) != dgst {
		return nil, fmt.Errorf("%w: manifest is not %s", ErrDigest, dgst)
	}
	c.store(dgst, b)
	return b, nil
}

func (c *Client) layerOf(mb []byte) (ocispec.Descriptor, error) {
	var m ocispec.Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("%w: manifest: %w", ErrMediaType, err)
	}
	if !manifestTypes[m.MediaType] {
		return ocispec.Descriptor{}, fmt.Errorf("%w: manifest media type %q (want an image manifest)", ErrMediaType, m.MediaType)
	}
	if len(m.Layers) != 1 {
		return ocispec.Descriptor{}, fmt.Errorf("%w: %d layers (want one Wasm layer)", ErrMediaType, len(m.Layers))
	}
	l := m.Layers[0]
	if !layerTypes[l.MediaType] {
		return ocispec.Descriptor{}, fmt.Errorf("%w: layer media type %q (want %s)", ErrMediaType, l.MediaType, MediaType)
	}
	if l.Digest.Validate() != nil || l.Digest.Algorithm() != digest.SHA256 {
		return ocispec.Descriptor{}, fmt.Errorf("%w: layer digest %q is not sha256", ErrReference, l.Digest)
	}
	if l.Size < 0 || l.Size > c.cfg.limits.LayerBytes {
		return ocispec.Descriptor{}, fmt.Errorf("%w: layer of %d bytes (limit %d)", ErrTooLarge, l.Size, c.cfg.limits.LayerBytes)
	}
	return l, nil
}

func (c *Client) blob(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor) ([]byte, error) {
	if b, ok := c.cached(desc.Digest, desc.Size); ok && int64(len(b)) == desc.Size {
		return b, nil
	}
	rc, err := repo.Blobs().Fetch(ctx, desc)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	// ReadAll reads exactly desc.Size bytes (bounded by the layer limit
	// checked in layerOf) and verifies the digest.
	b, err := content.ReadAll(rc, desc)
	if err != nil {
		if errors.Is(err, content.ErrMismatchedDigest) || errors.Is(err, content.ErrTrailingData) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: layer %s: %w", ErrDigest, desc.Digest, err)
		}
		return nil, err
	}
	c.store(desc.Digest, b)
	return b, nil
}

// Load pulls ref and loads it on rt as plugin name, pinned to the layer's
// sha256 ([host.WithSHA256] after opts), so it goes through the same
// verification as a file.
func (c *Client) Load(ctx context.Context, rt *host.Runtime, name, ref string, opts ...host.LoadOption) (*host.Plugin, error) {
	a, err := c.Pull(ctx, ref)
	if err != nil {
		return nil, err
	}
	return rt.Load(ctx, name, a.Wasm, append(append([]host.LoadOption(nil), opts...), host.WithSHA256(a.SHA256))...)
}

// Source returns ref as a [host.Source] for [host.Registry.LoadSource] and
// [host.Registry.WatchSource]. Following a tag (a new digest behind it
// hot-swaps the plugin) needs [WithAllowTags]; each new digest is logged.
// A pinned reference is served from the cache once pulled, so a watch on
// it costs no network.
func (c *Client) Source(ref string) host.Source { return &source{c: c, ref: ref} }

type source struct {
	c    *Client
	ref  string
	mu   sync.Mutex
	last string
}

func (s *source) Fetch(ctx context.Context, have string) (string, []byte, error) {
	a, err := s.c.pull(ctx, s.ref, have, func(d string) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		changed := d != s.last
		s.last = d
		return changed
	})
	if err != nil {
		return "", nil, err
	}
	return a.SHA256, a.Wasm, nil
}

// Push uploads wasm as a plugin artifact under ref, which names a tag
// (registry/repository:tag), and returns it pinned by digest. The
// manifest is reproducible: the same module pushes to the same digest.
//
// # Errors
//
// [ErrReference] (no tag, or not a Wasm module), [ErrTooLarge], or the
// registry's error, wrapped.
func (c *Client) Push(ctx context.Context, ref string, wasm []byte) (Artifact, error) {
	r, pinned, err := parse(ref)
	if err != nil {
		return Artifact{}, err
	}
	if pinned {
		return Artifact{}, fmt.Errorf("%w %q: push to a tag; the digest is computed", ErrReference, ref)
	}
	if !bytes.HasPrefix(wasm, []byte("\x00asm")) {
		return Artifact{}, fmt.Errorf("%w: %s: not a Wasm module", ErrReference, ref)
	}
	if int64(len(wasm)) > c.cfg.limits.LayerBytes {
		return Artifact{}, fmt.Errorf("%w: module of %d bytes (limit %d)", ErrTooLarge, len(wasm), c.cfg.limits.LayerBytes)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.limits.Timeout)
	defer cancel()
	repo := c.repo(r)
	layer := content.NewDescriptorFromBytes(MediaType, wasm)
	if err := pushBlob(ctx, repo, layer, wasm); err != nil {
		return Artifact{}, fmt.Errorf("oci: push %s: layer: %w", ref, err)
	}
	empty := ocispec.DescriptorEmptyJSON
	if err := pushBlob(ctx, repo, empty, empty.Data); err != nil {
		return Artifact{}, fmt.Errorf("oci: push %s: config: %w", ref, err)
	}
	m := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactType,
		Config:       ocispec.Descriptor{MediaType: empty.MediaType, Digest: empty.Digest, Size: empty.Size},
		Layers:       []ocispec.Descriptor{layer},
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return Artifact{}, err
	}
	md := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, mb)
	if err := repo.PushReference(ctx, md, bytes.NewReader(mb), r.Reference); err != nil {
		return Artifact{}, fmt.Errorf("oci: push %s: manifest: %w", ref, err)
	}
	c.store(layer.Digest, wasm)
	c.store(md.Digest, mb)
	return Artifact{
		Ref:       r.Registry + "/" + r.Repository + "@" + md.Digest.String(),
		Digest:    md.Digest.String(),
		SHA256:    layer.Digest.Encoded(),
		MediaType: MediaType,
		Wasm:      wasm,
	}, nil
}

func pushBlob(ctx context.Context, repo *remote.Repository, d ocispec.Descriptor, b []byte) error {
	if ok, err := repo.Exists(ctx, d); err == nil && ok {
		return nil
	}
	return repo.Push(ctx, d, bytes.NewReader(b))
}
