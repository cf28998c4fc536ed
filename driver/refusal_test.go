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
