package plugins_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
	"github.com/retryhost/retryhost/plugins/internal/wasmtest"
)

// The guest SDKs other than Go's (plugins/sdk/assemblyscript, …) each
// build a condition, a transform and the refusal detector. The refusal
// builds join the differential and vector tests of the other builds
// (refusalBuilds); the tests here check what is particular to them: the
// config rules, the product host, and the two examples.

// sdkLangs are the guest SDKs whose examples are committed, by the name of
// their directory under plugins/sdk.
var sdkLangs = []string{"assemblyscript", "rust"}

// TestSDKRefusalAcceptsSameConfigs: over the refusal config corpus, its
// mutations and the documented limits, each SDK's refusal build accepts
// and rejects the configs the C build does (which TestBuildsAcceptSameConfigs
// proves equal to the Go build, and loads a hundred times faster), with a
// reason that says "config" (and names the limit), and declares the same
// policy and hints.
func TestSDKRefusalAcceptsSameConfigs(t *testing.T) {
	ctx := context.Background()
	corpus := append([]string(nil), configCorpus["refusal"]...)
	rng := rand.New(rand.NewPCG(21, 22))
	const alphabet = "{}[]\",:\\ \nu0123456789.-eE+tfnab\x00\xc3\xa9"
	for range 40 {
		corpus = append(corpus, mutate(rng, configCorpus["refusal"][rng.IntN(len(configCorpus["refusal"]))], alphabet))
	}
	whys := map[string]string{}
	for _, tc := range limitConfigs() {
		if tc.plugin == "refusal" {
			corpus = append(corpus, tc.within, tc.past)
			whys[tc.past] = tc.why
		}
	}
	for _, cfg := range corpus {
		g, gerr := plugintest.Engine().Load(ctx, "refusal", plugins.Refusal, wasmtest.Options{Config: []byte(cfg)})
		if g != nil {
			t.Cleanup(func() { _ = g.Close(ctx) })
		}
		for _, lang := range sdkLangs {
			in, err := plugintest.Engine().Load(ctx, "refusal", plugintest.SDKBuild(lang, "refusal"), wasmtest.Options{Config: []byte(cfg)})
			require.Equal(t, gerr == nil, err == nil, "%s: config %q:\n  c:  %v\n  %s: %v", lang, cfg, gerr, lang, err)
			if err != nil {
				require.ErrorContains(t, err, "config", "%s says why", lang)
				if why := whys[cfg]; why != "" {
					require.ErrorContains(t, err, why, lang)
				}
				continue
			}
			gp, gh := g.Hints()
			p, h := in.Hints()
			require.Equal(t, gp, p, "%s: config %q: policy", lang, cfg)
			require.Equal(t, gh, h, "%s: config %q: hints", lang, cfg)
			require.NoError(t, in.Close(ctx))
		}
	}
}

// TestSDKRefusalThroughHost runs refusalcore's vectors through the product
// host (guarded, honouring the static verdicts, opening streams lazily
// with retryhost_open_part): each SDK's refusal build decides each vector
// as the golden file says.
func TestSDKRefusalThroughHost(t *testing.T) {
	ctx := context.Background()
	b, err := os.ReadFile("refusalcore/testdata/vectors.json")
	require.NoError(t, err)
	var vs []struct {
		Text    string `json:"text"`
		TextHex string `json:"text_hex"`
		Outcome string `json:"outcome"`
		Phrase  string `json:"phrase"`
	}
	require.NoError(t, json.Unmarshal(b, &vs))
	rt := plugintest.Runtime(t)
	for _, lang := range sdkLangs {
		p, err := rt.Load(ctx, "refusal-"+lang, plugintest.SDKBuild(lang, "refusal"), host.WithInstances(1))
		require.NoError(t, err)
		require.True(t, p.IsTransform())
		for _, v := range vs {
			text := v.Text
			if v.TextHex != "" {
				raw, err := hex.DecodeString(v.TextHex)
				require.NoError(t, err)
				text = string(raw)
			}
			for _, size := range []int{len(text) + 1, 3} {
				r, err := plugintest.Run(ctx, p, abi.StreamInfo{ID: 1}, plugintest.TextStream(text, size))
				require.NoError(t, err)
				if v.Outcome == "match" {
					var re *abi.RefusalError
					require.ErrorAs(t, r.Err, &re, "%s %q", lang, text)
					require.Equal(t, v.Phrase, re.Phrase)
					require.True(t, strings.HasPrefix(text, re.Text), "the text held when it matched: %q", re.Text)
					if size > len(text) {
						require.Equal(t, text, re.Text)
					}
				} else {
					require.NoError(t, r.Err, "%s %q", lang, text)
				}
			}
		}
	}
}

// TestSDKConditionExample: the condition example retries a 429 twice
// after the server's Retry-After, then switches to the configured
// fallback, switches at once on overload, and has no opinion otherwise;
// it rejects a config without a fallback or with an unknown key.
func TestSDKConditionExample(t *testing.T) {
	ctx := context.Background()
	rt := plugintest.Runtime(t)
	for _, lang := range sdkLangs {
		wasm := plugintest.SDKBuild(lang, "condition")
		p, err := rt.Load(ctx, "condition-"+lang, wasm, host.WithConfig([]byte(`{"fallback": "backup/model"}`)))
		require.NoError(t, err)
		require.True(t, p.IsCondition())
		for _, tc := range []struct {
			a    abi.Attempt
			want abi.Decision
		}{
			{abi.Attempt{Number: 1, Status: 429, Class: abi.ClassRateLimit, RetryAfter: time.Second},
				abi.Decision{Action: abi.ActionRetry, UseRetryAfter: true, MaxAttempts: 3}},
			{abi.Attempt{Number: 3, Status: 429, Class: abi.ClassRateLimit, RetryAfter: -1, Model: "main/model",
				Earlier: []abi.AttemptSummary{{Class: abi.ClassRateLimit, Status: 429, Model: "main/model"}}},
				abi.Decision{Action: abi.ActionSwitch, Model: "backup/model"}},
			{abi.Attempt{Number: 1, Status: 529, Class: abi.ClassOverloaded, RetryAfter: -1, Message: "overloaded"},
				abi.Decision{Action: abi.ActionSwitch, Model: "backup/model"}},
			{abi.Attempt{Number: 1, Status: 500, Class: abi.ClassServer, RetryAfter: -1}, abi.Decision{}},
		} {
			got, err := p.Decide(ctx, &tc.a)
			require.NoError(t, err, lang)
			require.Equal(t, tc.want, got, "%s: %+v", lang, tc.a)
		}
		for cfg, why := range map[string]string{
			``:                                   "fallback model is required",
			`{"fallback": ""}`:                   "fallback model is required",
			`{"fallback": "a", "extra": 1}`:      `unknown field "extra"`,
			`{"fallback": "a", "fallback": "b"}`: "duplicate field",
			`{"fallback": null}`:                 "null is not a value",
		} {
			_, err := rt.Load(ctx, "condition-"+lang, wasm, host.WithConfig([]byte(cfg)))
			require.ErrorIs(t, err, host.ErrConfigRejected, "%s: %q", lang, cfg)
			require.ErrorContains(t, err, why, "%s: %q", lang, cfg)
		}
	}
}

// TestSDKTransformExample: the transform example replaces "secret" in
// text deltas and passes every other part, fail-closed.
func TestSDKTransformExample(t *testing.T) {
	ctx := context.Background()
	rt := plugintest.Runtime(t)
	for _, lang := range sdkLangs {
		p, err := rt.Load(ctx, "transform-"+lang, plugintest.SDKBuild(lang, "transform"))
		require.NoError(t, err)
		require.Equal(t, abi.FailClosed, p.FailPolicy())
		// The example judges each delta alone: a word cut across two
		// deltas is not seen (a real redactor holds the text around it).
		parts := plugintest.TextStream("the secret is out, secret! ", 4, 6, 9, 6, 2)
		r, err := plugintest.Run(ctx, p, abi.StreamInfo{ID: 1}, parts)
		require.NoError(t, err)
		require.NoError(t, r.Err)
		var text strings.Builder
		for _, q := range r.Out {
			if q.Kind == abi.KindTextDelta {
				require.Equal(t, "t0", q.ID)
				text.WriteString(q.Delta)
			}
		}
		require.Equal(t, "the ****** is out, ******! ", text.String(), lang)
		require.Equal(t, parts[0], r.Out[0], "the framing passes")
		require.Equal(t, parts[len(parts)-1], r.Out[len(r.Out)-1])
		_, err = rt.Load(ctx, "transform-"+lang, plugintest.SDKBuild(lang, "transform"), host.WithConfig([]byte("x")))
		require.ErrorContains(t, err, "takes none")
	}
}

// TestSDKTableExample: each SDK's table example keeps its streams in a
// fixed table of two and refuses a third for lack of room (NO_ROOM in
// AssemblyScript, OPEN_NO_ROOM_REASON in Rust), which the host treats as
// lack of capacity, not as a failure of the plugin; a closed stream frees
// its slot.
func TestSDKTableExample(t *testing.T) {
	for _, lang := range sdkLangs {
		t.Run(lang, func(t *testing.T) {
			plugintest.CheckNoRoom(t, plugintest.LoadNoRoom(t, "table", plugintest.SDKBuild(lang, "table"), nil), 2)
		})
	}
}

// TestSDKExamplesInDocs: the complete examples of docs/plugins.md are the
// condition examples these tests load, verbatim.
func TestSDKExamplesInDocs(t *testing.T) {
	doc, err := os.ReadFile("../docs/plugins.md")
	require.NoError(t, err)
	for _, src := range []string{"sdk/assemblyscript/examples/condition/index.ts", "sdk/rust/examples/condition/main.rs"} {
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.Contains(t, string(doc), string(b), "docs/plugins.md quotes %s whole", src)
	}
}
