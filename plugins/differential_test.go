package plugins_test

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
	"github.com/retryhost/retryhost/plugins/internal/wasmtest"
)

func load(tb testing.TB, name string, wasm []byte, config string, guarded bool) *wasmtest.Instance {
	tb.Helper()
	in, err := plugintest.Engine().Load(context.Background(), name, wasm, wasmtest.Options{Config: []byte(config), Guarded: guarded})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = in.Close(context.Background()) })
	return in
}

// TestEveryBuiltinLoads loads each embedded plugin with its example
// config and checks it is the kind it claims.
func TestEveryBuiltinLoads(t *testing.T) {
	ctx := context.Background()
	for _, p := range plugins.All() {
		t.Run(p.Name, func(t *testing.T) {
			require.NotEmpty(t, p.Wasm)
			in := load(t, p.Name, p.Wasm, p.ExampleConfig, false)
			switch p.Kind {
			case plugins.Condition:
				_, err := in.Decide(ctx, &abi.Attempt{Number: 1, Status: 500, Class: abi.ClassServer})
				require.NoError(t, err)
			case plugins.Transform:
				r, err := plugintest.Run(ctx, in, abi.StreamInfo{ID: 1}, plugintest.TextStream("Hello there", 3))
				require.NoError(t, err)
				require.NoError(t, r.Err)
			}
			got, ok := plugins.Lookup(p.Name)
			require.True(t, ok)
			require.Equal(t, p.Name, got.Name)
		})
	}
	_, ok := plugins.Lookup("nope")
	require.False(t, ok)
}

// nativeRefusal is the driver's native refusal detector, the reference
// the Wasm plugins must match.
func nativeRefusal(tb testing.TB) abi.Transformer {
	d, err := driver.NewRefusalDetector()
	require.NoError(tb, err)
	return d
}

// nativeRefusalHold is the native detector with driver.ReasoningHold, the
// counterpart of the plugins' "reasoning": "hold".
func nativeRefusalHold(tb testing.TB) abi.Transformer {
	d, err := driver.NewRefusalDetectorWith(driver.RefusalConfig{Reasoning: driver.ReasoningHold})
	require.NoError(tb, err)
	return d
}

// refusalBuilds are the Wasm builds of the refusal detector, by guest
// language: the Go SDK's (the reference), the C one (the built-in), and
// the AssemblyScript and Rust SDKs'.
func refusalBuilds() map[string][]byte {
	return map[string][]byte{
		"go":   plugintest.GoRef("refusal"),
		"c":    plugins.Refusal,
		"as":   plugintest.SDKBuild("assemblyscript", "refusal"),
		"rust": plugintest.SDKBuild("rust", "refusal"),
	}
}

// refusalBuildNames are refusalBuilds' names, in a fixed order.
func refusalBuildNames() []string {
	return slices.Sorted(maps.Keys(refusalBuilds()))
}

// refusalsWith are the refusal detectors that must agree: native (the
// native detector configured as config says) and every Wasm build,
// loaded with config.
func refusalsWith(tb testing.TB, native abi.Transformer, config string) map[string]abi.Transformer {
	ts := map[string]abi.Transformer{"native": native}
	for name, bin := range refusalBuilds() {
		ts[name] = load(tb, "refusal", bin, config, false)
	}
	return ts
}

// refusals are the refusal detectors that must agree with the default
// config: the native one and every Wasm build.
func refusals(tb testing.TB) map[string]abi.Transformer {
	return refusalsWith(tb, nativeRefusal(tb), "")
}

func requireSame(t testing.TB, ts map[string]abi.Transformer, parts []abi.Part) {
	t.Helper()
	ctx := context.Background()
	want, err := plugintest.Run(ctx, ts["native"], abi.StreamInfo{ID: 1}, parts)
	require.NoError(t, err)
	for name, tr := range ts {
		if name == "native" {
			continue
		}
		got, err := plugintest.Run(ctx, tr, abi.StreamInfo{ID: 1}, parts)
		require.NoError(t, err, name)
		require.Equal(t, want.Actions, got.Actions, "%s: verdicts over %q", name, parts)
		require.Equal(t, want.Out, got.Out, "%s: output", name)
		require.Equal(t, want.Err, got.Err, "%s: error", name)
	}
}

// TestRefusalDifferential: the Wasm refusal plugins (Go and C guests)
// give the same verdicts, outputs and errors as the native detector over
// generated streams.
func TestRefusalDifferential(t *testing.T) {
	ts := refusals(t)
	rng := rand.New(rand.NewPCG(1, 2))
	n := 400
	if testing.Short() {
		n = 50
	}
	for i := 0; i < n; i++ {
		requireSame(t, ts, plugintest.RandomStream(rng))
	}
	// Every default phrase refuses, however it is cut and cased.
	for _, p := range []string{"I’M SORRY, BUT I CAN’T", "As an AI language model", "i\u00a0cannot\tprovide", "I \u0130"} {
		for size := 1; size < 6; size++ {
			requireSame(t, ts, plugintest.TextStream(p+" do that", size))
		}
	}
}

// TestRefusalDifferentialInterpreter repeats the differential test under
// wazero's interpreter: the compiler has an open miscompile report
// (wazero #2516), so the guests must agree with the native detector on
// both engines.
func TestRefusalDifferentialInterpreter(t *testing.T) {
	ctx := context.Background()
	eng := wasmtest.NewEngine(true, "")
	t.Cleanup(func() { eng.Close(ctx) })
	ts := map[string]abi.Transformer{"native": nativeRefusal(t)}
	for name, bin := range refusalBuilds() {
		in, err := eng.Load(ctx, "refusal", bin, wasmtest.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = in.Close(ctx) })
		ts[name] = in
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 100; i++ {
		requireSame(t, ts, plugintest.RandomStream(rng))
	}
}

// FuzzRefusalDifferential extends the differential test to fuzzed text
// and cuts (go test ./plugins -fuzz FuzzRefusalDifferential).
func FuzzRefusalDifferential(f *testing.F) {
	f.Add("I'm sorry, but I can't", uint8(3))
	f.Add("I\u2019m sorry,\u2003but I cannot", uint8(1))
	f.Add("\u212aelvin", uint8(2))
	f.Add("I'm sorry\xe2\x80", uint8(4))
	ts := refusals(f)
	f.Fuzz(func(t *testing.T, text string, size uint8) {
		if len(text) > 400 {
			text = text[:400] // the C guest holds at most 1000 bytes of undecided text
		}
		requireSame(t, ts, plugintest.TextStream(text, int(size%16)+1))
	})
}

// TestRefusalBatch: the batched export gives the per-part verdicts.
func TestRefusalBatch(t *testing.T) {
	ctx := context.Background()
	for name, wasm := range refusalBuilds() {
		in := load(t, "refusal", wasm, "", false)
		for _, text := range []string{"I'm sorry, but I can't help", "Sure, here it is", "I"} {
			parts := plugintest.TextStream(text, 2)
			one, err := in.Open(ctx, abi.StreamInfo{ID: 1})
			require.NoError(t, err)
			var want []abi.Verdict
			for i := range parts {
				v, err := one.Part(ctx, &parts[i])
				require.NoError(t, err)
				want = append(want, v)
				if v.Action == abi.PartError || v.Action == abi.PartDetach {
					break
				}
			}
			one.Close()
			two, err := in.Open(ctx, abi.StreamInfo{ID: 2})
			require.NoError(t, err)
			got, err := two.(*wasmtest.Stream).PartsBatch(ctx, parts)
			require.NoError(t, err)
			two.Close()
			require.Equal(t, want, got[:len(want)], "%s %q", name, text)
			for _, v := range got[len(want):] {
				require.Equal(t, abi.PartPass, v.Action, "after a decision the batch answers PASS")
			}
		}
	}
}

// TestCRefusalConfig: custom phrases, rejections, and limits.
func TestCRefusalConfig(t *testing.T) {
	ctx := context.Background()
	in := load(t, "refusal", plugins.Refusal, `{"phrases": ["Nope, NOT doing", "  Non merci"]}`, false)
	r, err := plugintest.Run(ctx, in, abi.StreamInfo{}, plugintest.TextStream("nope,  not doing it", 3))
	require.NoError(t, err)
	var re *abi.RefusalError
	require.ErrorAs(t, r.Err, &re)
	require.Equal(t, "nope, not doing", re.Phrase)
	r, err = plugintest.Run(ctx, in, abi.StreamInfo{}, plugintest.TextStream("I'm sorry, but I can't", 3))
	require.NoError(t, err)
	require.NoError(t, r.Err, "a custom list replaces the defaults")

	_, err = plugintest.Engine().Load(ctx, "refusal", plugins.Refusal, wasmtest.Options{Config: []byte(`{"phrases": ["ok", " \u3000 x", "\t\u00a0"]}`)})
	require.ErrorContains(t, err, "empty once normalised")
	_, err = plugintest.Engine().Load(ctx, "refusal", plugins.Refusal, wasmtest.Options{Config: []byte(`{"phrases": ["` + strings.Repeat("x", 201) + `"]}`)})
	require.ErrorContains(t, err, "longer than 200 bytes")

	// Undecided text past the C guest's 1000 bytes fails the plugin (its
	// fail policy applies) instead of overflowing.
	in = load(t, "refusal", plugins.Refusal, "", false)
	_, err = plugintest.Run(ctx, in, abi.StreamInfo{}, plugintest.TextStream("I"+strings.Repeat(" ", 1200)+"x", 100))
	require.ErrorIs(t, err, wasmtest.ErrPluginFailed)
}

// TestCRefusalManyStreams: the C guest's handle table and slot pages
// grow, shrink and reuse correctly over many concurrent streams.
func TestCRefusalManyStreams(t *testing.T) {
	ctx := context.Background()
	in := load(t, "refusal", plugins.Refusal, "", false)
	refuse := abi.Part{Kind: abi.KindTextDelta, Delta: "I'm sorry, but I cannot"}
	fine := abi.Part{Kind: abi.KindTextDelta, Delta: "I'm glad"}
	for round := 0; round < 3; round++ {
		var ss []abi.StreamTransform
		for i := 0; i < 3000; i++ {
			s, err := in.Open(ctx, abi.StreamInfo{ID: uint64(i)})
			require.NoError(t, err)
			ss = append(ss, s)
		}
		for i, s := range ss {
			p := fine
			if i%3 == 0 {
				p = refuse
			}
			v, err := s.Part(ctx, &p)
			require.NoError(t, err)
			if i%3 == 0 {
				require.Equal(t, abi.PartError, v.Action, "stream %d", i)
			} else {
				require.Equal(t, abi.PartDetach, v.Action, "stream %d", i)
			}
		}
		for i, s := range ss {
			if i%2 == round%2 {
				s.Close()
			}
		}
		for i, s := range ss {
			if i%2 != round%2 {
				s.Close()
			}
		}
	}
}

// TestCStatusMatchesErrMatch: the C status condition decides as the Go
// errmatch condition with the equivalent one-rule config.
func TestCStatusMatchesErrMatch(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ c, g string }{
		{"status=429\naction=retry\ndelay_ms=500\nbackoff=1.5\nmax_attempts=3\nretry_after=true\nmax_attempt=2\n",
			`{"rules":[{"status":[429],"max_attempt":2,"retry":{"delay":"500ms","backoff":1.5,"max_attempts":3,"retry_after":true}}]}`},
		{"# fail over on 5xx\r\nstatus=500-599,408\r\naction=switch\r\nmodel=anthropic/claude\r\nmax_attempts=1\r\n",
			`{"rules":[{"status":["500-599",408],"switch":{"model":"anthropic/claude","max_attempts":1}}]}`},
		{"status=401-403\naction=give-up\n", `{"rules":[{"status":["401-403"],"give_up":true}]}`},
	} {
		c := load(t, "c-status", plugins.CStatus, tc.c, false)
		g := load(t, "errmatch", plugintest.GoRef("errmatch"), tc.g, false)
		rng := rand.New(rand.NewPCG(3, 4))
		statuses := []int{0, 200, 400, 401, 403, 404, 408, 429, 499, 500, 503, 529, 599, 600}
		for i := 0; i < 300; i++ {
			a := abi.Attempt{Number: 1 + rng.IntN(4), Model: "openai/gpt", Status: statuses[rng.IntN(len(statuses))],
				Class: abi.ErrorClass(rng.IntN(15)), Message: "boom", RetryAfter: -1}
			dc, err := c.Decide(ctx, &a)
			require.NoError(t, err)
			dg, err := g.Decide(ctx, &a)
			require.NoError(t, err)
			require.Equal(t, dg, dc, "attempt %+v", a)
		}
	}
	for _, tc := range []struct{ config, why string }{
		{"", "status is required"},
		{"status=429", "action is required"},
		{"action=retry", "status is required"},
		{"status=99\naction=retry", "comma-separated (line 1)"},
		{"status=500-400\naction=retry", "status: want codes"},
		{"status=429,\naction=retry", "status: want codes"},
		{"status=429,,500\naction=retry", "status: want codes"},
		{"status=429\naction=switch", "switch: model is required"},
		{"status=429\naction=retry\nmodel=x", "model is for switch"},
		{"status=429\naction=jump", "action: want retry, switch or give-up (line 2)"},
		{"colour=blue", "unknown key"},
		{"status=429\n# note\n\nStatus=500\naction=retry", "unknown key (want status, action, model, delay_ms, backoff, max_attempts, max_attempt, retry_after) (line 4)"},
		{" status=429\naction=retry", "unknown key"},
		{"status=429\naction=retry\nbackoff=x", "backoff: want a number"},
		{"status=429\naction=retry\nstatus=500", "a key is given twice (line 3)"},
		{"status=429\naction=retry\naction=give-up", "a key is given twice"},
		{"status=429\naction=retry\nretry_after", "want key=value lines (line 3)"},
		{"status=429\naction=retry\nretry_after=", "retry_after: want true or false"},
		{"status=429\naction=retry\ndelay_ms=", "delay_ms: want milliseconds"},
		{"status=429\naction=retry\ndelay_ms=1s", "delay_ms: want milliseconds"},
		{`{"status":[429]}`, "want key=value lines"},
		{strings.Repeat("#", 4097), "longer than 4096 bytes"},
	} {
		_, err := plugintest.Engine().Load(ctx, "c-status", plugins.CStatus, wasmtest.Options{Config: []byte(tc.config)})
		require.ErrorContains(t, err, "config: ", "%q", tc.config)
		require.ErrorContains(t, err, tc.why, "%q", tc.config)
	}
}

// TestGoGuestHeapBounded: the SDK yields often enough for the Go guest's
// GC to keep up: many streams through one instance leave its memory
// bounded (without yields it grows by megabytes per thousand streams).
func TestGoGuestHeapBounded(t *testing.T) {
	ctx := context.Background()
	in := load(t, "refusal", plugintest.GoRef("refusal"), "", false)
	run := func(n int) {
		for i := 0; i < n; i++ {
			parts := refusalStreamParts
			if i%2 == 1 {
				parts = answerStreamParts
			}
			r, err := plugintest.Run(ctx, in, abi.StreamInfo{ID: uint64(i)}, parts)
			require.NoError(t, err)
			require.Equal(t, i%2 == 0, r.Err != nil)
		}
	}
	run(2000)
	warm := in.MemoryBytes()
	run(20000)
	require.LessOrEqual(t, in.MemoryBytes(), warm+8<<20, "memory grew from %d to %d bytes", warm, in.MemoryBytes())
}

var (
	refusalStreamParts = plugintest.TextStream("I'm sorry, but I can't help with that request.", 3)
	answerStreamParts  = plugintest.TextStream("Sure! Here is the code you asked for.", 3)
)

// withoutAside is parts without their reasoning and source parts: the
// stream a detector with "reasoning": "hold" judges.
func withoutAside(parts []abi.Part) []abi.Part {
	var out []abi.Part
	for _, p := range parts {
		switch p.Kind {
		case abi.KindReasoningStart, abi.KindReasoningDelta, abi.KindReasoningEnd, abi.KindSource:
		default:
			out = append(out, p)
		}
	}
	return out
}

// thinkingStreams are answers that think (or cite) before their text:
// refusals and ordinary answers, cut in several ways.
func thinkingStreams() [][]abi.Part {
	var out [][]abi.Part
	for _, text := range []string{"I'm sorry, but I can't help with that.", "Sure! Here is the code:", "I", ""} {
		for _, size := range []int{1, 3, 50} {
			ps := plugintest.TextStream(text, size)
			think := plugintest.ReasoningBlock("r0", "The user wants", " something I must decline.")
			cite := abi.Part{Kind: abi.KindSource, ID: "t0", Source: &abi.Source{URL: "https://example.com/a", Title: "a"}}
			redacted := []abi.Part{{Kind: abi.KindReasoningStart, ID: "r1"}, {Kind: abi.KindReasoningEnd, ID: "r1"}}
			out = append(out,
				concat(ps[:2], think, ps[2:]),                                 // extended thinking, then the text
				concat(ps[:2], redacted, think, ps[2:]),                       // redacted_thinking, then thinking
				concat(ps[:3], []abi.Part{cite}, ps[3:]),                      // a citation opening the text
				concat(ps[:min(4, len(ps)-2)], think, ps[min(4, len(ps)-2):]), // thinking after the first delta
			)
		}
	}
	return out
}

func concat(pss ...[]abi.Part) []abi.Part {
	var out []abi.Part
	for _, ps := range pss {
		out = append(out, ps...)
	}
	return out
}

// TestRefusalReasoningHold: with "reasoning": "hold" both Wasm builds
// agree verdict for verdict, and decide each stream as the native
// detector decides it with its reasoning and source parts taken out: a
// refusal after thinking, or after a citation, fails the attempt; any
// other stream passes whole, in order (the held reasoning released with
// the text). Without the option (the default) the same streams detach at
// the thinking and the refusal passes. The native detector with
// driver.ReasoningHold gives the builds' verdicts, verdict for verdict,
// and by default passes the refusal as they do.
func TestRefusalReasoningHold(t *testing.T) {
	ctx := context.Background()
	native := nativeRefusal(t)
	hold := refusalsWith(t, nativeRefusalHold(t), `{"reasoning":"hold"}`)
	names := append([]string{"native"}, refusalBuildNames()...)
	// and on wazero's interpreter (see TestRefusalDifferentialInterpreter)
	eng := wasmtest.NewEngine(true, "")
	t.Cleanup(func() { eng.Close(ctx) })
	for name, bin := range refusalBuilds() {
		names = append(names, name+"-interpreter")
		in, err := eng.Load(ctx, "refusal", bin, wasmtest.Options{Config: []byte(`{"reasoning":"hold"}`)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = in.Close(ctx) })
		hold[name+"-interpreter"] = in
	}
	streams := thinkingStreams()
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		streams = append(streams, plugintest.RandomStream(rng))
	}
	thoughtRefusals := 0
	for _, ps := range streams {
		want, err := plugintest.Run(ctx, native, abi.StreamInfo{ID: 1}, withoutAside(ps))
		require.NoError(t, err)
		var actions []abi.PartAction
		for _, name := range names {
			got, err := plugintest.Run(ctx, hold[name], abi.StreamInfo{ID: 1}, ps)
			require.NoError(t, err, name)
			require.Equal(t, want.Err, got.Err, "%s: the decision over %q", name, ps)
			if got.Err == nil {
				require.Equal(t, ps, got.Out, "%s: every part, once, in order", name)
			}
			if actions == nil {
				actions = got.Actions
			} else {
				require.Equal(t, actions, got.Actions, "%s and native: verdicts over %q", name, ps)
			}
		}
		if want.Err != nil && len(withoutAside(ps)) < len(ps) {
			thoughtRefusals++
		}
	}
	require.Greater(t, thoughtRefusals, 20, "the streams include refusals after thinking or a citation")

	// The default detaches at the thinking: the refusal after it passes.
	def := refusals(t)
	for _, ps := range thinkingStreams()[:3] {
		for name, tr := range def {
			got, err := plugintest.Run(ctx, tr, abi.StreamInfo{ID: 1}, ps)
			require.NoError(t, err)
			require.NoError(t, got.Err, "%s: the default judges no text after thinking or a citation", name)
			require.Equal(t, ps, got.Out, name)
		}
	}
}

// FuzzRefusalReasoningHold extends TestRefusalReasoningHold to fuzzed
// text, thinking and cuts (go test ./plugins -fuzz FuzzRefusalReasoningHold):
// with "reasoning": "hold" the Go and C builds and the native detector with
// driver.ReasoningHold give the same verdicts, and the decision is the
// default native detector's over the text alone.
func FuzzRefusalReasoningHold(f *testing.F) {
	f.Add("I'm sorry, but I can't", "Let me think.", uint8(3), uint8(0))
	f.Add("Sure, here", "", uint8(1), uint8(1))
	f.Add("I\u2019m sorry,\u2003but I cannot", "x", uint8(5), uint8(2))
	ctx := context.Background()
	native := nativeRefusal(f)
	hold := refusalsWith(f, nativeRefusalHold(f), `{"reasoning":"hold"}`)
	names := append([]string{"native"}, refusalBuildNames()...)
	f.Fuzz(func(t *testing.T, text, thought string, size, where uint8) {
		if len(text) > 400 {
			text = text[:400] // the C guest holds at most 1000 bytes of undecided text
		}
		ps := plugintest.TextStream(text, int(size%16)+1)
		aside := plugintest.ReasoningBlock("r", thought)
		if where%3 == 2 {
			aside = []abi.Part{{Kind: abi.KindSource, ID: "t0", Source: &abi.Source{URL: thought}}}
		}
		at := []int{2, 3, min(4, len(ps)-2)}[where%3]
		ps = concat(ps[:at], aside, ps[at:])
		want, err := plugintest.Run(ctx, native, abi.StreamInfo{ID: 1}, withoutAside(ps))
		require.NoError(t, err)
		var actions []abi.PartAction
		for _, name := range names {
			got, err := plugintest.Run(ctx, hold[name], abi.StreamInfo{ID: 1}, ps)
			require.NoError(t, err, name)
			require.Equal(t, want.Err, got.Err, "%s: the decision over %q", name, ps)
			if got.Err == nil {
				require.Equal(t, ps, got.Out, "%s: every part, once, in order", name)
			}
			if name != "native" {
				require.Equal(t, actions, got.Actions, "%s and the one before: verdicts over %q", name, ps)
			}
			actions = got.Actions
		}
	})
}

// TestRefusalLongDeltaJudgedByItsStart: a delta longer than the 1000
// bytes of undecided text a Wasm build holds is judged by its start, as
// the native detector judges it: an answer detaches and a refusal is
// refused (its text cut at the cap), where the builds used to fail on the
// delta's length alone (fail-open: a refusal in one long delta passed),
// and the C build on any part past its scratch buffer.
// Text still undecided at the cap is a failure of the plugin.
func TestRefusalLongDeltaJudgedByItsStart(t *testing.T) {
	ctx := context.Background()
	ts := refusals(t)
	long := strings.Repeat("and so on, ", 300) // 3,300 bytes
	for _, tc := range []struct {
		name, text string
		want       abi.PartAction
	}{
		{"an answer", "Sure, here it is: " + long, abi.PartDetach},
		{"a refusal", "I'm sorry, but I can't help with that, " + long, abi.PartError},
		// Past the 64 KiB scratch buffer, read with the input import.
		{"an answer longer than the scratch buffer", "Sure: " + strings.Repeat(long, 30), abi.PartDetach},
		{"a refusal longer than the scratch buffer", "I cannot help with that. " + strings.Repeat(long, 30), abi.PartError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := plugintest.TextStream(tc.text, len(tc.text))
			for _, name := range append(refusalBuildNames(), "native") {
				got, err := plugintest.Run(ctx, ts[name], abi.StreamInfo{ID: 1}, parts)
				require.NoError(t, err, name)
				require.Equal(t, tc.want, got.Actions[len(got.Actions)-1], "%s: %v", name, got.Actions)
				if tc.want == abi.PartError {
					var re *abi.RefusalError
					require.ErrorAs(t, got.Err, &re, name)
					require.True(t, strings.HasPrefix(tc.text, re.Text), name)
					if name != "native" {
						require.Len(t, re.Text, 1000, "%s: the text held, cut at the cap", name)
					}
				}
			}
		})
	}
	for _, name := range refusalBuildNames() {
		_, err := plugintest.Run(ctx, ts[name], abi.StreamInfo{ID: 1}, plugintest.TextStream(strings.Repeat(" ", 1500)+"I'm sorry", 2000))
		require.Error(t, err, "%s: undecided past the cap fails the plugin", name)
	}
}
