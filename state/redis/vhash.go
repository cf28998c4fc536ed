package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// VersionedHash is a hash of records that a fleet shares and edits, with
// a version that every edit increments, so that a reader polls one
// counter and reads the records again only when it moved. It knows
// nothing of what the records say: the gateway's key set on Redis
// (gateway/vkey's Store) builds on it. It is three keys in one hash tag
// (one Redis Cluster slot, so that an edit is one transaction on every
// topology):
//
//	{name}records   a hash: field → record
//	{name}settings  a string: the set's own value ("" when absent)
//	{name}version   a counter, incremented by every edit
//
// A VersionedHash is safe for concurrent use.
type VersionedHash struct {
	c                          goredis.UniversalClient
	records, settings, version string
}

// ErrNotCounter is the error of a version key that holds no integer.
var ErrNotCounter = errors.New("redis: the version is not a counter")

// OpenVersionedHash connects to the Redis at url (see [Open] for its
// forms) and returns the versioned hash whose keys are name in braces
// followed by "records", "settings" and "version". Every round trip
// (each dial, read, write and wait for a pooled connection) is bounded by
// op, and none is retried. The connection speaks RESP2, whose HGETALL
// reply is a list that the client reads without building a map. Close closes the connection. It does not wait
// for the server.
func OpenVersionedHash(url, name string, op time.Duration) (*VersionedHash, error) {
	t, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	tag := "{" + name + "}"
	return &VersionedHash{c: t.resp2().client(op), records: tag + "records", settings: tag + "settings", version: tag + "version"}, nil
}

// Close closes the connection.
func (h *VersionedHash) Close() error { return h.c.Close() }

// Version returns the version: it moves with every edit (0 for a hash
// never edited).
func (h *VersionedHash) Version(ctx context.Context) (int64, error) {
	raw, err := h.c.Get(ctx, h.version).Result()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return h.parseVersion(raw)
}

func (h *VersionedHash) parseVersion(raw string) (int64, error) {
	v, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s is %q", ErrNotCounter, h.version, raw)
	}
	return v, nil
}

// ReadAll reads the version, the settings and the records in one
// transaction (MULTI/EXEC: a snapshot no edit is halfway through; one
// round trip). records holds each field and its record, one after the
// other, in no order.
func (h *VersionedHash) ReadAll(ctx context.Context) (version int64, settings string, records []string, err error) {
	var ver, set *goredis.StringCmd
	var recs *goredis.Cmd
	_, err = h.c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		ver = p.Get(ctx, h.version)
		set = p.Get(ctx, h.settings)
		recs = p.Do(ctx, "HGETALL", h.records) // RESP2: field, record, field, record … (no map built)
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return 0, "", nil, err
	}
	flat, err := recs.Slice()
	if err != nil || len(flat)%2 != 0 {
		return 0, "", nil, fmt.Errorf("redis: unexpected reply to HGETALL %s: %v", h.records, err)
	}
	if raw, err := ver.Result(); err == nil {
		if version, err = h.parseVersion(raw); err != nil {
			return 0, "", nil, err
		}
	}
	records = make([]string, len(flat))
	for i, v := range flat {
		records[i], _ = v.(string)
	}
	return version, set.Val(), records, nil
}

// Edit changes the record of field in a transaction: it WATCHes the
// records, reads field's record (found false when there is none) and
// gives it to fn, and then, unless fn returns an error (returned as it
// is), writes fn's record and increments the version in MULTI/EXEC.
// applied is false, with nothing written, when another edit changed the
// records between the read and the write: the caller may try again.
func (h *VersionedHash) Edit(ctx context.Context, field string, fn func(old string, found bool) (string, error)) (applied bool, err error) {
	err = h.c.Watch(ctx, func(tx *goredis.Tx) error {
		old, err := tx.HGet(ctx, h.records, field).Result()
		found := err == nil
		if err != nil && !errors.Is(err, goredis.Nil) {
			return err
		}
		rec, err := fn(old, found)
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.HSet(ctx, h.records, field, rec)
			p.Incr(ctx, h.version)
			return nil
		})
		return err
	}, h.records)
	if errors.Is(err, goredis.TxFailedErr) {
		return false, nil
	}
	return err == nil, err
}

// SetSettings sets the settings and increments the version, in one
// transaction.
func (h *VersionedHash) SetSettings(ctx context.Context, settings string) error {
	_, err := h.c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Set(ctx, h.settings, settings, 0)
		p.Incr(ctx, h.version)
		return nil
	})
	return err
}
