// Package gcfloor keeps the garbage collector from running while the heap
// is smaller than a floor, and leaves it as GOGC says above the floor.
//
// Go starts a collection when the heap reaches GOGC percent over what the
// last one left live, and at least 4 MiB (times GOGC/100). A gateway's live
// heap is a few MiB (its connections and streams) while every request
// leaves tens of KiB of garbage, so at thousands of requests a second it
// collects dozens of times a second. Each collection costs its mark work
// and, because it shrinks the stacks of goroutines that sit idle between
// requests, the copying of those stacks as they grow back on the next
// request. A 16 MiB floor made that ~8 times a second in the gateway's
// bench, against ~26; a heap larger than the floor (many held streams)
// grows in proportion, as without it, so the floor bounds what the tuning
// costs in memory.
//
// Neither GOGC nor GOMEMLIMIT does this: a higher GOGC also multiplies a
// large heap's goal, and a memory limit caps a heap rather than letting a
// small one grow. So the GC percentage is set after each collection from
// the live heap it measured. It is process-wide: a program (retryhost
// serve) turns it on, a library never does.
package gcfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// A Floor tunes the collector until Stop. Its methods are safe for
// concurrent use. A process has one at a time: the GC percentage is
// process-wide.
type Floor struct {
	floor   uint64
	base    int // the GC percentage found at Start: GOGC's
	stopped atomic.Bool
	tunes   atomic.Uint64

	mu     sync.Mutex // serializes tune and Stop
	sample [3]metrics.Sample
}

// Start makes the heap's goal at least floor bytes, until Stop: after each
// collection the GC percentage is set so that the next one starts at
// max(floor, live × (1 + GOGC/100)). It returns nil, and changes nothing,
// when floor is 0, when the collector is off (GOGC=off) or when another
// Floor is running (it would take that one's tuning for GOGC's).
// GOMEMLIMIT, when set, still caps the heap as it does without a floor.
func Start(floor uint64) *Floor {
	if floor == 0 {
		return nil
	}
	running.Lock()
	defer running.Unlock()
	if running.f != nil {
		return nil
	}
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}} // read, not set and set back: no moment at another value
	metrics.Read(gogc)
	if gogc[0].Value.Kind() != metrics.KindUint64 || gogc[0].Value.Uint64() > math.MaxInt32 {
		return nil // off (GOGC=off reads as -1, as a uint64)
	}
	f := &Floor{floor: floor, base: int(gogc[0].Value.Uint64())}
	f.sample[0].Name = "/gc/heap/live:bytes"
	f.sample[1].Name = "/gc/scan/stack:bytes"
	f.sample[2].Name = "/gc/scan/globals:bytes"
	f.tune()
	f.arm()
	running.f = f
	return f
}

// running is the process's Floor, nil when none runs.
var running struct {
	sync.Mutex
	f *Floor
}

// Stop gives the collector back its GC percentage from before Start. A nil
// Floor's Stop does nothing.
func (f *Floor) Stop() {
	if f == nil {
		return
	}
	running.Lock()
	defer running.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped.Swap(true) {
		debug.SetGCPercent(f.base)
		running.f = nil
	}
}

// sentinel is an object that only the next collection frees: its cleanup
// tunes for the heap that collection left. It holds a pointer so that it is
// not a tiny allocation (which would share a block with others and be freed
// only with them).
type sentinel struct{ _ *byte }

func (f *Floor) arm() {
	runtime.AddCleanup(new(sentinel), func(f *Floor) {
		if f.stopped.Load() {
			return
		}
		f.tune()
		f.arm()
	}, f)
}

// tune sets the GC percentage for the live heap the last collection left.
func (f *Floor) tune() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped.Load() {
		return
	}
	metrics.Read(f.sample[:])
	var v [3]uint64 // live, stacks, globals
	for i, s := range f.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	debug.SetGCPercent(percent(v[0], v[1]+v[2], f.floor, f.base))
	f.tunes.Add(1)
}

// percent is the GC percentage that makes the goal of a heap with live
// bytes live, and roots bytes of stacks and globals to scan,
// max(floor, Go's goal under base). Go's goal is
// max(live + (live + roots) × percent/100, heapMinimum × percent/100): the
// percentage applies to the roots too (since Go 1.18), and to Go's
// minimum heap, so a percentage from the first term alone would put the
// goal far past the floor for a heap of a few hundred KiB. With no live
// heap measured yet (no collection has run) it is base: a percentage
// computed from 0 would be a goal no heap reaches, and the collection that
// would tune it would never come.
func percent(live, roots, floor uint64, base int) int {
	scan := live + roots
	if live == 0 || live+scan*uint64(base)/100 >= floor {
		return base
	}
	// In floating point: a floor of any size (up to 1<<64) cannot
	// overflow it, and a percentage needs no more than its 53 bits.
	p := float64(floor-live) * 100 / float64(scan)
	p = min(p, float64(floor)*100/heapMinimum, math.MaxInt32)
	return max(int(p), base)
}

// heapMinimum is Go's smallest heap goal at GOGC=100 (the runtime's
// defaultHeapMinimum); the goal's minimum scales with the percentage.
const heapMinimum = 4 << 20
