package vkey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisstate "github.com/retryhost/retryhost/state/redis"
)

// A key set on Redis is three keys, in one hash tag (one Redis Cluster
// slot, so that an edit is one transaction on every topology):
//
//	{retryhost:keys}records  a hash: key id → the key's JSON, as a key file holds it
//	{retryhost:keys}settings a string: the set's own fields, {"on_store_down": "refuse"}
//	{retryhost:keys}version  a counter, incremented by every edit
//
// A reader polls the version and reads the set again when it moved.
const (
	storeRecords  = "{retryhost:keys}records"
	storeSettings = "{retryhost:keys}settings"
	storeVersion  = "{retryhost:keys}version"
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

// Store is a key set kept on Redis and shared by a fleet: each key's
// record is the JSON a key file holds for it (the secret only as its
// SHA-256), checked as a key file is. Every edit is one transaction
// (WATCH, then MULTI/EXEC) that also increments the set's version, so
// that two edits at once both land, and a reader that polls [Store.Version]
// sees every one. A Store is safe for concurrent use.
type Store struct {
	c   goredis.UniversalClient
	own bool
}

// OpenStore connects to the Redis at url (the forms of state/redis's
// Open); Close closes the connection. It does not wait for the server.
func OpenStore(url string) (*Store, error) {
	c, err := redisstate.NewClient(url, StoreOpTimeout)
	if err != nil {
		return nil, err
	}
	return &Store{c: c, own: true}, nil
}

// NewStore returns a Store on c, which its caller keeps and closes.
func NewStore(c goredis.UniversalClient) *Store { return &Store{c: c} }

// Close closes the connection OpenStore made.
func (s *Store) Close() error {
	if s.own {
		return s.c.Close()
	}
	return nil
}

// Version returns the set's version: it moves with every edit (0 for a
// set never edited).
func (s *Store) Version(ctx context.Context) (int64, error) {
	v, err := s.c.Get(ctx, storeVersion).Int64()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	return v, err
}

// Load reads the set, with its version, in one transaction (a snapshot
// no edit is halfway through), and checks it as [Parse] checks a key
// file: a record that is not valid is a *FileError naming its key, with
// the version of the set that has it. The keys are in id order.
func (s *Store) Load(ctx context.Context) (*Set, int64, error) {
	f, v, err := s.Read(ctx)
	if err != nil {
		return nil, v, err
	}
	set, err := f.Set()
	return set, v, err
}

// Read reads the set like Load, without checking the keys beyond their
// records' JSON (for retryhost keys, which lists and edits them).
func (s *Store) Read(ctx context.Context) (*File, int64, error) {
	var ver *goredis.StringCmd
	var recs *goredis.MapStringStringCmd
	var settings *goredis.StringCmd
	_, err := s.c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		ver = p.Get(ctx, storeVersion)
		recs = p.HGetAll(ctx, storeRecords)
		settings = p.Get(ctx, storeSettings)
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, 0, err
	}
	var v int64
	if raw, err := ver.Result(); err == nil {
		if v, err = strconv.ParseInt(raw, 10, 64); err != nil {
			return nil, 0, &FileError{Index: -1, Msg: fmt.Sprintf("%s is %q, not a counter", storeVersion, raw)}
		}
	}
	f := &File{Keys: make([]*Key, 0, len(recs.Val()))}
	if raw, err := settings.Result(); err == nil {
		var st struct {
			OnStoreDown string `json:"on_store_down"`
		}
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			return nil, v, &FileError{Index: -1, Msg: fmt.Sprintf("%s: %v", storeSettings, err)}
		}
		f.OnStoreDown = st.OnStoreDown
	}
	ids := make([]string, 0, len(recs.Val()))
	total := 0
	for id, rec := range recs.Val() {
		ids = append(ids, id)
		total += len(id) + len(rec)
	}
	if total > MaxFileBytes {
		return nil, v, &FileError{Index: -1, Msg: fmt.Sprintf("%s: %d bytes of records, more than %d", storeRecords, total, MaxFileBytes)}
	}
	slices.Sort(ids)
	for i, id := range ids {
		k, err := decodeRecord(id, recs.Val()[id])
		if err != nil {
			return nil, v, &FileError{Index: i, ID: id, Msg: err.Error()}
		}
		f.Keys = append(f.Keys, k)
	}
	return f, v, nil
}

// decodeRecord reads the record of the key id.
func decodeRecord(id, rec string) (*Key, error) {
	if len(rec) > MaxRecordBytes {
		return nil, fmt.Errorf("a record of %d bytes, more than %d", len(rec), MaxRecordBytes)
	}
	var k Key
	if err := json.Unmarshal([]byte(rec), &k); err != nil {
		return nil, fmt.Errorf("record: %v", err)
	}
	if k.ID != id {
		return nil, fmt.Errorf("the record's id is %q", k.ID)
	}
	return &k, nil
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

// edit is Create's and Update's transaction: WATCH the records, read the
// one of id, MULTI, write it and increment the version, EXEC; an EXEC
// that another edit made fail is tried again.
func (s *Store) edit(ctx context.Context, id string, fn func(old *Key) (*Key, error)) (*Key, error) {
	if err := CheckID(id); err != nil {
		return nil, &FileError{Index: 0, ID: id, Msg: err.Error()}
	}
	var out *Key
	for range maxEditTries {
		err := s.c.Watch(ctx, func(tx *goredis.Tx) error {
			var old *Key
			rec, err := tx.HGet(ctx, storeRecords, id).Result()
			switch {
			case errors.Is(err, goredis.Nil):
			case err != nil:
				return err
			default:
				if old, err = decodeRecord(id, rec); err != nil {
					return &FileError{Index: 0, ID: id, Msg: err.Error()}
				}
			}
			k, err := fn(old)
			if err != nil {
				out = k
				return err
			}
			rec, err = encodeRecord(k)
			if err != nil {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
				p.HSet(ctx, storeRecords, id, rec)
				p.Incr(ctx, storeVersion)
				return nil
			})
			out = k
			return err
		}, storeRecords)
		var u errUnchanged
		switch {
		case errors.As(err, &u):
			return out, u.err
		case errors.Is(err, goredis.TxFailedErr):
			continue
		case err != nil:
			return nil, err
		}
		return out, nil
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
	_, err := s.c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Set(ctx, storeSettings, b, 0)
		p.Incr(ctx, storeVersion)
		return nil
	})
	return err
}
