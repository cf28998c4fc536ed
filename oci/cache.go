package oci

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// The cache is content addressed: <dir>/sha256/<hex> holds the bytes whose
// sha256 is hex, manifests and layers alike. Entries are written to a
// temporary file in the same directory and renamed into place, so a reader
// in any process sees a whole entry or none, and two processes writing the
// same digest write the same bytes. Every read is verified against its
// digest; a damaged entry is ignored (and replaced by the next pull).
//
// The cache is bounded by Limits.CacheBytes: an entry's modification time
// is its last use (set on write and on every hit), and after a write the
// least recently used entries go until the rest fits. Replicas sharing the
// directory may remove each other's entries; that costs a pull, never a
// wrong module: an open entry stays readable, a missing one is pulled
// again.

// tmpMaxAge is how old a temporary file must be before a trim removes it:
// one a process left behind when it died mid-write. A live write takes
// well under it.
const tmpMaxAge = time.Hour

// path is only called with validated sha256 digests (64 hex digits), so
// it never leaves the cache directory.
func (c *Client) path(d digest.Digest) string {
	return filepath.Join(c.cfg.cacheDir, string(d.Algorithm()), d.Encoded())
}

// cached returns the verified entry for d, at most max bytes, and marks it
// used.
func (c *Client) cached(d digest.Digest, max int64) ([]byte, bool) {
	path := c.path(d)
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil || int64(len(b)) > max || digest.FromBytes(b) != d {
		if err == nil {
			c.cfg.logger.Warn("oci: cache entry damaged; pulling again", "digest", d.String())
		}
		return nil, false
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now) // best effort: a read-only cache still serves
	return b, true
}

// store writes b under d, then trims the cache; a failure is logged, not
// returned: the cache only saves a pull.
func (c *Client) store(d digest.Digest, b []byte) {
	if err := c.write(d, b); err != nil {
		c.cfg.logger.Warn("oci: cannot cache", "digest", d.String(), "error", err)
		return
	}
	c.trim(d)
}

func (c *Client) write(d digest.Digest, b []byte) error { return writeAtomic(c.path(d), b) }

// writeAtomic writes b to dst through a temporary file in its directory,
// renamed into place, so a reader in any process sees all of it or none.
func writeAtomic(dst string, b []byte) error {
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The file system's clock can be coarser than time.Now, which
		// marks a hit: stamp the write with the same clock.
		now := time.Now()
		err = os.Chtimes(tmp, now, now)
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// trim removes the least recently used entries until the cache fits
// Limits.CacheBytes, keeping keep (the entry just written), and
// temporary files older than tmpMaxAge.
func (c *Client) trim(keep digest.Digest) {
	dir := filepath.Join(c.cfg.cacheDir, string(digest.SHA256))
	des, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type entry struct {
		name string
		size int64
		used time.Time
	}
	var entries []entry
	var total int64
	for _, de := range des {
		fi, err := de.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue // removed by another replica meanwhile, or not ours
		}
		if strings.HasPrefix(de.Name(), ".tmp-") {
			if time.Since(fi.ModTime()) > tmpMaxAge {
				_ = os.Remove(filepath.Join(dir, de.Name()))
			}
			continue
		}
		total += fi.Size()
		if de.Name() != keep.Encoded() {
			entries = append(entries, entry{de.Name(), fi.Size(), fi.ModTime()})
		}
	}
	if total <= c.cfg.limits.CacheBytes {
		return
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if c := a.used.Compare(b.used); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	for _, e := range entries {
		if total <= c.cfg.limits.CacheBytes {
			break
		}
		if err := os.Remove(filepath.Join(dir, e.name)); err == nil || errors.Is(err, fs.ErrNotExist) {
			total -= e.size
		}
	}
	c.cfg.logger.Debug("oci: cache trimmed", "bytes", total, "limit", c.cfg.limits.CacheBytes)
}

// Tags: <dir>/tags/<sha256 of registry/repository:tag> holds the digest the
// tag last resolved to, written as entries are (temporary file, rename).
// It is what a load uses when the registry cannot be reached; it is
// trusted as the cache directory is, and only names content that is
// itself verified against that digest when read.

func (c *Client) tagPath(ref registry.Reference) string {
	key := digest.FromString(ref.Registry + "/" + ref.Repository + ":" + ref.Reference)
	return filepath.Join(c.cfg.cacheDir, "tags", key.Encoded())
}

// lastTag returns the digest ref's tag last resolved to, if recorded.
func (c *Client) lastTag(ref registry.Reference) (digest.Digest, bool) {
	b, err := os.ReadFile(c.tagPath(ref))
	if err != nil {
		return "", false
	}
	d := digest.Digest(strings.TrimSpace(string(b)))
	if d.Validate() != nil || d.Algorithm() != digest.SHA256 {
		return "", false
	}
	return d, true
}

// storeTag records what ref's tag resolved to; a failure is logged only.
func (c *Client) storeTag(ref registry.Reference, d digest.Digest) {
	if last, ok := c.lastTag(ref); ok && last == d {
		return
	}
	if err := writeAtomic(c.tagPath(ref), []byte(d.String()+"\n")); err != nil {
		c.cfg.logger.Warn("oci: cannot record the tag's digest", "tag", ref.Reference, "error", err)
	}
}

// unreachable tells a registry that could not answer (no connection, a
// reset, a timeout, a 5xx) from one that answered no (a 4xx: the tag is
// gone, the credentials are missing or refused), which must not fall back.
func unreachable(err error) bool {
	var er *errcode.ErrorResponse
	if errors.As(err, &er) {
		return er.StatusCode >= 500
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}
