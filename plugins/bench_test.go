package plugins_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
	"github.com/retryhost/retryhost/plugins/internal/wasmtest"
)

// The refusal transform, native and Wasm (the Go, C, AssemblyScript and
// Rust guests: go/, c/, as/, rust/), trusted (no per-call guard) and guarded (wazero's WithCloseOnContextDone and a
// per-call deadline), side by side:
//
//	go test ./plugins -run '^$' -bench Refusal -benchmem
//
// The go/… and c/… rows without "host" go through the plugins' test host
// (package internal/wasmtest: cached function handles, preallocated stacks;
// "guarded" there is wazero's WithCloseOnContextDone with a per-call
// context deadline, a goroutine per call). The host-… rows go through the
// product's host: "host-guarded" is its default mode (one watchdog per
// runtime), "host-trusted" has no guard.
//
// To compare with another build of the Go refusal plugin (say the one
// before a change: git show REV:plugins/refusal/refusal.wasm >/tmp/old.wasm)
// in the same run, name it in REFUSAL_BASELINE_WASM: its rows are prefixed
// go-baseline/.
//
// The go/guarded and c/guarded rows used to fail now and then with
// "module closed with context deadline exceeded". Two causes: the host's
// work of growing the guest's memory (a new slice and a copy of it all,
// 15–120 ms on a loaded machine) was charged to the call's context
// deadline, and, with that fixed (wasmtest reserves a guarded instance's
// whole memory limit up front, so growing never copies; the product host
// pauses its watchdog instead: host.guestMemory), a call still took over
// 50 ms of wall time now and then with the machine's 2 cores shared by
// other jobs (load average 6). The test host's guarded rows therefore run
// with a 1 s deadline (loadBench): they measure the guard's cost, which
// does not depend on the deadline.
//
// TODO(next): the Go guest misses its per-part bar (≤ 200 ns trusted, goal
// ≤ 1.5 µs guarded): ~0.43 µs and ~2.2 µs per part through the product
// host (the host-… rows, which honour the v1.1 hints: 8 calls per refusal
// stream). In the guest a text delta costs ~0.2 µs of SDK call path, ~50 ns
// keeping the text and ~130 ns of trie walk; guarded, every Go function
// entry and loop pays wazero's termination check. What is left to try: let
// the driver hand a transform the parts its provider already buffered (one
// retryhost_parts call for a burst of deltas; needs an optional batch
// method on abi.StreamTransform and a non-blocking read on driver.Stream),
// or a leaner optional text-delta entry point in the SDK.

// loadBench loads the refusal plugin in the test host. Guarded, its calls
// (and the product host's guarded rows') get a 1 s deadline instead of the
// default 50 ms: the guard's cost per
// call (wazero's goroutine and the context) does not depend on the
// deadline's length, and on a loaded machine (other jobs on the 2 cores)
// a call of a well-behaved guest now and then took over 50 ms of wall
// time, which failed the benchmark.
func loadBench(b *testing.B, bin []byte, guarded bool) *wasmtest.Instance {
	b.Helper()
	in, err := plugintest.Engine().Load(context.Background(), "refusal", bin,
		wasmtest.Options{Guarded: guarded, Deadline: time.Second})
	require.NoError(b, err)
	b.Cleanup(func() { _ = in.Close(context.Background()) })
	return in
}

type benchCase struct {
	name string
	tr   func(b *testing.B) abi.Transformer
}

func benchCases() []benchCase {
	wasm := func(bin []byte, guarded bool) func(b *testing.B) abi.Transformer {
		return func(b *testing.B) abi.Transformer { return loadBench(b, bin, guarded) }
	}
	viaHost := func(bin []byte, opts ...host.Option) func(b *testing.B) abi.Transformer {
		return func(b *testing.B) abi.Transformer {
			p, err := plugintest.Runtime(b, opts...).Load(context.Background(), "refusal", bin, host.WithInstances(1))
			require.NoError(b, err)
			return p
		}
	}
	cases := []benchCase{{"native", func(b *testing.B) abi.Transformer { return nativeRefusal(b) }}}
	builds := []struct {
		name string
		bin  []byte
	}{
		{"go", plugintest.GoRef("refusal")},
		{"c", plugins.Refusal},
		{"as", plugintest.SDKBuild("assemblyscript", "refusal")},
		{"rust", plugintest.SDKBuild("rust", "refusal")},
	}
	for _, mode := range []string{"trusted", "guarded", "host-trusted", "host-guarded"} {
		for _, g := range builds {
			var tr func(b *testing.B) abi.Transformer
			switch mode {
			case "trusted", "guarded":
				tr = wasm(g.bin, mode == "guarded")
			case "host-trusted":
				tr = viaHost(g.bin, host.WithTrusted())
			default:
				tr = viaHost(g.bin, host.WithCallTimeout(time.Second))
			}
			cases = append(cases, benchCase{g.name + "/" + mode, tr})
		}
	}
	if path := os.Getenv("REFUSAL_BASELINE_WASM"); path != "" {
		if base, err := os.ReadFile(path); err == nil {
			cases = append(cases,
				benchCase{"go-baseline/trusted", wasm(base, false)},
				benchCase{"go-baseline/guarded", wasm(base, true)},
				benchCase{"go-baseline/host-trusted", viaHost(base, host.WithTrusted())},
				benchCase{"go-baseline/host-guarded", viaHost(base, host.WithCallTimeout(time.Second))})
		} else {
			cases = append(cases, benchCase{"go-baseline", func(b *testing.B) abi.Transformer {
				b.Fatalf("REFUSAL_BASELINE_WASM: %v", err)
				return nil
			}})
		}
	}
	return cases
}

// The two streams a detector sees most: a refusal (held until the phrase
// completes, then ERROR) and an ordinary answer (DETACH on the first
// delta), both cut in 3-byte deltas.
var (
	refusalStream = plugintest.TextStream("I'm sorry, but I can't help with that request.", 3)
	answerStream  = plugintest.TextStream("Sure! Here is the code you asked for.", 3)
)

// decide runs one stream through the transform until its decision, as
// the driver does pre-commit, and returns the number of parts judged.
func decide(ctx context.Context, b *testing.B, tr abi.Transformer, parts []abi.Part) int {
	s, err := tr.Open(ctx, abi.StreamInfo{ID: 1})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for i := range parts {
		v, err := s.Part(ctx, &parts[i])
		if err != nil {
			// Closed first: the runtime's Close (a cleanup) waits for
			// every open stream, so a failed run would hang, not fail.
			s.Close()
			b.Fatal(err)
		}
		n++
		if v.Action == abi.PartError || v.Action == abi.PartDetach {
			break
		}
	}
	s.Close()
	return n
}

// BenchmarkRefusalPart: the cost of one part through the transform,
// pre-commit (ns/op is per part; stream open and close amortised in).
// cpu-ns/op is the process's CPU time per part (user + system, all
// threads): on a machine whose cores other jobs share, wall time counts
// the waits for a core too, CPU time much less.
func BenchmarkRefusalPart(b *testing.B) {
	ctx := context.Background()
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			tr := bc.tr(b)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			parts := 0
			for parts < b.N {
				parts += decide(ctx, b, tr, refusalStream)
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(parts), "cpu-ns/op")
		})
	}
}

// BenchmarkRefusalStream: the CPU of the whole refusal decision for one
// stream (ns/op is per stream: open, every part until the verdict, close).
func BenchmarkRefusalStream(b *testing.B) {
	ctx := context.Background()
	for _, stream := range []struct {
		name  string
		parts []abi.Part
	}{{"refusal", refusalStream}, {"answer", answerStream}} {
		for _, bc := range benchCases() {
			b.Run(stream.name+"/"+bc.name, func(b *testing.B) {
				tr := bc.tr(b)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					decide(ctx, b, tr, stream.parts)
				}
			})
		}
	}
}

// BenchmarkRefusalBatch: guarded, with the parts already buffered sent in
// one retryhost_parts call per stream (ns/op is per part).
func BenchmarkRefusalBatch(b *testing.B) {
	ctx := context.Background()
	batched := []struct {
		name string
		bin  []byte
	}{{"go/guarded", plugintest.GoRef("refusal")}, {"c/guarded", plugins.Refusal},
		{"as/guarded", plugintest.SDKBuild("assemblyscript", "refusal")}, {"rust/guarded", plugintest.SDKBuild("rust", "refusal")}}
	if base, err := os.ReadFile(os.Getenv("REFUSAL_BASELINE_WASM")); err == nil {
		batched = append(batched, struct {
			name string
			bin  []byte
		}{"go-baseline/guarded", base})
	}
	for _, g := range batched {
		b.Run(g.name, func(b *testing.B) {
			in := loadBench(b, g.bin, true)
			b.ReportAllocs()
			b.ResetTimer()
			for parts := 0; parts < b.N; parts += len(refusalStream) {
				s, err := in.Open(ctx, abi.StreamInfo{ID: 1})
				require.NoError(b, err)
				if _, err := s.(*wasmtest.Stream).PartsBatch(ctx, refusalStream); err != nil {
					b.Fatal(err)
				}
				s.Close()
			}
		})
	}
}
