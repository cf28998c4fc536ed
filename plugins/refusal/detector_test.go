package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
	"github.com/retryhost/retryhost/plugins/internal/wasmtest"
	"github.com/retryhost/retryhost/plugins/sdk"
)

// backends run every test natively and on the built refusal.wasm.
var backends = []plugintest.Backend{plugintest.Native("refusal"), plugintest.Wasm("refusal", "wasm", "refusal.wasm")}

func load(t *testing.T, b plugintest.Backend, config string) plugintest.Plugin {
	t.Helper()
	p, err := b.Load(t, []byte(config))
	require.NoError(t, err)
	return p
}

func TestConfig(t *testing.T) {
	for i, tc := range []struct {
		name, config string
		want         abi.TransformPolicy
		err          string
	}{
		{name: "empty", config: ""},
		{name: "defaults", config: `{}`},
		{name: "policy", config: `{"fail":"closed","on_cap":"fail","max_held_parts":9,"max_held_bytes":100,"max_hold_time":"2s"}`,
			want: abi.TransformPolicy{Fail: abi.FailClosed, OnCap: abi.CapFail, MaxHeldParts: 9, MaxHeldBytes: 100, MaxHoldTime: 2 * time.Second}},
		{name: "phrases", config: `{"phrases":["nope"]}`},
		{name: "typo", config: `{"phrase":["nope"]}`, err: "unknown field"},
		{name: "empty phrase", config: `{"phrases":["  "]}`, err: "empty once normalised"},
		{name: "bad fail", config: `{"fail":"maybe"}`, err: `"fail": must be`},
		{name: "bad cap", config: `{"on_cap":"explode"}`, err: `"on_cap": must be`},
		{name: "reasoning hold", config: `{"reasoning":"hold"}`},
		{name: "reasoning detach", config: `{"reasoning":"detach"}`},
		{name: "bad reasoning", config: `{"reasoning":"skip"}`, err: `"reasoning": must be "detach" or "hold"`},
		{name: "bad time", config: `{"max_hold_time":"soon"}`, err: "max_hold_time"},
		{name: "negative cap", config: `{"max_held_parts":-1}`, err: "0-2147483647"},
		{name: "huge cap", config: `{"max_held_bytes":2147483648}`, err: "0-2147483647"},
		{name: "129 phrases", config: `{"phrases":["a"` + strings.Repeat(`,"a"`, 128) + `]}`, err: "more than 128 phrases"},
		{name: "long phrase", config: `{"phrases":["` + strings.Repeat("a", 201) + `"]}`, err: "longer than 200 bytes"},
		{name: "null", config: `{"fail":null}`, err: "null is not a value"},
		{name: "duplicate", config: `{"fail":"open","fail":"closed"}`, err: "duplicate field"},
		{name: "not json", config: `phrases=x`, err: "config:"},
	} {
		for _, b := range backends {
			if b.Name != "native" && plugintest.Race && i%4 != 0 {
				continue // under -race, a sample of the configs crosses the boundary
			}
			t.Run(b.Name+"/"+tc.name, func(t *testing.T) {
				p, err := b.Load(t, []byte(tc.config))
				if tc.err != "" {
					require.ErrorIs(t, err, sdk.ErrConfigRejected)
					require.ErrorContains(t, err, tc.err)
					return
				}
				require.NoError(t, err)
				require.Equal(t, tc.want, p.Policy())
			})
		}
	}
}

func TestStreams(t *testing.T) {
	ctx := context.Background()
	info := abi.StreamInfo{ID: 1, Model: "a/b", Attempt: 1}
	for _, tc := range []struct {
		name   string
		config string
		parts  []abi.Part
		phrase string // a refusal with this phrase, or "" for none
		calls  int    // parts the transform was called for before it decided
	}{
		{name: "refusal in one delta", parts: plugintest.TextStream("I'm sorry, but I can't help with that.", 100),
			phrase: "i'm sorry, but i can't", calls: 4},
		{name: "refusal byte by byte", parts: plugintest.TextStream("I’m sorry, but I can’t help.", 1),
			phrase: "i'm sorry, but i can't", calls: 3 + len("I’m sorry, but I can’t")},
		{name: "divergent answer detaches at once", parts: plugintest.TextStream("Sure! Here is the code.", 3), calls: 4},
		{name: "near miss detaches", parts: plugintest.TextStream("I'm sorry to hear that.", 5), calls: 3 + 3},
		{name: "tool call detaches", parts: append(plugintest.TextStream("")[:2],
			abi.Part{Kind: abi.KindToolCall, ID: "c", Tool: &abi.ToolInfo{Name: "f", Input: "{}"}},
			abi.Part{Kind: abi.KindFinish, Finish: &abi.Finish{}}), calls: 3},
		{name: "text end detaches", parts: plugintest.TextStream("I", 1), calls: 5},
		{name: "upstream ends undecided: the held parts pass", parts: plugintest.TextStream("I'm sorry", 1)[:3+9], calls: 12},
		{name: "custom phrase", config: `{"phrases":["Nope."]}`, parts: plugintest.TextStream("NOPE. never", 2),
			phrase: "nope.", calls: 6},
		{name: "thinking detaches by default", parts: thinking(plugintest.TextStream("I'm sorry, but I can't", 5)), calls: 3},
		{name: "thinking held, then the refusal", config: `{"reasoning":"hold"}`,
			parts: thinking(plugintest.TextStream("I'm sorry, but I can't", 5)), phrase: "i'm sorry, but i can't", calls: 5 + 1 + 5},
		{name: "thinking held, then an answer detaches", config: `{"reasoning":"hold"}`,
			parts: thinking(plugintest.TextStream("Sure! Here it is.", 5)), calls: 5 + 1 + 1},
		{name: "a citation held, then the refusal", config: `{"reasoning":"hold"}`,
			parts: cited(plugintest.TextStream("I'm sorry, but I can't", 5)), phrase: "i'm sorry, but i can't", calls: 4 + 5},
		{name: "a citation detaches by default", parts: cited(plugintest.TextStream("I'm sorry, but I can't", 5)), calls: 4},
		{name: "tool call detaches under hold", config: `{"reasoning":"hold"}`, parts: append(thinking(plugintest.TextStream(""))[:5],
			abi.Part{Kind: abi.KindToolCall, ID: "c", Tool: &abi.ToolInfo{Name: "f", Input: "{}"}},
			abi.Part{Kind: abi.KindFinish, Finish: &abi.Finish{}}), calls: 6},
		{name: "custom list drops defaults", config: `{"phrases":["Nope."]}`,
			parts: plugintest.TextStream("I'm sorry, but I can't", 50), calls: 4},
	} {
		for _, b := range backends {
			t.Run(b.Name+"/"+tc.name, func(t *testing.T) {
				p := load(t, b, tc.config)
				r, err := plugintest.Run(ctx, p, info, tc.parts)
				require.NoError(t, err)
				require.Equal(t, tc.calls, r.Calls, "actions %v", r.Actions)
				if tc.phrase == "" {
					require.NoError(t, r.Err)
					require.Equal(t, tc.parts, r.Out, "every part passes, once, in order")
					return
				}
				var re *abi.RefusalError
				require.ErrorAs(t, r.Err, &re)
				require.Equal(t, tc.phrase, re.Phrase)
				require.Equal(t, "refusal", re.Transform)
				require.Empty(t, r.Out, "nothing of a refusal reaches the caller")
			})
		}
	}
}

// TestManyStreamsInterleaved checks that per-stream state is per stream:
// one instance serves many streams whose calls interleave.
func TestManyStreamsInterleaved(t *testing.T) {
	ctx := context.Background()
	p := load(t, backends[0], "")
	native := p.(*sdk.Plugin)
	refuse := plugintest.TextStream("I'm sorry, but I cannot do it", 2)
	answer := plugintest.TextStream("I'm glad to help", 2)
	a, err := p.Open(ctx, abi.StreamInfo{ID: 1})
	require.NoError(t, err)
	b, err := p.Open(ctx, abi.StreamInfo{ID: 2})
	require.NoError(t, err)
	var errA error
	detachedB := false
	for i := 0; i < max(len(refuse), len(answer)); i++ {
		if i < len(refuse) && errA == nil {
			v, err := a.Part(ctx, &refuse[i])
			require.NoError(t, err)
			errA = v.Err
		}
		if i < len(answer) && !detachedB {
			v, err := b.Part(ctx, &answer[i])
			require.NoError(t, err)
			require.NotEqual(t, abi.PartError, v.Action)
			detachedB = v.Action == abi.PartDetach
		}
	}
	var re *abi.RefusalError
	require.ErrorAs(t, errA, &re)
	require.Equal(t, "I'm sorry, but I cannot ", re.Text, "the text held when it matched, as sent")
	require.True(t, detachedB)
	require.Zero(t, native.OpenStreams(), "auto_close: both streams were forgotten at their ERROR and DETACH")
	a.Close() // the host's close after an auto-close is harmless
	b.Close()
	require.Zero(t, native.OpenStreams())
}

// TestStaticVerdicts: the plugin declares exactly what it answers without
// reading a part (the preamble held, every kind but a text delta
// detached), and auto_close; natively sdk.Load checks on every part of
// every test above that the streams keep that promise.
func TestStaticVerdicts(t *testing.T) {
	want := map[abi.PartKind]abi.PartAction{abi.KindStreamStart: abi.PartHold, abi.KindResponseMeta: abi.PartHold, abi.KindTextStart: abi.PartHold}
	for k := abi.KindTextEnd; k <= abi.KindError; k++ {
		want[k] = abi.PartDetach
	}
	native := load(t, backends[0], "").(*sdk.Plugin)
	require.Equal(t, abi.Hints{Static: want, AutoClose: true}, native.Hints())
	_, h := load(t, backends[1], "").(*wasmtest.Instance).Hints()
	require.Equal(t, abi.Hints{Static: want, AutoClose: true}, h)
}

// TestStreamStatesReused: closed streams' states are recycled (a free
// list); a recycled state starts clean, so the refusal's text is exact.
func TestStreamStatesReused(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			p := load(t, b, "")
			long := plugintest.TextStream("I'm sorry, but I can't help with that, and here is a long explanation of why.", 200)
			for i := range 4 {
				parts := plugintest.TextStream("I'm sorry, but I can't do it.", 2)
				if i%2 == 1 {
					parts = long
				}
				r, err := plugintest.Run(ctx, p, abi.StreamInfo{ID: uint64(i)}, parts)
				require.NoError(t, err)
				var re *abi.RefusalError
				require.ErrorAs(t, r.Err, &re)
				want := "I'm sorry, but I can't"
				if i%2 == 1 {
					want = "I'm sorry, but I can't help with that, and here is a long explanation of why."
				}
				require.Equal(t, want, re.Text, "stream %d", i)
			}
		})
	}
}

// thinking puts a thinking block (start, a delta, end) after ps's stream
// start and metadata, as an answer with extended thinking opens.
func thinking(ps []abi.Part) []abi.Part {
	think := plugintest.ReasoningBlock("r", "The user asks for x.")
	return append(append(ps[:2:2], think...), ps[2:]...)
}

// cited puts a citation after ps's text start, as a text that opens with one.
func cited(ps []abi.Part) []abi.Part {
	src := abi.Part{Kind: abi.KindSource, ID: "t0", Source: &abi.Source{URL: "https://example.com", Title: "x"}}
	return append(append(ps[:3:3], src), ps[3:]...)
}
