package e2e_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
)

// thinkingThen is an answer with extended thinking: stream start and
// metadata, a thinking block of n deltas, a raw chunk (the provider's
// event, which never reaches a transform: ABI.md §6.5), then text.
func thinkingThen(text string, n int) []abi.Part {
	ps := plugintest.TextStream(text, 4)
	think := plugintest.ReasoningBlock("r0", strings.Split(strings.Repeat("thinking… ", n), " ")[:n]...)
	// The provider's raw chunk comes before the part decoded from it, as
	// the adapters emit it: here the block's stop, before its end.
	end := think[len(think)-1]
	think = append(think[:len(think)-1], abi.Part{Kind: abi.KindRaw, Raw: map[string]any{"type": "content_block_stop"}}, end)
	return append(append(ps[:2:2], think...), ps[2:]...)
}

// thinkingCase is a first answer, the refusal detector's config, and
// whether the answer fails over to the second model.
type thinkingCase struct {
	name, config string
	first        []abi.Part
	failed       bool
}

func thinkingCases() []thinkingCase {
	refusal := "I’m sorry, but I can’t help with that."
	return []thinkingCase{
		{"hold: thinking then refusal fails over", `{"reasoning":"hold"}`, thinkingThen(refusal, 6), true},
		{"hold: thinking then answer passes whole", `{"reasoning":"hold"}`, thinkingThen("I'm sorry to hear that! Here is a plan.", 6), false},
		{"hold: a citation then refusal fails over", `{"reasoning":"hold"}`, append(plugintest.TextStream(refusal, 5)[:3:3],
			append([]abi.Part{{Kind: abi.KindSource, ID: "t0", Source: &abi.Source{URL: "https://example.com"}}}, plugintest.TextStream(refusal, 5)[3:]...)...), true},
		{"default: thinking then refusal passes", ``, thinkingThen(refusal, 6), false},
		{"detach: thinking then refusal passes", `{"reasoning":"detach"}`, thinkingThen(refusal, 6), false},
		{"hold: thinking past the cap is flushed", `{"reasoning":"hold","max_held_parts":4}`, thinkingThen(refusal, 6), false},
	}
}

// TestStreamThinkingRefusalFailsOver: through the product host and the
// stream driver, an answer that thinks and then refuses fails over to the
// second model when the refusal detector (Go and C guests, guarded and
// trusted) has "reasoning": "hold", and the caller sees only the second
// answer, complete and once (the held thinking and raw chunk discarded
// with the refusal). An answer that thinks and then answers passes whole
// and in order. Without the option (the default) the detector detaches at
// the thinking and the refusal reaches the caller, as before; with the
// option, a thinking longer than the hold cap is flushed at the cap
// (fail-open) and its refusal passes too.
func TestStreamThinkingRefusalFailsOver(t *testing.T) {
	ctx := context.Background()
	for mode, rt := range runtimes(t) {
		rule, err := rt.Load(ctx, "errmatch", plugins.ErrMatch, host.WithConfig([]byte(
			`{"rules":[{"class":["refusal"],"switch":{"model":"q/b"}}]}`)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = rule.Close(ctx) })
		for guest, wasm := range map[string][]byte{"go": plugintest.GoRef("refusal"), "c": plugins.Refusal} {
			for _, tc := range thinkingCases() {
				t.Run(mode+"/"+guest+"/"+tc.name, func(t *testing.T) {
					detector, err := rt.Load(ctx, "refusal", wasm, host.WithConfig([]byte(tc.config)))
					require.NoError(t, err)
					defer detector.Close(ctx)
					a := &streamer{key: "p/a", parts: tc.first}
					b := &streamer{key: "q/b", parts: thinkingThen("Here is the answer you asked for.", 2)}
					var switched []string
					r, err := driver.New(a, driver.WithModels(b), driver.WithRules(rule),
						driver.WithOnRetry(func(_ context.Context, info driver.RetryInfo) *driver.Overrides {
							switched = append(switched, info.Failed.Class.String()+"->"+info.Next.Key())
							return nil
						}))
					require.NoError(t, err)
					m, err := driver.NewRetryableModel(r, driver.WithTransforms(detector))
					require.NoError(t, err)
					s, err := m.Stream(ctx, &driver.Request{})
					require.NoError(t, err)
					got := readAll(t, s)
					if tc.failed {
						require.Equal(t, b.parts, got, "the second model's answer, complete and once")
						require.Equal(t, []string{"refusal->q/b"}, switched)
					} else {
						require.Equal(t, a.parts, got, "the first answer, whole and in order")
						require.Empty(t, switched)
						require.Zero(t, b.opened.Load())
					}
					require.Equal(t, a.opened.Load(), a.closed.Load(), "every upstream closed")
					require.Equal(t, b.opened.Load(), b.closed.Load(), "every upstream closed")
				})
			}
		}
	}
}

// TestGenerateThinkingRefusalFailsOver: the same for a non-streamed
// answer, whose content goes through the transforms too: with
// "reasoning": "hold" a refusal after thinking fails over to the second
// model; by default the first answer, refusal included, is returned.
func TestGenerateThinkingRefusalFailsOver(t *testing.T) {
	ctx := context.Background()
	rt := runtimes(t)["guarded"]
	rule, err := rt.Load(ctx, "errmatch", plugins.ErrMatch, host.WithConfig([]byte(
		`{"rules":[{"class":["refusal"],"switch":{"model":"q/b"}}]}`)))
	require.NoError(t, err)
	defer rule.Close(ctx)
	thoughtRefusal := func() (*driver.Response, error) {
		content := append(plugintest.ReasoningBlock("r0", "The user wants", " something I must decline."),
			abi.Part{Kind: abi.KindTextDelta, Delta: "I'm sorry, but I can't help with that."})
		return &driver.Response{Content: content, Finish: abi.FinishReason{Unified: abi.ReasonStop}}, nil
	}
	for guest, wasm := range map[string][]byte{"go": plugintest.GoRef("refusal"), "c": plugins.Refusal} {
		for config, want := range map[string]string{`{"reasoning":"hold"}`: "the answer", ``: "I'm sorry, but I can't help with that."} {
			t.Run(guest+"/"+config, func(t *testing.T) {
				detector, err := rt.Load(ctx, "refusal", wasm, host.WithConfig([]byte(config)))
				require.NoError(t, err)
				defer detector.Close(ctx)
				a := &scripted{key: "p/a", script: []func() (*driver.Response, error){thoughtRefusal}}
				b := &scripted{key: "q/b", script: []func() (*driver.Response, error){answer("the answer", abi.ReasonStop)}}
				r, err := driver.New(a, driver.WithModels(b), driver.WithRules(rule))
				require.NoError(t, err)
				m, err := driver.NewRetryableModel(r, driver.WithTransforms(detector))
				require.NoError(t, err)
				resp, err := m.Generate(ctx, &driver.Request{})
				require.NoError(t, err)
				require.Equal(t, want, resp.Text())
			})
		}
	}
}

// TestThinkingHeldUnderTheHoldCaps: held thinking counts for the
// detector's hold caps like held text, and on_cap decides at a cap: "fail"
// fails the attempt with a HoldCapError and the caller sees nothing;
// "flush" releases every part once, in order, and the refusal after the
// thinking passes (the detector has detached).
func TestThinkingHeldUnderTheHoldCaps(t *testing.T) {
	ctx := context.Background()
	rt := plugintest.Runtime(t)
	for guest, wasm := range map[string][]byte{"go": plugintest.GoRef("refusal"), "c": plugins.Refusal} {
		for _, onCap := range []string{"fail", "flush"} {
			t.Run(guest+"/"+onCap, func(t *testing.T) {
				p, err := rt.Load(ctx, "refusal", wasm, host.WithConfig([]byte(
					`{"reasoning":"hold","max_held_parts":4,"on_cap":"`+onCap+`"}`)))
				require.NoError(t, err)
				defer p.Close(ctx)
				m := &streamer{key: "p/a", parts: thinkingThen("I'm sorry, but I can't help with that.", 8)}
				out, err := throughPlugin(ctx, t, m, p)
				if onCap == "fail" {
					var hc *abi.HoldCapError
					require.ErrorAs(t, err, &hc)
					require.Equal(t, 4, hc.Parts)
					require.Empty(t, out)
					return
				}
				require.NoError(t, err)
				require.Equal(t, m.parts, out, "flushed at the cap, every part once, in order")
			})
		}
	}
}

// TestStreamThinkingRefusalFailsOverNative: the same answers through the
// stream driver with the native detector, driver.ReasoningHold for the
// plugins' "reasoning": "hold" (and the default or ReasoningDetach for
// theirs), give the same outcomes: fail over to the second model, which
// the caller sees complete and once, or the first answer whole. The
// native detector has no hold-cap config: its thinking past the driver's
// default cap (256 parts) is flushed, and the refusal after it passes.
func TestStreamThinkingRefusalFailsOverNative(t *testing.T) {
	ctx := context.Background()
	cases := thinkingCases()
	cases[len(cases)-1].first = thinkingThen("I’m sorry, but I can’t help with that.", 300)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := driver.RefusalConfig{}
			if strings.Contains(tc.config, `"hold"`) {
				c.Reasoning = driver.ReasoningHold
			}
			detector, err := driver.NewRefusalDetectorWith(c)
			require.NoError(t, err)
			a := &streamer{key: "p/a", parts: tc.first}
			b := &streamer{key: "q/b", parts: thinkingThen("Here is the answer you asked for.", 2)}
			r, err := driver.New(a, driver.WithRules(driver.OnClass(driver.ClassRefusal).Switch(b)))
			require.NoError(t, err)
			m, err := driver.NewRetryableModel(r, driver.WithTransforms(detector))
			require.NoError(t, err)
			s, err := m.Stream(ctx, &driver.Request{})
			require.NoError(t, err)
			got := readAll(t, s)
			if tc.failed {
				require.Equal(t, b.parts, got, "the second model's answer, complete and once")
			} else {
				require.Equal(t, a.parts, got, "the first answer, whole and in order")
				require.Zero(t, b.opened.Load())
			}
			require.Equal(t, a.opened.Load(), a.closed.Load(), "every upstream closed")
			require.Equal(t, b.opened.Load(), b.closed.Load(), "every upstream closed")
		})
	}
}
