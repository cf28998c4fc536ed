package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit/redistest"
	redisstate "github.com/retryhost/retryhost/state/redis"
)

func openHash(t *testing.T, srv *redistest.Server) *redisstate.VersionedHash {
	t.Helper()
	h, err := redisstate.OpenVersionedHash(srv.URL(), "set", 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.Close()) })
	return h
}

// readAll is h.ReadAll, its records in a map.
func readAll(ctx context.Context, h *redisstate.VersionedHash) (int64, map[string]string, string, error) {
	v, settings, flat, err := h.ReadAll(ctx)
	recs := map[string]string{}
	for i := 0; i+1 < len(flat); i += 2 {
		recs[flat[i]] = flat[i+1]
	}
	return v, recs, settings, err
}

// TestVersionedHashEditsMoveTheVersion: each edit and each settings write
// moves the version by one, and a read returns the records, the settings
// and the version together; an empty hash reads as version 0.
func TestVersionedHashEditsMoveTheVersion(t *testing.T) {
	srv := redistest.Start(t)
	h := openHash(t, srv)
	ctx := context.Background()
	v, recs, settings, err := readAll(ctx, h)
	require.NoError(t, err)
	require.Zero(t, v)
	require.Empty(t, recs)
	require.Empty(t, settings)

	applied, err := h.Edit(ctx, "a", func(old string, found bool) (string, error) {
		require.False(t, found)
		return "one", nil
	})
	require.NoError(t, err)
	require.True(t, applied)
	applied, err = h.Edit(ctx, "a", func(old string, found bool) (string, error) {
		require.True(t, found)
		return old + "+two", nil
	})
	require.NoError(t, err)
	require.True(t, applied)
	require.NoError(t, h.SetSettings(ctx, "s"))

	v, recs, settings, err = readAll(ctx, h)
	require.NoError(t, err)
	require.Equal(t, int64(3), v)
	require.Equal(t, map[string]string{"a": "one+two"}, recs)
	require.Equal(t, "s", settings)
	got, err := h.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, v, got)
	raw, err := srv.Query("HGET", "{set}records", "a")
	require.NoError(t, err)
	require.Equal(t, []string{"one+two"}, raw, "the layout is the documented one")
}

// TestVersionedHashEditLosesToAnotherWrite: an edit whose records another
// client writes between its read and its write writes nothing and says
// so; an edit whose fn fails writes nothing and returns fn's error.
func TestVersionedHashEditLosesToAnotherWrite(t *testing.T) {
	srv := redistest.Start(t)
	h := openHash(t, srv)
	ctx := context.Background()
	applied, err := h.Edit(ctx, "a", func(string, bool) (string, error) {
		_, err := srv.Do("HSET", "{set}records", "b", "theirs")
		require.NoError(t, err)
		return "mine", nil
	})
	require.NoError(t, err)
	require.False(t, applied)
	boom := errors.New("boom")
	applied, err = h.Edit(ctx, "a", func(string, bool) (string, error) { return "", boom })
	require.ErrorIs(t, err, boom)
	require.False(t, applied)
	v, recs, _, err := readAll(ctx, h)
	require.NoError(t, err)
	require.Zero(t, v)
	require.Equal(t, map[string]string{"b": "theirs"}, recs)
}

// TestVersionedHashVersionNotACounter: a version key that holds no
// integer is ErrNotCounter, from Version and from ReadAll.
func TestVersionedHashVersionNotACounter(t *testing.T) {
	srv := redistest.Start(t)
	h := openHash(t, srv)
	_, err := srv.Do("SET", "{set}version", "x")
	require.NoError(t, err)
	_, err = h.Version(context.Background())
	require.ErrorIs(t, err, redisstate.ErrNotCounter)
	_, _, _, err = readAll(context.Background(), h)
	require.ErrorIs(t, err, redisstate.ErrNotCounter)
}
