package oci

import (
	"io"
	"os"
	"path/filepath"

	"github.com/opencontainers/go-digest"
)

// The cache is content addressed: <dir>/sha256/<hex> holds the bytes whose
// sha256 is hex, manifests and layers alike. Entries are written to a
// temporary file in the same directory and renamed into place, so a reader
// in any process sees a whole entry or none, and two processes writing the
// same digest write the same bytes. Every read is verified against its
// digest; a damaged entry is ignored (and replaced by the next pull).

// path is only called with validated sha256 digests (64 hex digits), so
// it never leaves the cache directory.
func (c *Client) path(d digest.Digest) string {
	return filepath.Join(c.cfg.cacheDir, string(d.Algorithm()), d.Encoded())
}

// cached returns the verified entry for d, at most max bytes.
func (c *Client) cached(d digest.Digest, max int64) ([]byte, bool) {
	f, err := os.Open(c.path(d))
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
	return b, true
}

// store writes b under d; a failure is logged, not returned: the cache
// only saves a pull.
func (c *Client) store(d digest.Digest, b []byte) {
	if err := c.write(d, b); err != nil {
		c.cfg.logger.Warn("oci: cannot cache", "digest", d.String(), "error", err)
	}
}

func (c *Client) write(d digest.Digest, b []byte) error {
	dst := c.path(d)
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
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}
