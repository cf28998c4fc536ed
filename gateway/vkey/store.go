package vkey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	redisstate "github.com/retryhost/retryhost/state/redis"
)

// A key set on Redis is a state/redis VersionedHash named
// "retryhost:keys": three keys in one hash tag (one Redis Cluster slot, so
// that an edit is one transaction on every topology):
//
//	{retryhost:keys}records  a hash: key id → the key's JSON, as a key file holds it
//	{retryhost:keys}settings a string: the set's own fields, {"on_store_down": "refuse"}
//	{retryhost:keys}version  a counter, incremented by every edit
//
// A reader polls the version and reads the set again when it moved.
const (
	storeName     = "retryhost:keys"
	storeRecords  = "{retryhost:keys}records"
	storeSettings = "{retryhost:keys}settings"
)

// Limits on a key set on Redis (beside a key file's, which apply too).
const (
	// MaxRecordBytes bounds one key's record; the records together are
	// bounded by MaxFileBytes, as a key file is.
	MaxRecordBytes = 256 << 10
	// StoreOpTimeout bounds each of a Store's round trips to Redis.
	StoreOpTimeout = 5 * time.Second
	// maxEditTries bounds an edit's retries when other edits keep
	// changing the set under it.
	maxEditTries = 100
)

// Errors of a Store's edits.
var (
	// ErrExists is the error of a create whose id the set already has.
	ErrExists = errors.New("a key with this id exists")
	// ErrContended is the error of an edit that other edits kept
	// changing the set under, maxEditTries times.
	ErrContended = errors.New("the key set kept changing under the edit")
)

// Backend keeps a [Store]'s set: records by key id, a settings string
// and a version that every edit moves, each edit atomic.
// state/redis's VersionedHash is the one [OpenStore] uses.
type Backend interface {
	// Version returns the version (0 for a set never edited).
	Version(ctx context.Context) (int64, error)
	// ReadAll reads the version, the settings ("" when absent) and the
	// records as one snapshot: records holds each key id and its record,
	// one after the other, in no order. A version that is not a counter
	// is an error that wraps state/redis's ErrNotCounter.
	ReadAll(ctx context.Context) (version int64, settings string, records []string, err error)
	// Edit gives fn the record of field (found false when there is none)
	// and, unless fn returns an error (returned as it is), writes the
	// record fn returns and moves the version, atomically. applied is
	// false, with nothing written, when another edit changed the records
	// meanwhile.
	Edit(ctx context.Context, field string, fn func(old string, found bool) (string, error)) (applied bool, err error)
	// SetSettings sets the settings and moves the version, atomically.
	SetSettings(ctx context.Context, settings string) error
	Close() error
}

// Store is a key set kept on Redis and shared by a fleet: each key's
// record is the JSON a key file holds for it (the secret only as its
// SHA-256), checked as a key file is. Every edit is one transaction
// (WATCH, then MULTI/EXEC) that also increments the set's version, so
// that two edits at once both land, and a reader that polls [Store.Version]
// sees every one. A Store is safe for concurrent use.
type Store struct {
	b Backend
}

// OpenStore connects to the Redis at url (the forms of state/redis's
// Open); Close closes the connection. It does not wait for the server.
func OpenStore(url string) (*Store, error) {
	h, err := redisstate.OpenVersionedHash(url, storeName, StoreOpTimeout)
	if err != nil {
		return nil, err
	}
	return NewStore(h), nil
}

// NewStore returns a Store on b; Close closes b.
func NewStore(b Backend) *Store { return &Store{b: b} }

// Close closes the Store's backend.
func (s *Store) Close() error { return s.b.Close() }

// Version returns the set's version: it moves with every edit (0 for a
// set never edited).
func (s *Store) Version(ctx context.Context) (int64, error) { return s.b.Version(ctx) }

// Load reads the set, with its version, in one transaction (a snapshot
// no edit is halfway through), and checks it as [Parse] checks a key
// file: a record that is not valid is a *FileError naming its key, with
// the version of the set that has it. The keys are in id order.
func (s *Store) Load(ctx context.Context) (*Set, int64, error) {
	f, inMemory, v, err := s.read(ctx, true)
	if err != nil {
		return nil, v, err
	}
	set, err := f.set(inMemory)
	return set, v, err
}

// Read reads the set like Load, without checking the keys beyond their
// records' JSON (for retryhost keys, which lists and edits them).
func (s *Store) Read(ctx context.Context) (*File, int64, error) {
	f, _, v, err := s.read(ctx, false)
	return f, v, err
}

// read is Load's and Read's: the set in id order and, with check, each
// key checked, with the keys again in the order they are in memory (the
// order of the reply), for the set's maps.
func (s *Store) read(ctx context.Context, check bool) (f *File, inMemory []*Key, v int64, err error) {
	v, settings, flat, err := s.b.ReadAll(ctx)
	if errors.Is(err, redisstate.ErrNotCounter) {
		return nil, nil, 0, &FileError{Index: -1, Msg: err.Error()}
	}
	if err != nil {
		return nil, nil, 0, err
	}
	f = &File{}
	if settings != "" {
		var st struct {
			OnStoreDown string `json:"on_store_down"`
		}
		if err := json.Unmarshal([]byte(settings), &st); err != nil {
			return nil, nil, v, &FileError{Index: -1, Msg: fmt.Sprintf("%s: %v", storeSettings, err)}
		}
		f.OnStoreDown = st.OnStoreDown
	}
	n := len(flat) / 2
	total := 0
	for _, s := range flat {
		total += len(s)
	}
	if total > MaxFileBytes {
		return nil, nil, v, &FileError{Index: -1, Msg: fmt.Sprintf("%s: %d bytes of records, more than %d", storeRecords, total, MaxFileBytes)}
	}
	// The records are decoded (and checked) in the reply's order, the
	// order of their memory, which a large set reads several times faster
	// than in id order; their order by id is a permutation of it.
	inMemory, ok := decodeRecords(flat, check)
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return strings.Compare(flat[2*a], flat[2*b]) })
	f.Keys = make([]*Key, n)
	for j, i := range order {
		if f.Keys[j] = inMemory[i]; !ok && f.Keys[j] == nil { // the first mistake in id order
			id, rec := flat[2*i], flat[2*i+1]
			k, err := decodeRecord(id, rec)
			if err == nil {
				err = k.check()
			}
			return nil, nil, v, &FileError{Index: j, ID: id, Msg: err.Error()}
		}
	}
	return f, inMemory, v, nil
}

// decodeRecords decodes the records of flat (a key id, its record, …)
// and, with check, checks each key; a record that is not valid is a nil
// key, and ok false. Many records are decoded in chunks, one goroutine
// per CPU.
func decodeRecords(flat []string, check bool) (keys []*Key, ok bool) {
	keys = make([]*Key, len(flat)/2)
	decode := func(lo, hi int) bool {
		ok := true
		d := decoder{}
		for i := lo; i < hi; i++ {
			k, err := d.record(flat[2*i], flat[2*i+1])
			if err == nil && check {
				err = k.check()
			}
			if err != nil {
				k, ok = nil, false
			}
			keys[i] = k
		}
		return ok
	}
	n := runtime.GOMAXPROCS(0)
	if n < 2 || len(keys) < checkParallelMin {
		return keys, decode(0, len(keys))
	}
	oks := make([]bool, n)
	var wg sync.WaitGroup
	for j := range n {
		wg.Go(func() { oks[j] = decode(j*len(keys)/n, (j+1)*len(keys)/n) })
	}
	wg.Wait()
	return keys, !slices.Contains(oks, false)
}

// decodeRecord reads the record of the key id.
func decodeRecord(id, rec string) (*Key, error) {
	var d decoder
	d.slabSize = 1
	return d.record(id, rec)
}

// record reads the record of the key id as json.Unmarshal would, on the
// fast path when it can.
func (d *decoder) record(id, rec string) (*Key, error) {
	if len(rec) > MaxRecordBytes {
		return nil, fmt.Errorf("a record of %d bytes, more than %d", len(rec), MaxRecordBytes)
	}
	d.s, d.b, d.i = rec, bytesOf(rec), 0
	k, ok := d.key()
	if d.ws(); !ok || d.i != len(d.b) {
		k = &Key{}
		if err := json.Unmarshal([]byte(rec), k); err != nil {
			return nil, fmt.Errorf("record: %v", err)
		}
	}
	if k.ID != id {
		return nil, fmt.Errorf("the record's id is %q", k.ID)
	}
	return k, nil
}

// encodeRecord checks k as a key file's key and returns its record.
func encodeRecord(k *Key) (string, error) {
	if err := k.check(); err != nil {
		return "", &FileError{Index: 0, ID: k.ID, Msg: err.Error()}
	}
	b, err := json.Marshal(k)
	if err != nil {
		return "", err
	}
	if len(b) > MaxRecordBytes {
		return "", &FileError{Index: 0, ID: k.ID, Msg: fmt.Sprintf("a record of %d bytes, more than %d", len(b), MaxRecordBytes)}
	}
	return string(b), nil
}

// Create adds k (its Hash set), checked as a key file's key; a set that
// has a key with k's id already is ErrExists, and the set is left as it
// was.
func (s *Store) Create(ctx context.Context, k *Key) error {
	_, err := s.edit(ctx, k.ID, func(old *Key) (*Key, error) {
		if old != nil {
			return nil, fmt.Errorf("%w: %q", ErrExists, k.ID)
		}
		return k, nil
	})
	return err
}

// Update changes the key with id by edit, which is given a copy decoded
// from its record and returns whether it changed it (an error leaves the
// set as it was). A key the set does not have is ErrNoKey. The edit runs
// again, on the record as it is then, when another edit changed the set
// meanwhile; the key as stored is returned.
func (s *Store) Update(ctx context.Context, id string, edit func(k *Key) (changed bool, err error)) (*Key, error) {
	return s.edit(ctx, id, func(old *Key) (*Key, error) {
		if old == nil {
			return nil, fmt.Errorf("%w: %q", ErrNoKey, id)
		}
		changed, err := edit(old)
		if err != nil || !changed {
			return old, errUnchanged{err}
		}
		return old, nil
	})
}

// errUnchanged ends an edit that leaves the set as it is.
type errUnchanged struct{ err error }

func (e errUnchanged) Error() string { return "unchanged" }

// edit is Create's and Update's transaction: read the record of id, and
// write the one fn returns with the version moved, atomically; an edit
// that another edit got ahead of is tried again.
func (s *Store) edit(ctx context.Context, id string, fn func(old *Key) (*Key, error)) (*Key, error) {
	if err := CheckID(id); err != nil {
		return nil, &FileError{Index: 0, ID: id, Msg: err.Error()}
	}
	var out *Key
	for range maxEditTries {
		applied, err := s.b.Edit(ctx, id, func(rec string, found bool) (string, error) {
			var old *Key
			if found {
				var err error
				if old, err = decodeRecord(id, rec); err != nil {
					return "", &FileError{Index: 0, ID: id, Msg: err.Error()}
				}
			}
			k, err := fn(old)
			out = k
			if err != nil {
				return "", err
			}
			return encodeRecord(k)
		})
		var u errUnchanged
		switch {
		case errors.As(err, &u):
			return out, u.err
		case err != nil:
			return nil, err
		case applied:
			return out, nil
		}
	}
	return nil, fmt.Errorf("%w: %d tries", ErrContended, maxEditTries)
}

// SetOnStoreDown sets the set's on_store_down (StoreDownLocal or
// StoreDownRefuse) and increments its version.
func (s *Store) SetOnStoreDown(ctx context.Context, v string) error {
	if v != StoreDownLocal && v != StoreDownRefuse {
		return &FileError{Index: -1, Msg: fmt.Sprintf("on_store_down is %q: want %q or %q", v, StoreDownLocal, StoreDownRefuse)}
	}
	b, _ := json.Marshal(map[string]string{"on_store_down": v})
	return s.b.SetSettings(ctx, string(b))
}
