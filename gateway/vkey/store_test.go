package vkey

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit/redistest"
)

func store(t *testing.T, srv *redistest.Server) *Store {
	t.Helper()
	s, err := OpenStore(srv.URL())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// TestStoreEditsAndLoadsAKeySet: a key created, updated and read back
// through the set on Redis, each edit moving the version; a secret is
// found by its hash; a second key with one id is refused.
func TestStoreEditsAndLoadsAKeySet(t *testing.T) {
	srv := redistest.Start(t)
	s := store(t, srv)
	ctx := context.Background()
	v0, err := s.Version(ctx)
	require.NoError(t, err)
	require.Zero(t, v0)
	secret, hash := NewSecret()
	require.NoError(t, s.Create(ctx, &Key{ID: "team-a", Hash: hash, RPM: 60, Metadata: map[string]string{"team": "a"}}))
	_, other := NewSecret()
	require.ErrorIs(t, s.Create(ctx, &Key{ID: "team-a", Hash: other}), ErrExists)

	set, v1, err := s.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), v1)
	k, ok := set.Lookup(secret)
	require.True(t, ok)
	require.Equal(t, "team-a", k.ID)
	require.Equal(t, "a", k.Metadata["team"])
	require.Equal(t, StoreDownLocal, set.OnStoreDown)

	k, err = s.Update(ctx, "team-a", func(k *Key) (bool, error) { k.Revoked = true; return true, nil })
	require.NoError(t, err)
	require.True(t, k.Revoked)
	_, err = s.Update(ctx, "nobody", func(k *Key) (bool, error) { return true, nil })
	require.ErrorIs(t, err, ErrNoKey)
	require.NoError(t, s.SetOnStoreDown(ctx, StoreDownRefuse))
	set, v3, err := s.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), v3)
	require.Equal(t, StoreDownRefuse, set.OnStoreDown)
	k, _ = set.ByID("team-a")
	require.True(t, k.Revoked)
}

// TestStoreConcurrentEditsAllLand: edits from many clients at once, to
// different keys and to one, all land: no edit is lost to another.
func TestStoreConcurrentEditsAllLand(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, 2*n)
	for i := range n {
		wg.Go(func() {
			_, hash := NewSecret()
			errs[i] = store(t, srv).Create(ctx, &Key{ID: fmt.Sprintf("k%d", i), Hash: hash})
		})
	}
	wg.Wait()
	s := store(t, srv)
	_, hash := NewSecret()
	require.NoError(t, s.Create(ctx, &Key{ID: "shared", Hash: hash}))
	for i := range n {
		wg.Go(func() {
			_, errs[n+i] = store(t, srv).Update(ctx, "shared", func(k *Key) (bool, error) {
				if k.Metadata == nil {
					k.Metadata = map[string]string{}
				}
				k.Metadata[fmt.Sprint("m", i)] = "x"
				return true, nil
			})
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	set, v, err := s.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, n+1, set.Len())
	require.Equal(t, int64(2*n+1), v)
	k, _ := set.ByID("shared")
	require.Len(t, k.Metadata, n)
}

// TestStoreRefusesABadRecordNamingItsKey: a record that is not JSON, is
// over MaxRecordBytes, names another id or breaks a key file's rule is a
// *FileError naming its key, at load; an edit is checked the same way.
func TestStoreRefusesABadRecordNamingItsKey(t *testing.T) {
	srv := redistest.Start(t)
	s := store(t, srv)
	ctx := context.Background()
	_, hash := NewSecret()
	for _, tc := range []struct{ name, rec, want string }{
		{"not JSON", "{", "record:"},
		{"another id", fmt.Sprintf(`{"id":"other","hash":%q}`, hash), `the record's id is "other"`},
		{"negative rpm", fmt.Sprintf(`{"id":"bad","hash":%q,"rpm":-1}`, hash), "must not be negative"},
		{"over the record limit", fmt.Sprintf(`{"id":"bad","hash":%q,"metadata":{"a":%q}}`, hash, strings.Repeat("x", MaxRecordBytes)), "more than 262144"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := srv.Do("HSET", storeRecords, "bad", tc.rec)
			require.NoError(t, err)
			_, _, err = s.Load(ctx)
			var fe *FileError
			require.ErrorAs(t, err, &fe)
			require.ErrorIs(t, err, ErrKeyFile)
			require.Equal(t, "bad", fe.ID)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := srv.Do("DEL", storeRecords)
	require.NoError(t, err)
	var fe *FileError
	err = s.Create(ctx, &Key{ID: "big", Hash: hash, Routes: []string{strings.Repeat("r", MaxRecordBytes)}})
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "big", fe.ID)
	err = s.Create(ctx, &Key{ID: "neg", Hash: hash, TPM: -5})
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "neg", fe.ID)
	set, _, err := s.Load(ctx)
	require.NoError(t, err)
	require.Zero(t, set.Len(), "a refused edit writes nothing")
}

// TestStoreDownIsAnError: a Store whose Redis does not answer says so.
func TestStoreDownIsAnError(t *testing.T) {
	srv := redistest.Start(t)
	s := store(t, srv)
	srv.Kill()
	_, _, err := s.Load(context.Background())
	require.Error(t, err)
	_, hash := NewSecret()
	require.Error(t, s.Create(context.Background(), &Key{ID: "a", Hash: hash}))
}

// TestStoreLoadOfManyKeysNamesTheFirstMistake: a set on Redis large
// enough to be decoded and checked in parallel, in the reply's order, is
// in id order, and its error is the first mistake in id order, whichever
// its kind: a record that is not JSON, a key that breaks a rule, a hash
// two keys share.
func TestStoreLoadOfManyKeysNamesTheFirstMistake(t *testing.T) {
	srv := redistest.Start(t)
	const n = 3 * checkParallelMin
	fillStore(t, srv, n)
	s := store(t, srv)
	ctx := context.Background()
	set, _, err := s.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, n, set.Len())
	ids := make([]string, n)
	for i, k := range set.Keys() {
		ids[i] = k.ID
	}
	require.True(t, slices.IsSorted(ids), "the keys are in id order")
	k, ok := set.Lookup("secret-777")
	require.True(t, ok)
	require.Equal(t, "key-777", k.ID)

	index := func(id string) int { i, _ := slices.BinarySearch(ids, id); return i }
	rec := func(id, hash, extra string) string {
		return fmt.Sprintf(`{"id":%q,"hash":%q%s}`, id, hash, extra)
	}
	for _, tc := range []struct {
		name string
		set  map[string]string // id → record
		id   string            // the key the error names
		msg  string
	}{
		{"a rule broken before a record not JSON", map[string]string{"key-9000": "{", "key-5000": rec("key-5000", Hash("x"), `,"rpm":-1`)},
			"key-5000", "must not be negative"},
		{"a record not JSON before a rule broken", map[string]string{"key-5000": "{", "key-9000": rec("key-9000", Hash("x"), `,"rpm":-1`)},
			"key-5000", "record:"},
		{"a hash two keys share", map[string]string{"key-7000": rec("key-7000", Hash("secret-3"), "")},
			"key-7000", `the same hash as "key-3"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for id, r := range tc.set {
				_, err := srv.Do("HSET", storeRecords, id, r)
				require.NoError(t, err)
			}
			_, _, err := s.Load(ctx)
			var fe *FileError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.id, fe.ID)
			require.Equal(t, index(tc.id), fe.Index)
			require.Contains(t, fe.Msg, tc.msg)
			for id := range tc.set { // as it was
				i, _ := strconv.Atoi(strings.TrimPrefix(id, "key-"))
				_, err := srv.Do("HSET", storeRecords, id, rec(id, Hash(fmt.Sprint("secret-", i)), ""))
				require.NoError(t, err)
			}
		})
	}
	set, _, err = s.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, n, set.Len())
}
