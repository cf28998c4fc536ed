package host

import (
	"context"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/retryhost/retryhost/abi"
)

// Native Go equivalents of condition.wat and refusal.wat: the baselines.

type nativeCondition struct{ model string }

func (c nativeCondition) Decide(_ context.Context, a *abi.Attempt) (abi.Decision, error) {
	switch {
	case a.Status == 429:
		return abi.Decision{Action: abi.ActionRetry, UseRetryAfter: true, MaxAttempts: 3}, nil
	case a.Status >= 500 && a.Status < 600:
		return abi.Decision{Action: abi.ActionSwitch, Model: c.model}, nil
	}
	return abi.Decision{}, nil
}

type nativeRefusal struct{}

func (nativeRefusal) Name() string                { return "native-refusal" }
func (nativeRefusal) Policy() abi.TransformPolicy { return abi.TransformPolicy{} }
func (nativeRefusal) Open(context.Context, abi.StreamInfo) (abi.StreamTransform, error) {
	return &nativeRefusalStream{}, nil
}

type nativeRefusalStream struct{ m int }

const refusalPhrase = "I can't"

func (s *nativeRefusalStream) Part(_ context.Context, p *abi.Part) (abi.Verdict, error) {
	if p.Kind != abi.KindTextDelta {
		if s.m > 0 {
			return abi.Verdict{Action: abi.PartHold}, nil
		}
		return abi.Verdict{}, nil
	}
	for i := 0; i < len(p.Delta) && s.m < len(refusalPhrase); i++ {
		if p.Delta[i] != refusalPhrase[s.m] {
			return abi.Verdict{Action: abi.PartDetach}, nil
		}
		s.m++
	}
	if s.m == len(refusalPhrase) {
		return abi.Verdict{Action: abi.PartError, Err: &abi.RefusalError{Transform: "native-refusal", Phrase: "i can't", Text: refusalPhrase}}, nil
	}
	return abi.Verdict{Action: abi.PartHold}, nil
}
func (s *nativeRefusalStream) End(context.Context) (abi.Verdict, error) { return abi.Verdict{}, nil }
func (s *nativeRefusalStream) Close()                                   {}

// modes are the ways a Wasm plugin can be run, side by side.
var modes = []struct {
	name string
	opts []Option
	ctx  bool // wazero's own guard: a context with a timeout per call
}{
	{name: "wasm-trusted", opts: []Option{WithTrusted()}},
	{name: "wasm-guarded-watchdog"},
	{name: "wasm-guarded-ctx", ctx: true},
}

func benchRuntime(b *testing.B, ctxGuard bool, opts ...Option) *Runtime {
	rt := newRuntime(b, opts...)
	rt.cfg.ctxGuard = ctxGuard
	return rt
}

func BenchmarkCondition(b *testing.B) {
	ctx := context.Background()
	a := &abi.Attempt{Number: 1, Model: "openai/gpt-5", Status: 429, Class: abi.ClassRateLimit, Message: "slow down"}
	b.Run("native", func(b *testing.B) {
		c := nativeCondition{model: "anthropic/claude"}
		b.ReportAllocs()
		for b.Loop() {
			if d, _ := c.Decide(ctx, a); d.Action != abi.ActionRetry {
				b.Fatal(d)
			}
		}
	})
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			rt := benchRuntime(b, m.ctx, m.opts...)
			p, err := rt.Load(ctx, "cond", fixture(b, "condition"), WithConfig([]byte("anthropic/claude")))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if d, err := p.Decide(ctx, a); err != nil || d.Action != abi.ActionRetry {
					b.Fatal(d, err)
				}
			}
		})
	}
}

func BenchmarkTransformPart(b *testing.B) {
	ctx := context.Background()
	part := &abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: "Sure, here it is"}
	bench := func(b *testing.B, tr abi.Transformer) {
		st, err := tr.Open(ctx, abi.StreamInfo{ID: 1})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		b.ReportAllocs()
		for b.Loop() {
			// The detector decides on the first byte and detaches; a
			// driver would stop calling, the benchmark keeps asking.
			if v, err := st.Part(ctx, part); err != nil || v.Action != abi.PartDetach {
				b.Fatal(v, err)
			}
		}
	}
	b.Run("native", func(b *testing.B) { bench(b, nativeRefusal{}) })
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			rt := benchRuntime(b, m.ctx, m.opts...)
			p, err := rt.Load(ctx, "refusal", fixture(b, "refusal"))
			if err != nil {
				b.Fatal(err)
			}
			bench(b, p)
		})
	}
}

func BenchmarkLoad(b *testing.B) {
	ctx := context.Background()
	wasm := fixture(b, "refusal")
	load := func(b *testing.B, opts ...Option) {
		for b.Loop() {
			rt, err := New(ctx, opts...)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := rt.Load(ctx, "refusal", wasm, WithInstances(1)); err != nil {
				b.Fatal(err)
			}
			_ = rt.Close(ctx)
		}
	}
	b.Run("cold", func(b *testing.B) { load(b) })
	b.Run("from-disk-cache", func(b *testing.B) {
		dir := filepath.Join(b.TempDir(), "cache")
		rt, err := New(ctx, WithCacheDir(dir)) // warm the cache
		if err != nil {
			b.Fatal(err)
		}
		if _, err := rt.Load(ctx, "refusal", wasm, WithInstances(1)); err != nil {
			b.Fatal(err)
		}
		_ = rt.Close(ctx)
		load(b, WithCacheDir(dir))
	})
	b.Run("interpreter-cold", func(b *testing.B) { load(b, WithInterpreter()) })
}

func BenchmarkInstantiate(b *testing.B) {
	ctx := context.Background()
	rt := newRuntime(b)
	p, err := rt.Load(ctx, "refusal", fixture(b, "refusal"), WithInstances(1))
	if err != nil {
		b.Fatal(err)
	}
	var linear uint32
	b.ReportAllocs()
	for b.Loop() {
		in, err := p.instantiate(ctx)
		if err != nil {
			b.Fatal(err)
		}
		linear = in.mem.Size()
		in.close()
	}
	b.ReportMetric(float64(linear), "linear-bytes/instance")
}

// Benchmark10kStreams opens 10,000 concurrent streams through the refusal
// transform (half refuse, half detach), all of them live at once, and
// reports the host memory the plugin side took (heap in use after every
// stream is open and judged, minus before the plugin was loaded).
func Benchmark10kStreams(b *testing.B) {
	const streams, workers = 10_000, 64
	ctx := context.Background()
	refuse := []abi.Part{{Kind: abi.KindTextStart, ID: "t0"}, {Kind: abi.KindTextDelta, ID: "t0", Delta: "I ca"}, {Kind: abi.KindTextDelta, ID: "t0", Delta: "n't do that"}}
	accept := []abi.Part{{Kind: abi.KindTextStart, ID: "t0"}, {Kind: abi.KindTextDelta, ID: "t0", Delta: "I can"}, {Kind: abi.KindTextDelta, ID: "t0", Delta: " do that"}}
	bench := func(b *testing.B, load func() abi.Transformer) {
		var before, peak runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tr := load()
		sts := make([]abi.StreamTransform, streams)
		b.ResetTimer()
		for b.Loop() {
			var wg sync.WaitGroup
			var mu sync.Mutex
			refused := 0
			for w := range workers {
				wg.Go(func() {
					first := w * streams / workers
					mine := sts[first : (w+1)*streams/workers]
					for i := range mine {
						st, err := tr.Open(ctx, abi.StreamInfo{ID: uint64(w*streams + i)})
						if err != nil {
							b.Error(err)
							return
						}
						mine[i] = st
					}
					// Interleave: every stream gets part k before any gets k+1,
					// so all 10,000 states are live at once.
					n := 0
					done := make([]bool, len(mine))
					for k := range refuse {
						for i, st := range mine {
							if done[i] {
								continue
							}
							ps := accept
							if (first+i)%2 == 0 {
								ps = refuse
							}
							v, err := st.Part(ctx, &ps[k])
							if err != nil {
								b.Error(err)
								return
							}
							switch v.Action {
							case abi.PartError:
								n++
								done[i] = true
							case abi.PartDetach:
								done[i] = true
							}
						}
					}
					mu.Lock()
					refused += n
					mu.Unlock()
				})
			}
			wg.Wait()
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&peak)
			b.StartTimer()
			for _, st := range sts {
				st.Close()
			}
			if refused != streams/2 {
				b.Fatalf("refused %d of %d", refused, streams)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*streams), "ns/stream")
		b.ReportMetric(float64(int64(peak.HeapInuse+peak.StackInuse)-int64(before.HeapInuse+before.StackInuse))/(1<<20), "MiB-host")
	}
	b.Run("native", func(b *testing.B) { bench(b, func() abi.Transformer { return nativeRefusal{} }) })
	for _, m := range modes {
		// v1.1: the same detector with hints (hinted.wat): text-start is
		// static, open and first part are one call, no close after a verdict.
		for _, fx := range []string{"refusal", "hinted"} {
			name := m.name
			if fx == "hinted" {
				name += "/v1.1"
			}
			b.Run(name, func(b *testing.B) {
				rt := benchRuntime(b, m.ctx, m.opts...)
				bench(b, func() abi.Transformer {
					p, err := rt.Load(ctx, fx, fixture(b, fx))
					if err != nil {
						b.Fatal(err)
					}
					return p
				})
			})
		}
	}
}

// BenchmarkGoGuest measures the Go wasip1 guest (testdata/goguest, ~2 MB):
// what loading, instantiating and calling a standard Go plugin costs.
func BenchmarkGoGuest(b *testing.B) {
	wasm := buildGoGuest(b)
	ctx := context.Background()
	cfg := WithConfig([]byte("anthropic/claude"))
	a := &abi.Attempt{Number: 1, Model: "openai/gpt-5", Status: 429, Class: abi.ClassRateLimit, Message: "slow down"}
	for _, m := range modes {
		b.Run("decide/"+m.name, func(b *testing.B) {
			rt := benchRuntime(b, m.ctx, m.opts...)
			p, err := rt.Load(ctx, "go", wasm, cfg, WithInstances(1))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if d, err := p.Decide(ctx, a); err != nil || d.Action != abi.ActionRetry {
					b.Fatal(d, err)
				}
			}
		})
	}
	load := func(b *testing.B, opts ...Option) {
		for b.Loop() {
			rt, err := New(ctx, opts...)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := rt.Load(ctx, "go", wasm, cfg, WithInstances(1)); err != nil {
				b.Fatal(err)
			}
			_ = rt.Close(ctx)
		}
	}
	b.Run("load/cold", func(b *testing.B) { load(b) })
	b.Run("load/from-disk-cache", func(b *testing.B) {
		dir := filepath.Join(b.TempDir(), "cache")
		rt, err := New(ctx, WithCacheDir(dir)) // warm the cache
		if err != nil {
			b.Fatal(err)
		}
		if _, err := rt.Load(ctx, "go", wasm, cfg, WithInstances(1)); err != nil {
			b.Fatal(err)
		}
		_ = rt.Close(ctx)
		load(b, WithCacheDir(dir))
	})
	b.Run("instantiate", func(b *testing.B) {
		rt := newRuntime(b)
		p, err := rt.Load(ctx, "go", wasm, cfg, WithInstances(1))
		if err != nil {
			b.Fatal(err)
		}
		var linear uint32
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		kept := make([]*instance, 0, 8)
		for b.Loop() {
			in, err := p.instantiate(ctx)
			if err != nil {
				b.Fatal(err)
			}
			linear = in.mem.Size()
			if len(kept) < cap(kept) {
				kept = append(kept, in)
			} else {
				in.close()
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(linear)/(1<<20), "MiB-linear/instance")
		if len(kept) > 0 {
			b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/float64(len(kept))/(1<<20), "MiB-heap/instance")
		}
		for _, in := range kept {
			in.close()
		}
	})
}

// BenchmarkStreamCalls: one stream's decision (a refusal, and an ordinary
// answer) through the same prefix detector as an ABI v1.0 guest
// (refusal.wat: every part is a call, plus open and close) and as a v1.1
// guest (hinted.wat: static verdicts for the preamble, lazy open with
// retryhost_open_part, auto-close), trusted and guarded, side by side.
// ns/op is per stream; calls/stream counts the calls into the guest.
//
//	go test ./host -run '^$' -bench StreamCalls -benchmem
func BenchmarkStreamCalls(b *testing.B) {
	ctx := context.Background()
	preamble := []abi.Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindResponseMeta, ID: "r", Meta: &abi.ResponseMeta{ID: "r", ModelID: "m"}}, {Kind: abi.KindTextStart, ID: "t0"}}
	deltas := func(text string) []abi.Part {
		ps := append([]abi.Part(nil), preamble...)
		for len(text) > 0 {
			n := min(3, len(text))
			ps = append(ps, abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: text[:n]})
			text = text[n:]
		}
		return ps
	}
	streams := []struct {
		name  string
		parts []abi.Part
	}{{"refusal", deltas("I can't help with that.")}, {"answer", deltas("Sure! Here it is.")}}
	for _, s := range streams {
		for _, m := range modes[:2] {
			for _, g := range []string{"v1.0", "v1.1"} {
				b.Run(s.name+"/"+m.name+"/"+g, func(b *testing.B) {
					rt := benchRuntime(b, m.ctx, m.opts...)
					fx := map[string]string{"v1.0": "refusal", "v1.1": "hinted"}[g]
					p, err := rt.Load(ctx, fx, fixture(b, fx), WithInstances(1))
					if err != nil {
						b.Fatal(err)
					}
					calls := 0
					b.ReportAllocs()
					for b.Loop() {
						st, err := p.Open(ctx, abi.StreamInfo{ID: 1})
						if err != nil {
							b.Fatal(err)
						}
						judged := 0
						for i := range s.parts {
							v, err := st.Part(ctx, &s.parts[i])
							if err != nil {
								b.Fatal(err)
							}
							judged++
							if v.Action == abi.PartError || v.Action == abi.PartDetach {
								break
							}
						}
						st.Close()
						calls += judged + 2 // v1.0: every part, open and close
					}
					if g == "v1.1" {
						in := p.slots[0].inst
						calls = int(uint32(in.mod.ExportedGlobal("calls").Get()))
					}
					b.ReportMetric(float64(calls)/float64(b.N), "calls/stream")
				})
			}
		}
	}
}
