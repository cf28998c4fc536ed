package refusalcore

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json from the current decisions")

// vector is one decision of the default matcher, for other implementations
// of the detector (the Wasm guests) to be checked against byte for byte.
type vector struct {
	// Text is the leading text so far, as sent; TextHex holds it instead
	// (hex) when it is not valid UTF-8, which JSON strings cannot carry.
	Text       string `json:"text,omitempty"`
	TextHex    string `json:"text_hex,omitempty"`
	Normalized string `json:"normalized"` // Normalize(Text)
	Outcome    string `json:"outcome"`    // hold, match or diverge
	Phrase     string `json:"phrase,omitempty"`
}

var vectorTexts = []string{
	"", " ", "\n\t ", "I", "i", "I'", "I’", "I’m", "I'm ", "I'm  sorry", "I’M SORRY, BUT I CAN’T",
	"I'm sorry, but I can't help with that.", "I'm sorry, but I cannot", "I'm sorry, I can",
	"I'm sorry, I can't", "I'm sorry to hear that", "Sorry", "Sorry, but I c", "Sorry, but I can't do it",
	"As an AI", "As an AI language model, I", "As an AI, I can't", "As an AI, I love", "as\u00a0an\u2003ai language model",
	"My apologies, but I can't", "I apologise, but I cannot", "I apologize", "I cannot help with this",
	"I can't assist with that", "I cannot provide", "I'm unable to help with", "I'm not able to help with that",
	"I won't be able to help with", "Sure!", "Here is", "  Certainly, here", "I think", "I'm happy to help",
	"I can help", "I can’t help with", "I\u02bcm sorry, but I can\u02bct", "I'm sorry, but I ca\xe2\x80",
	"ÀS AN AI", "I am sorry, but I can't", "I am unable to help with", "I'm sorry, but I won't",
}

func TestVectors(t *testing.T) {
	m, err := New(DefaultPhrases())
	require.NoError(t, err)
	got := make([]vector, len(vectorTexts))
	for i, text := range vectorTexts {
		o, p := m.DecideText(text)
		got[i] = vector{Text: text, Normalized: Normalize(text), Outcome: o.String(), Phrase: p}
		if !utf8.ValidString(text) {
			got[i].Text, got[i].TextHex = "", hex.EncodeToString([]byte(text))
		}
	}
	const path = "testdata/vectors.json"
	if *update {
		b, err := json.MarshalIndent(got, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, append(b, '\n'), 0o644))
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var want []vector
	require.NoError(t, json.Unmarshal(b, &want))
	require.Equal(t, want, got)
}

// TestVectors_incremental: the golden decisions hold for the incremental
// State too, the text fed whole and byte by byte.
func TestVectors_incremental(t *testing.T) {
	m, err := New(DefaultPhrases())
	require.NoError(t, err)
	b, err := os.ReadFile("testdata/vectors.json")
	require.NoError(t, err)
	var want []vector
	require.NoError(t, json.Unmarshal(b, &want))
	require.NotEmpty(t, want)
	var s State
	for _, v := range want {
		text := v.Text
		if v.TextHex != "" {
			raw, err := hex.DecodeString(v.TextHex)
			require.NoError(t, err)
			text = string(raw)
		}
		for _, step := range []int{len(text) + 1, 1, 2} {
			s.Reset(m)
			o, p := s.Feed("")
			for i := 0; i < len(text); i += step {
				o, p = s.Feed(text[i:min(i+step, len(text))])
			}
			require.Equal(t, v.Outcome, o.String(), "%q in %d-byte deltas", text, step)
			require.Equal(t, v.Phrase, p, "%q in %d-byte deltas", text, step)
		}
	}
}
