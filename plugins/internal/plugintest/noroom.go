package plugintest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/host"
)

// CheckNoRoom checks a transform with room for rooms open streams per
// instance that refuses another with OpenNoRoom (ABI.md §6.3), through the
// product host: load it with LoadNoRoom. The refused streams fail with
// host.ErrNoCapacity and not host.ErrPluginFailed, the plugin is never
// disabled (its breaker trips on one failure), and a closed stream frees
// its room. Both of the guest's doors are used: retryhost_open_part (the
// host's lazy open, when the first part is sent) and retryhost_open (a
// stream ended before its first part is opened first).
func CheckNoRoom(t *testing.T, p *host.Plugin, rooms int) {
	t.Helper()
	ctx := context.Background()
	part := abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: "abc"}
	var open []abi.StreamTransform
	t.Cleanup(func() { // before the runtime's close, which waits for open streams
		for _, st := range open {
			st.Close()
		}
	})
	for i := range rooms {
		st, err := p.Open(ctx, abi.StreamInfo{ID: uint64(i + 1), Model: "a/b"})
		if err == nil {
			_, err = st.Part(ctx, &part)
		}
		if err != nil {
			t.Fatalf("stream %d of %d: %v", i+1, rooms, err)
		}
		open = append(open, st)
	}
	refused := func(viaEnd bool) error {
		st, err := p.Open(ctx, abi.StreamInfo{ID: 99, Model: "a/b"})
		if err != nil {
			return err
		}
		defer st.Close()
		if viaEnd {
			_, err = st.End(ctx)
		} else {
			_, err = st.Part(ctx, &part)
		}
		return err
	}
	for i := range 6 {
		err := refused(i%2 == 1)
		if !errors.Is(err, host.ErrNoCapacity) || errors.Is(err, host.ErrPluginFailed) {
			t.Fatalf("refusal %d (by %s): got %v, want host.ErrNoCapacity and no plugin failure", i, map[bool]string{false: "open_part", true: "open"}[i%2 == 1], err)
		}
	}
	open[0].Close()
	open = open[1:]
	st, err := p.Open(ctx, abi.StreamInfo{ID: 100, Model: "a/b"})
	if err == nil {
		_, err = st.Part(ctx, &part)
		st.Close()
	}
	if err != nil {
		t.Fatalf("after a close there is room again, and the plugin was never disabled: %v", err)
	}
}

// LoadNoRoom loads a transform for CheckNoRoom: one instance, under a
// breaker that trips on the first failure of the plugin.
func LoadNoRoom(t *testing.T, name string, wasm, config []byte) *host.Plugin {
	t.Helper()
	rt := Runtime(t, host.WithBreaker(1, time.Hour))
	p, err := rt.Load(context.Background(), name, wasm, host.WithInstances(1), host.WithConfig(config))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
