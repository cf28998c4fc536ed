package host

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeSource serves whatever module it is set to, and counts downloads.
type fakeSource struct {
	mu        sync.Mutex
	sum       string
	wasm      []byte
	err       error
	downloads int
}

func (s *fakeSource) set(sum string, wasm []byte, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sum, s.wasm, s.err = sum, wasm, err
}

func (s *fakeSource) Fetch(_ context.Context, have string) (string, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return "", nil, s.err
	}
	if s.sum == have {
		return have, nil, nil
	}
	s.downloads++
	return s.sum, s.wasm, nil
}

func (s *fakeSource) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downloads
}

func TestRegistry_LoadSource(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t)
	reg := NewRegistry(rt)
	defer func() { require.NoError(t, reg.Close(ctx)) }()
	upper, refusal := fixture(t, "upper"), fixture(t, "refusal")
	src := &fakeSource{}
	src.set(sha(upper), upper, nil)

	n, err := reg.LoadSource(ctx, "xf", src)
	require.NoError(t, err)
	require.Equal(t, sha(upper), n.Version())
	n2, err := reg.LoadSource(ctx, "xf", src)
	require.NoError(t, err)
	require.Same(t, n, n2)
	require.Equal(t, 1, src.count(), "an unchanged version is not downloaded again")

	src.set(sha(upper), refusal, nil) // a source whose bytes do not match its sum
	src.downloads = 0
	_, err = reg.LoadSource(ctx, "other", src)
	require.ErrorIs(t, err, ErrChecksum, "the source's sha256 pins the load")

	src.set("", nil, errors.New("registry down"))
	_, err = reg.LoadSource(ctx, "xf", src)
	require.ErrorContains(t, err, "registry down")
	require.Equal(t, sha(upper), n.Version(), "the old version keeps serving")
}

func TestRegistry_WatchSource(t *testing.T) {
	ctx := context.Background()
	var logs logBuffer
	rt := newRuntime(t, WithLogger(logs.logger()))
	reg := NewRegistry(rt)
	defer func() { require.NoError(t, reg.Close(ctx)) }()
	upper, refusal := fixture(t, "upper"), fixture(t, "refusal")
	src := &fakeSource{}
	src.set(sha(upper), upper, nil)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- reg.WatchSource(wctx, "xf", src, time.Millisecond) }()
	waitFor(t, func() bool { n, ok := reg.Get("xf"); return ok && n.Version() == sha(upper) }, "the first version")
	n, _ := reg.Get("xf")

	src.set(sha(refusal), []byte("broken"), nil)
	waitFor(t, func() bool { return strings.Contains(logs.String(), "plugin source failed") }, "the failure to be logged")
	time.Sleep(20 * time.Millisecond) // many polls of the same broken version
	require.Equal(t, sha(upper), n.Version(), "a broken version leaves the old one serving")
	require.Equal(t, 1, strings.Count(logs.String(), "plugin source failed"), "the same failure is logged once")

	wrong := fixture(t, "wrongabi") // its sha256 is right, but it does not load
	src.set(sha(wrong), wrong, nil)
	before := src.count()
	waitFor(t, func() bool { return strings.Count(logs.String(), "plugin source failed") == 2 }, "the second failure to be logged")
	time.Sleep(20 * time.Millisecond) // many polls of the same broken version
	require.Equal(t, sha(upper), n.Version())
	require.Equal(t, before+1, src.count(), "a version that failed to load is not downloaded (nor loaded) again")
	require.Equal(t, 2, strings.Count(logs.String(), "plugin source failed"), "each failure is logged once")

	src.set(sha(refusal), refusal, nil)
	waitFor(t, func() bool { return n.Version() == sha(refusal) }, "the new version")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}
