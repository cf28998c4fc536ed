package host

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// rssBytes is the process's resident set size (Linux; 0 elsewhere).
func rssBytes() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestHostile_V12_IsolatedAndBounded: one hostile fixture per class ABI
// v1.2 bounds (REPLACE amplification per call and per stream, framing
// injection, a buffer over the cap, hold caps beyond the operator's, an
// error record claiming a provider's class, streams beyond the declared
// capacity, random verdicts, a crash loop), each run next to 100
// concurrent streams through a well-behaved plugin in the same runtime:
// the hostile ones get their specified outcome, the well-behaved streams
// stay byte-identical to a run without them, and the process's resident
// memory grows by no more than the documented limits allow (2 instances
// of at most 32 MiB for each plugin, plus the per-stream caps).
func TestHostile_V12_IsolatedAndBounded(t *testing.T) {
	ctx := context.Background()
	var logs logBuffer
	opts := []Option{WithCallTimeout(time.Second), WithMemoryLimit(32 << 20), WithLogger(logs.logger()), WithBreaker(3, time.Hour)}

	base := newRuntime(t, opts...)
	good, err := base.Load(ctx, "upper", fixture(t, "upper"))
	require.NoError(t, err)
	want := runGood(t, good, 100)

	type hostile struct {
		name, fixture string
		config        []byte
		fail          abi.FailPolicy
		check         func(t *testing.T, p *Plugin, in []abi.Part, r result)
	}
	failedWith := func(kind error) func(*testing.T, *Plugin, []abi.Part, result) {
		return func(t *testing.T, _ *Plugin, _ []abi.Part, r result) { require.ErrorIs(t, r.fail, kind) }
	}
	cases := []hostile{
		{"replace per call", "replacebomb", u32s(65535, uint32(abi.KindTextDelta)), abi.FailClosed, failedWith(ErrLimit)},
		{"replace per stream", "replacebomb", u32s(1000, uint32(abi.KindTextDelta)), abi.FailClosed, failedWith(ErrLimit)},
		{"replace injects stream-start", "replacebomb", u32s(1, uint32(abi.KindStreamStart)), abi.FailOpen, func(t *testing.T, _ *Plugin, in []abi.Part, r result) {
			require.ErrorIs(t, r.fail, ErrABIViolation)
			require.Equal(t, render(in), render(r.out), "fail-open: untouched, one stream-start")
		}},
		{"hold caps beyond the operator's", "holdall", nil, abi.FailOpen, func(t *testing.T, p *Plugin, _ []abi.Part, r result) {
			require.NoError(t, r.fail)
			require.Equal(t, 256, p.Policy().MaxHeldParts)
			require.Equal(t, 10*time.Second, p.Policy().MaxHoldTime)
		}},
		{"error claiming auth", "errclass", nil, abi.FailOpen, func(t *testing.T, _ *Plugin, _ []abi.Part, r result) {
			require.NoError(t, r.fail)
			var te *abi.TransformError
			require.ErrorAs(t, r.err, &te)
			require.Equal(t, abi.ClassTransform, te.Class)
		}},
		{"random verdicts", "randverdict", nil, abi.FailOpen, func(t *testing.T, _ *Plugin, _ []abi.Part, r result) {
			n := 0
			for _, p := range r.out {
				if p.Kind == abi.KindStreamStart {
					n++
				}
			}
			require.LessOrEqual(t, n, 1)
		}},
	}
	runtime.GC()
	before := rssBytes()

	rt := newRuntime(t, opts...)
	good, err = rt.Load(ctx, "upper", fixture(t, "upper"))
	require.NoError(t, err)
	plugins := make([]*Plugin, len(cases))
	for i, c := range cases {
		lo := []LoadOption{WithConfig(c.config), WithInstances(2)}
		if c.fixture != "holdall" { // its own declaration is under test
			lo = append(lo, WithPolicy(abi.TransformPolicy{Fail: c.fail}))
		}
		plugins[i], err = rt.Load(ctx, c.fixture, fixture(t, c.fixture), lo...)
		require.NoError(t, err, c.name)
	}
	// The ones that fail at load or per call, next to the streams too.
	capPlugin, err := rt.Load(ctx, "capacity", fixture(t, "capacity"), WithConfig([]byte{1}), WithInstances(1))
	require.NoError(t, err)
	crash, err := rt.Load(ctx, "flaky", fixture(t, "flaky"))
	require.NoError(t, err)

	results := make([]result, len(cases))
	var got []string
	var loadErr error
	var capErrs, crashErrs []error
	var wg sync.WaitGroup
	for i := range cases {
		wg.Go(func() { results[i] = run(ctx, plugins[i], 2000+uint64(i), textStream(streamText(i)...)) })
	}
	wg.Go(func() { _, loadErr = rt.Load(ctx, "bigbuffer", fixture(t, "bigbuffer")) })
	wg.Go(func() {
		var sts []abi.StreamTransform
		for i := range 5 {
			st, err := capPlugin.Open(ctx, abi.StreamInfo{ID: uint64(i)})
			capErrs = append(capErrs, err)
			if err == nil {
				sts = append(sts, st)
			}
		}
		for _, st := range sts {
			st.Close()
		}
	})
	wg.Go(func() {
		for range 10 {
			_, err := crash.Decide(ctx, &abi.Attempt{Number: 100})
			crashErrs = append(crashErrs, err)
		}
	})
	wg.Go(func() { got = runGood(t, good, 100) })
	wg.Wait()

	require.Equal(t, want, got, "well-behaved streams must be byte-identical with hostile plugins around")
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.check(t, plugins[i], textStream(streamText(i)...), results[i]) })
	}
	require.ErrorIs(t, loadErr, ErrNoBuffer, "a buffer over the cap fails the load")
	require.Equal(t, []error{nil, nil}, capErrs[:2])
	for _, err := range capErrs[2:] {
		require.ErrorIs(t, err, ErrNoCapacity, "beyond the declared capacity")
	}
	require.ErrorIs(t, crashErrs[0], ErrTrap)
	require.ErrorIs(t, crashErrs[len(crashErrs)-1], ErrDisabled, "the crash loop is disabled")

	runtime.GC()
	after := rssBytes()
	if before > 0 {
		grew := int64(after) - int64(before)
		t.Logf("RSS %d MiB before, %d MiB after (%+d MiB)", before>>20, after>>20, grew>>20)
		// 9 plugins × 2 instances × 32 MiB of linear memory is the bound
		// the limits give; what the fixtures use is far less.
		require.Less(t, grew, int64(9*2*32<<20), "host memory stays within the documented limits")
	}
}
