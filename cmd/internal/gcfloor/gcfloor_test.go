package gcfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name              string
		live, roots       uint64
		floor             uint64
		base, wantPercent int
	}{
		{"a small heap grows to the floor", 8 * mib, 0, 64 * mib, 100, 700},
		{"the roots are scaled too", 8 * mib, 8 * mib, 64 * mib, 100, 350},
		{"under 4 MiB Go's minimum heap, scaled, is the floor", 2 * mib, 0, 64 * mib, 100, 1600},
		{"a heap whose goal reaches the floor keeps GOGC", 32 * mib, 0, 64 * mib, 100, 100},
		{"a heap over the floor keeps GOGC", 500 * mib, 1 * mib, 64 * mib, 100, 100},
		{"GOGC is the proportion above the floor", 20 * mib, 0, 64 * mib, 400, 400},
		{"GOGC below 100", 10 * mib, 0, 64 * mib, 50, 540},
		{"an uneven ratio rounds down", 6 * mib, 0, 64 * mib, 100, 966},
		{"no live heap measured yet: GOGC until the first collection", 0, 1 * mib, 64 * mib, 100, 100},
		{"a tiny heap: Go's minimum heap, scaled, is the floor", 200 << 10, 200 << 10, 64 * mib, 100, 1600},
		{"a floor under Go's minimum", 1 * mib, 0, 2 * mib, 100, 100},
		{"a floor no heap reaches does not overflow", 8 * mib, 0, math.MaxUint64, 100, math.MaxInt32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := percent(tc.live, tc.roots, tc.floor, tc.base)
			require.Equal(t, tc.wantPercent, p)
			if tc.live > 0 && p < math.MaxInt32 { // a capped percentage falls short of the floor
				goal := func(p int) uint64 {
					return max(tc.live+(tc.live+tc.roots)*uint64(p)/100, heapMinimum*uint64(p)/100)
				}
				require.InDelta(t, max(tc.floor, goal(tc.base)), goal(p), float64(tc.live+tc.roots)/50, "the goal is the floor or GOGC's")
			}
		})
	}
}

var sink []byte

// garbage allocates n bytes that nothing keeps, and returns how many
// collections ran meanwhile.
func garbage(n int) uint32 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < n>>12; i++ {
		sink = make([]byte, 4<<10)
	}
	sink = nil
	runtime.ReadMemStats(&after)
	return after.NumGC - before.NumGC
}

func TestFloorHoldsOffCollectionsUntilStop(t *testing.T) {
	runtime.GC()
	f := Start(64 << 20)
	require.NotNil(t, f)
	t.Cleanup(f.Stop)
	require.InDelta(t, 64<<20, heapGoal(), 1<<20, "the goal is the floor")
	require.Nil(t, Start(1<<30), "one floor at a time")
	require.Zero(t, garbage(32<<20), "32 MiB of garbage under a 64 MiB floor starts no collection")
	require.GreaterOrEqual(t, garbage(512<<20), uint32(4), "a floor is not a collector turned off: past it, collections run")

	f.Stop()
	require.NotZero(t, garbage(32<<20), "without the floor Go collects at a few MiB")
	f.Stop() // twice is harmless
	g := Start(64 << 20)
	require.NotNil(t, g, "a stopped floor leaves room for another")
	g.Stop()
}

func TestFloorGrowsInProportionAboveIt(t *testing.T) {
	live := holdLive(96)
	f := Start(16 << 20)
	require.NotNil(t, f)
	defer f.Stop()

	collect(t, f)
	goal := heapGoal()
	require.Greater(t, goal, uint64(160<<20), "goal %d MiB: GOGC=100 lets 96 MiB live grow to about twice", goal>>20)
	require.Less(t, goal, uint64(256<<20), "goal %d MiB: the floor does not inflate a heap above it", goal>>20)
	runtime.KeepAlive(live)
}

func TestFloorFollowsTheHeapAsItShrinks(t *testing.T) {
	live := holdLive(96)
	f := Start(64 << 20)
	require.NotNil(t, f)
	defer f.Stop()
	collect(t, f)
	require.Greater(t, heapGoal(), uint64(160<<20), "96 MiB live: GOGC's goal, over the floor")
	runtime.KeepAlive(live)

	collect(t, f) // live is garbage now
	require.InDelta(t, 64<<20, heapGoal(), 2<<20, "the heap shrank under the floor: its goal is the floor again")
}

// holdLive allocates mib MiB that the caller keeps live, and collects, so
// that the heap's live size is known to be at least that.
func holdLive(mib int) [][]byte {
	live := make([][]byte, mib)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	runtime.GC()
	return live
}

// collect runs a collection and waits for the cleanup that tunes for the
// heap it left.
func collect(t *testing.T, f *Floor) {
	t.Helper()
	n := f.tunes.Load()
	runtime.GC()
	require.Eventually(t, func() bool { return f.tunes.Load() > n }, 10*time.Second, time.Millisecond)
}

func TestStartDoesNothingWithoutAFloorOrACollector(t *testing.T) {
	require.Nil(t, Start(0))
	var f *Floor
	f.Stop() // a nil Floor's Stop does nothing

	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	require.Nil(t, Start(64<<20), "GOGC=off: no floor to keep")
	require.Equal(t, -1, debug.SetGCPercent(-1), "the collector stays off")
}

func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func TestFloorGivesBackGOGC(t *testing.T) {
	old := debug.SetGCPercent(300)
	defer debug.SetGCPercent(old)
	f := Start(16 << 20)
	require.NotNil(t, f)
	require.Equal(t, 300, f.base, "GOGC's percentage is the proportion above the floor")
	f.Stop()
	require.Equal(t, 300, debug.SetGCPercent(300), "Stop gives GOGC's percentage back")
}

// GOMEMLIMIT still caps a heap under a floor set past it.
func TestFloorUnderAMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(48 << 20)
	defer debug.SetMemoryLimit(old)
	runtime.GC()
	f := Start(1 << 30)
	require.NotNil(t, f)
	defer f.Stop()
	require.NotZero(t, garbage(256<<20), "256 MiB of garbage under a 48 MiB limit is collected, whatever the floor")
}
