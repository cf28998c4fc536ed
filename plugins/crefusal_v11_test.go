package plugins_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/plugins/refusalcore"
)

// rawGuest drives a guest's exports directly, as a v1.1 host would (the
// test host of wasmtest is a v1.0 host): it keeps the policy record the
// guest declares and calls retryhost_open_part.
type rawGuest struct {
	t      *testing.T
	ctx    context.Context
	mod    api.Module
	buf    uint32
	policy []byte
}

// loadRaw instantiates wasm bare, with config (empty: the defaults).
func loadRaw(t *testing.T, wasm []byte, interpreter bool, config ...string) *rawGuest {
	ctx := context.Background()
	cfg := wazero.NewRuntimeConfigCompiler()
	if interpreter {
		cfg = wazero.NewRuntimeConfigInterpreter()
	}
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	t.Cleanup(func() { _ = rt.Close(ctx) })
	g := &rawGuest{t: t, ctx: ctx}
	i32 := api.ValueTypeI32
	_, err := rt.NewHostModuleBuilder(abi.ModuleName).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, s []uint64) {
		g.buf, s[0] = uint32(s[0]), 0
	}), []api.ValueType{i32, i32}, []api.ValueType{i32}).Export(abi.ImportBuffer).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, m api.Module, s []uint64) {
		cfg := strings.Join(config, "")
		if uint32(s[1]) >= uint32(len(cfg)) {
			m.Memory().Write(uint32(s[0]), []byte(cfg))
		}
		s[0] = uint64(len(cfg))
	}), []api.ValueType{i32, i32}, []api.ValueType{i32}).Export(abi.ImportInput).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, m api.Module, s []uint64) {
		b, _ := m.Memory().Read(uint32(s[0]), uint32(s[1]))
		g.policy, s[0] = append([]byte(nil), b...), 0
	}), []api.ValueType{i32, i32}, []api.ValueType{i32}).Export(abi.ImportPolicy).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) {}), []api.ValueType{i32, i32, i32}, nil).Export(abi.ImportLog).
		Instantiate(ctx)
	require.NoError(t, err)
	g.mod, err = rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithStartFunctions())
	require.NoError(t, err)
	require.Equal(t, uint64(0), g.call(abi.ExportInit, uint64(len(strings.Join(config, "")))))
	return g
}

func (g *rawGuest) call(name string, args ...uint64) uint64 {
	g.t.Helper()
	f := g.mod.ExportedFunction(name)
	require.NotNil(g.t, f, name)
	r, err := f.Call(g.ctx, args...)
	require.NoError(g.t, err, name)
	if len(r) == 0 {
		return 0
	}
	return r[0]
}

func (g *rawGuest) write(off uint32, b []byte) uint64 {
	require.True(g.t, g.mod.Memory().Write(g.buf+off, b))
	return uint64(len(b))
}

func (g *rawGuest) open(h uint64) int32 {
	return int32(g.call(abi.ExportOpen, h, g.write(0, abi.AppendStreamInfo(nil, &abi.StreamInfo{ID: 1}))))
}

// part returns the action and the payload.
func (g *rawGuest) part(h uint64, p abi.Part) (uint8, []byte) {
	v := g.call(abi.ExportPart, h, g.write(0, abi.AppendPart(nil, &p)))
	payload, _ := g.mod.Memory().Read(g.buf, uint32(v>>32))
	return uint8(v), append([]byte(nil), payload...)
}

func (g *rawGuest) openPart(h uint64, p abi.Part) (uint8, []byte) {
	info := abi.AppendStreamInfo(nil, &abi.StreamInfo{ID: 1, Model: "m"})
	g.write(0, info)
	rec := abi.AppendPart(nil, &p)
	g.write(uint32(len(info)+7)&^7, rec)
	v := g.call("retryhost_open_part", h, uint64(len(info)), uint64(len(rec)))
	payload, _ := g.mod.Memory().Read(g.buf, uint32(v>>32))
	return uint8(v), append([]byte(nil), payload...)
}

func delta(s string) abi.Part { return abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: s} }

// TestCRefusalHints: the C refusal guest declares ABI v1.1 hints, and
// each is true of its answers: every kind with a static verdict gets that
// verdict from the guest too, and the guest forgets a stream by itself
// after ERROR or DETACH (auto_close).
func TestCRefusalHints(t *testing.T) {
	for _, tc := range []struct {
		interp bool
		config string
	}{{false, ""}, {true, ""}, {false, `{"reasoning":"hold"}`}, {true, `{"reasoning":"detach"}`}} {
		interp := tc.interp
		g := loadRaw(t, plugins.Refusal, interp, tc.config)
		pol, hints, err := abi.DecodePolicyHints(g.policy)
		require.NoError(t, err)
		require.Equal(t, abi.TransformPolicy{}, pol, "the default policy")
		require.True(t, hints.AutoClose)
		want := map[abi.PartKind]abi.PartAction{
			abi.KindStreamStart: abi.PartHold, abi.KindResponseMeta: abi.PartHold, abi.KindTextStart: abi.PartHold,
		}
		for k := abi.KindTextEnd; k <= abi.KindError; k++ {
			want[k] = abi.PartDetach
		}
		if tc.config == `{"reasoning":"hold"}` { // reasoning and citations are held with the text
			for _, k := range []abi.PartKind{abi.KindReasoningStart, abi.KindReasoningDelta, abi.KindReasoningEnd, abi.KindSource} {
				want[k] = abi.PartHold
			}
		}
		require.Equal(t, want, hints.Static, "config %q", tc.config)

		// Each static verdict is the guest's answer, mid-stream (after a
		// held text) as at the start; after a DETACH the handle is free.
		for k := abi.KindStreamStart; k <= abi.KindError; k++ {
			a, ok := hints.Static[k]
			if !ok {
				continue
			}
			for _, lead := range []string{"", "I'm sor"} {
				require.Zero(t, g.open(7))
				if lead != "" {
					act, _ := g.part(7, delta(lead))
					require.Equal(t, uint8(abi.PartHold), act)
				}
				act, _ := g.part(7, abi.Part{Kind: k, ID: "x"})
				require.Equal(t, uint8(a), act, "kind %v", k)
				if a == abi.PartDetach {
					require.Equal(t, uint64(0xff), g.call(abi.ExportEnd, 7), "forgotten after DETACH")
					g.call(abi.ExportClose, 7) // a v1.0 host closes anyway: harmless
				} else {
					g.call(abi.ExportClose, 7)
				}
			}
		}

		// A refusal (ERROR) and a divergence (DETACH) forget the stream:
		// its handle opens again without a close, as many times as there
		// are slots and more.
		for i := range 10000 {
			require.Zero(t, g.open(3), "open %d", i)
			text := "Sure, here"
			if i%2 == 0 {
				text = "I'm sorry, but I can't"
			}
			act, _ := g.part(3, delta(text))
			require.Contains(t, []uint8{uint8(abi.PartError), uint8(abi.PartDetach)}, act)
		}
		// A held stream is still held: open again fails, close frees it.
		require.Zero(t, g.open(3))
		act, _ := g.part(3, delta("I'm"))
		require.Equal(t, uint8(abi.PartHold), act)
		require.Negative(t, g.open(3))
		g.call(abi.ExportClose, 3)
		require.Zero(t, g.open(3))
		g.call(abi.ExportClose, 3)
	}
}

// TestCRefusalOpenPart: retryhost_open_part answers as retryhost_open
// then retryhost_part, keeps a held stream open, forgets a decided one, and
// keeps no state when the open fails.
func TestCRefusalOpenPart(t *testing.T) {
	g := loadRaw(t, plugins.Refusal, false)
	for _, p := range []abi.Part{
		delta("I'm sorry, but I can't help"), delta("Sure"), delta("I'm sorry"), delta(""),
		{Kind: abi.KindStreamStart}, {Kind: abi.KindFinish, Finish: &abi.Finish{}},
	} {
		require.Zero(t, g.open(1))
		wantAct, wantPayload := g.part(1, p)
		g.call(abi.ExportClose, 1)

		act, payload := g.openPart(2, p)
		require.Equal(t, wantAct, act, "%+v", p)
		require.Equal(t, wantPayload, payload)
		if act == uint8(abi.PartHold) {
			// still open: a second open of the handle fails, the stream goes on
			require.Negative(t, g.open(2))
			act, _ = g.part(2, delta(" zzz"))
			require.Equal(t, uint8(abi.PartDetach), act)
		}
		require.Equal(t, uint64(0xff), g.call(abi.ExportEnd, 2), "forgotten")
	}
	// A failed open (the handle is taken) answers a failure and leaves
	// the open stream as it was.
	require.Zero(t, g.open(5))
	act, _ := g.openPart(5, delta("Sure"))
	require.Equal(t, uint8(0xff), act)
	act, _ = g.part(5, delta("I'm sorry, but I can't"))
	require.Equal(t, uint8(abi.PartError), act)
}

// TestCRefusalBatchAfterDecision: in one retryhost_parts batch, the
// entries of a stream after its ERROR or DETACH are answered PASS (the
// stream is already forgotten), and the other streams are judged.
func TestCRefusalBatchAfterDecision(t *testing.T) {
	g := loadRaw(t, plugins.Refusal, false)
	require.Zero(t, g.open(1))
	require.Zero(t, g.open(2))
	var in []byte
	for _, e := range []struct {
		h uint64
		p abi.Part
	}{{1, delta("Sure")}, {2, delta("I'm sorry,")}, {1, delta(" more")}, {2, delta(" but I can't")}, {2, delta("!")}} {
		rec := abi.AppendPart(nil, &e.p)
		in = append(in, byte(e.h), 0, 0, 0, 0, 0, 0, 0, byte(len(rec)), 0, 0, 0)
		in = append(in, rec...)
	}
	require.Equal(t, uint64(5), g.call(abi.ExportParts, 5, g.write(0, in)))
	at := uint32(len(in)+7) &^ 7
	var acts []uint8
	for range 5 {
		b, _ := g.mod.Memory().Read(g.buf+at, 8)
		v := uint64(b[0]) | uint64(b[4])<<32 | uint64(b[5])<<40
		acts = append(acts, b[0])
		at += 8 + uint32(v>>32)
	}
	require.Equal(t, []uint8{uint8(abi.PartDetach), uint8(abi.PartHold), 0, uint8(abi.PartError), 0}, acts)
}

// TestCRefusalRandomPhrases: the C guest's trie, compiled from random
// phrase lists (up to its 128 phrases, many sharing prefixes, some
// duplicates once normalised), decides every delta of random texts as
// refusalcore's specification, Matcher.DecideText over the text so far.
// The runes stay within the C guest's case folding (ASCII, Latin-1).
func TestCRefusalRandomPhrases(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 8))
	pieces := []string{"a", "b", "ab", "I", "'", "\u2019", " ", "  ", "\t", "\u00a0", "É", "é", "x", "can't", "sorry,"}
	gen := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
	for range 40 {
		var phrases []string
		for len(phrases) < 1+rng.IntN(128) {
			if p := gen(1 + rng.IntN(6)); refusalcore.Normalize(p) != "" {
				phrases = append(phrases, p)
			}
		}
		m, err := refusalcore.New(phrases)
		require.NoError(t, err)
		cfg, err := json.Marshal(map[string][]string{"phrases": phrases})
		require.NoError(t, err)
		in := load(t, "refusal", plugins.Refusal, string(cfg), false)
		for range 50 {
			text := gen(rng.IntN(12))
			if rng.IntN(2) == 0 {
				text = phrases[rng.IntN(len(phrases))] + text
			}
			s, err := in.Open(ctx, abi.StreamInfo{ID: 1})
			require.NoError(t, err)
			for at := 0; at < len(text); {
				to := min(len(text), at+1+rng.IntN(4))
				p := delta(text[at:to])
				v, err := s.Part(ctx, &p)
				require.NoError(t, err)
				o, phrase := m.DecideText(text[:to])
				want := map[refusalcore.Outcome]abi.PartAction{refusalcore.Hold: abi.PartHold, refusalcore.Match: abi.PartError, refusalcore.Diverge: abi.PartDetach}[o]
				require.Equal(t, want, v.Action, "%q up to %d, phrases %q", text, to, phrases)
				if o != refusalcore.Hold {
					if o == refusalcore.Match {
						var re *abi.RefusalError
						require.ErrorAs(t, v.Err, &re)
						require.Equal(t, phrase, re.Phrase)
						require.Equal(t, text[:to], re.Text)
					}
					break
				}
				at = to
			}
			s.Close()
		}
	}
}
