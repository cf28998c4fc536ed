package driver

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/refusalcore"
)

func TestNewRefusalDetector(t *testing.T) {
	_, err := NewRefusalDetector("fine", "   ")
	require.ErrorIs(t, err, refusalcore.ErrEmptyPhrase)
	d, err := NewRefusalDetector("Nope")
	require.NoError(t, err)
	require.Equal(t, "refusal", d.Name())
	require.Equal(t, abi.FailOpen, d.Policy().Fail)
}

func TestRefusalDetector_nonTextPartsDetach(t *testing.T) {
	for _, k := range []PartKind{abi.KindReasoningStart, abi.KindReasoningDelta, abi.KindToolCall, abi.KindSource,
		abi.KindFile, abi.KindTextEnd, abi.KindFinish} {
		t.Run(k.String(), func(t *testing.T) {
			// The text so far ("I'm") is still a possible refusal; the
			// other part ends the hold anyway, and what follows passes.
			m := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(preamble(), pText("I'm"), pKind(k), pText(" sorry, but I can't"))}}
			r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{mustRefusal(t)}, commit: CommitLegacy})
			require.NoError(t, r.err)
			parts, err := drain(r.stream)
			require.NoError(t, err)
			require.Len(t, parts, 6)
			require.Equal(t, k, parts[4].Kind)
		})
	}
}

func TestNewRefusalDetectorWith(t *testing.T) {
	_, err := NewRefusalDetectorWith(RefusalConfig{Reasoning: ReasoningHold + 1})
	require.ErrorContains(t, err, "unknown refusal reasoning 2")
	_, err = NewRefusalDetectorWith(RefusalConfig{Phrases: []string{" "}, Reasoning: ReasoningHold})
	require.ErrorIs(t, err, refusalcore.ErrEmptyPhrase)
	require.Equal(t, "detach", RefusalConfig{}.Reasoning.String(), "the default")
	require.Equal(t, "hold", ReasoningHold.String())
}

// With ReasoningHold the reasoning and source parts before the text are
// held and the text after them is judged: a refusal after thinking (or a
// citation) fails the attempt and the caller sees nothing of it; an
// answer releases every part once, in order. By default (and with
// ReasoningDetach) the same refusal passes, as before the option.
func TestRefusalDetector_reasoningHold(t *testing.T) {
	thinking := sscript(pKind(abi.KindReasoningStart), pKind(abi.KindReasoningDelta), pKind(abi.KindReasoningEnd))
	for _, tc := range []struct {
		name      string
		reasoning RefusalReasoning
		aside     []sstep
		text      string
		refused   bool
	}{
		{"hold: thinking then refusal", ReasoningHold, thinking, " sorry, but I can't", true},
		{"hold: a citation then refusal", ReasoningHold, sscript(pKind(abi.KindSource)), " sorry, but I can't", true},
		{"hold: thinking then answer", ReasoningHold, thinking, " happy to help.", false},
		{"detach: thinking then refusal", ReasoningDetach, thinking, " sorry, but I can't", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := NewRefusalDetectorWith(RefusalConfig{Reasoning: tc.reasoning})
			require.NoError(t, err)
			m := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(preamble(), tc.aside, pText("I'm"), pText(tc.text), pFinish(abi.ReasonStop))}}
			r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{d}, commit: CommitOnOutput})
			if tc.refused {
				var re *RefusalError
				require.ErrorAs(t, r.err, &re)
				require.Equal(t, "I'm"+tc.text, re.Text)
				return
			}
			require.NoError(t, r.err)
			parts, err := drain(r.stream)
			require.NoError(t, err)
			want := []PartKind{abi.KindStreamStart, abi.KindResponseMeta, abi.KindTextStart}
			for _, st := range tc.aside {
				want = append(want, st.part.Kind)
			}
			want = append(want, abi.KindTextDelta, abi.KindTextDelta, abi.KindFinish)
			got := make([]PartKind, len(parts))
			for i := range parts {
				got[i] = parts[i].Kind
			}
			require.Equal(t, want, got, "every part once, in order")
		})
	}
}

// A raw part is not the detector's to see (it would detach it, as any
// kind it does not read): raw chunks between the deltas of a refusal
// leave it caught, and an answer keeps every raw part in its place. (Under
// CommitLegacy a raw chunk commits, as in ai-retry 2.3, so the first one
// would commit the stream before any text: the policy package asks for no
// raw chunks under that rule.)
func TestRefusalDetector_rawPartsDoNotLetARefusalThrough(t *testing.T) {
	for _, rule := range []CommitRule{CommitOnOutput} {
		t.Run(rule.String(), func(t *testing.T) {
			m := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(pRaw("r0"), preamble(), pRaw("r1"), pText("I'm"),
				pRaw("r2"), pText(" sorry, but I can't"), pRaw("r3"), pText(" help."), pFinish(abi.ReasonStop))}}
			r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{mustRefusal(t)}, commit: rule})
			var re *RefusalError
			require.ErrorAs(t, r.err, &re)

			m = &scriptModel{key: "p/a", scripts: [][]sstep{sscript(pRaw("r0"), preamble(), pRaw("r1"), pText("I'm"),
				pRaw("r2"), pText(" happy to help."), pFinish(abi.ReasonStop))}}
			r = runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{mustRefusal(t)}, commit: rule})
			require.NoError(t, r.err)
			parts, err := drain(r.stream)
			require.NoError(t, err)
			require.Equal(t, []string{"raw:r0", "stream-start", "response-metadata", "text-start", "raw:r1",
				"text-delta:I'm", "raw:r2", "text-delta: happy to help.", "finish"}, labels(parts))
		})
	}
}

// FuzzRefusalDetector checks the detector against its specification on
// any text cut into any deltas: the attempt fails with a RefusalError
// exactly when the normalised text starts with a phrase, and otherwise the
// caller gets every part once, in order.
func FuzzRefusalDetector(f *testing.F) {
	f.Add("I'm sorry, but I can't help with that.", []byte{3, 1, 7})
	f.Add("I’m  SORRY, but I can’t", []byte{1})
	f.Add("I'm happy to help", []byte{2, 2})
	f.Add("  \n As an AI language model", []byte{5})
	f.Add("Sorry, but I c\xe2\x80\x99", []byte{15})
	f.Add("", []byte{})
	det, err := NewRefusalDetector()
	if err != nil {
		f.Fatal(err)
	}
	m, _ := refusalcore.New(refusalcore.DefaultPhrases())
	f.Fuzz(func(t *testing.T, text string, cuts []byte) {
		var deltas []string
		rest := text
		for _, c := range cuts {
			n := int(c) % (len(rest) + 1)
			deltas = append(deltas, rest[:n])
			rest = rest[n:]
		}
		deltas = append(deltas, rest)
		sc := preamble()
		for _, d := range deltas {
			sc = append(sc, pText(d))
		}
		sm := &scriptModel{key: "p/a", scripts: [][]sstep{sc}}
		r := runOne(t.Context(), sm, attemptOpts{ts: []abi.Transformer{det}, commit: CommitLegacy})
		norm := refusalcore.Normalize(text)
		want := false
		for _, p := range m.Phrases() {
			if strings.HasPrefix(norm, p) {
				want = true
			}
		}
		var re *RefusalError
		if want {
			require.True(t, errors.As(r.err, &re), "text %q: want a refusal, got %v", text, r.err)
			require.True(t, strings.HasPrefix(text, re.Text))
			return
		}
		require.NoError(t, r.err)
		parts, err := drain(r.stream)
		require.NoError(t, err)
		require.Len(t, parts, len(sc))
		for i := range sc {
			require.Equal(t, sc[i].part, parts[i])
		}
	})
}
