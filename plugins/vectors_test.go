package plugins_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
)

// TestRefusalcoreVectors checks every Wasm build of the refusal plugin
// (Go, C, AssemblyScript, Rust) against
// refusalcore's golden decisions (plugins/refusalcore/testdata/vectors.json):
// the text sent as one delta after the preamble must give HOLD for "hold",
// ERROR with the phrase for "match", DETACH for "diverge". With
// "reasoning": "hold" the same text decides the same after a thinking
// block and a citation, which are held.
func TestRefusalcoreVectors(t *testing.T) {
	b, err := os.ReadFile("refusalcore/testdata/vectors.json")
	require.NoError(t, err)
	var vs []struct {
		Text    string `json:"text"`
		TextHex string `json:"text_hex"`
		Outcome string `json:"outcome"`
		Phrase  string `json:"phrase"`
	}
	require.NoError(t, json.Unmarshal(b, &vs))
	require.NotEmpty(t, vs)
	hexed := 0
	for _, v := range vs {
		if v.TextHex != "" {
			hexed++
		}
	}
	require.Positive(t, hexed, "the vectors include invalid UTF-8, carried as text_hex")
	ctx := context.Background()
	preambles := map[string][]abi.Part{
		"": {{Kind: abi.KindStreamStart}, {Kind: abi.KindTextStart, ID: "t"}},
		`{"reasoning":"hold"}`: append(append([]abi.Part{{Kind: abi.KindStreamStart}}, plugintest.ReasoningBlock("r", "Hmm.", " I should")...),
			abi.Part{Kind: abi.KindTextStart, ID: "t"}, abi.Part{Kind: abi.KindSource, ID: "t", Source: &abi.Source{URL: "https://example.com"}}),
	}
	for run, bin := range refusalBuilds() {
		for config, preamble := range preambles {
			name := run + " " + config
			in := load(t, "refusal", bin, config, false)
			for _, v := range vs {
				text := v.Text
				if v.TextHex != "" {
					raw, err := hex.DecodeString(v.TextHex)
					require.NoError(t, err)
					text = string(raw)
				}
				s, err := in.Open(ctx, abi.StreamInfo{})
				require.NoError(t, err)
				for _, p := range preamble {
					got, err := s.Part(ctx, &p)
					require.NoError(t, err)
					require.Equal(t, abi.PartHold, got.Action)
				}
				got, err := s.Part(ctx, &abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: text})
				require.NoError(t, err)
				s.Close()
				switch v.Outcome {
				case "hold":
					require.Equal(t, abi.PartHold, got.Action, "%s %q", name, text)
				case "diverge":
					require.Equal(t, abi.PartDetach, got.Action, "%s %q", name, text)
				case "match":
					require.Equal(t, abi.PartError, got.Action, "%s %q", name, text)
					var re *abi.RefusalError
					require.ErrorAs(t, got.Err, &re)
					require.Equal(t, v.Phrase, re.Phrase)
					require.Equal(t, text, re.Text)
				default:
					t.Fatalf("unknown outcome %q", v.Outcome)
				}
			}
		}
	}
}
