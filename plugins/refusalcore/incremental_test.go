package refusalcore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// matchers are the phrase lists the incremental State is checked with: the
// defaults; a list where one phrase is a prefix of an earlier one (the
// matched phrase changes as the text grows), with non-ASCII and spaces; and
// that list after 70 others (past the first 64-phrase word of the set).
func matchers(t testing.TB) []*Matcher {
	t.Helper()
	custom := []string{"ab cd", "ab", "ÉCOLE  d’été", "x\u00a0y", "\ufffd\ufffdz", "a b c d e f"}
	var long []string
	for i := range 70 {
		long = append(long, fmt.Sprintf("q%02d x", i))
	}
	var ms []*Matcher
	for _, phrases := range [][]string{DefaultPhrases(), custom, append(long, custom...)} {
		m, err := New(phrases)
		require.NoError(t, err)
		ms = append(ms, m)
	}
	return ms
}

// checkSplits feeds text to a State in the deltas cut at cuts (ascending
// byte offsets) and requires, after every delta, the decision of the
// whole-text specification (Matcher.DecideText) over the text so far.
func checkSplits(t testing.TB, s *State, m *Matcher, text string, cuts []int) {
	t.Helper()
	s.Reset(m)
	from := 0
	for _, to := range append(cuts, len(text)) {
		if to < from || to > len(text) {
			continue
		}
		o, p := s.Feed(text[from:to])
		wo, wp := m.DecideText(text[:to])
		require.Equal(t, wo, o, "text %q fed up to %d in deltas cut at %v", text, to, cuts)
		require.Equal(t, wp, p, "text %q fed up to %d in deltas cut at %v", text, to, cuts)
		o, p = s.Outcome()
		require.Equal(t, wo, o)
		require.Equal(t, wp, p)
		from = to
	}
}

func TestState_edgeCases(t *testing.T) {
	for _, text := range []string{
		"",
		"   ",
		"  I'm   sorry,\n\n but  I can't",       // white-space runs across every cut
		"I\u2019m sorry, but I can\u2019t",      // a 3-byte apostrophe cut at each of its bytes
		"I\u02bcm\u00a0sorry, but I can\u2032t", // 2-byte apostrophe and space
		"I'm sorry, but I ca\xe2\x80",           // a rune cut at the very end
		"I'm sorry, but I ca\xe2\x80n't",        // a cut sequence that turns out invalid
		"\xe2\x80\xe2\x80z",                     // two invalid cut sequences in a row
		"\xf0\x9f\x98\x80 I'm sorry",            // a 4-byte rune first
		"\xe0\x80z",                             // a bad second byte after a leading byte
		"ab",                                    // matches "ab", then…
		"ab cd",                                 // …the earlier, longer "ab cd"
		"ab  c",                                 // still "ab"
		"abx",                                   // "ab" matched before x
		"école d'été",                           // non-ASCII phrase, case folded
		"ÉCOLE\u2003D\u2019ÉTÉ, oui",            // unicode space and apostrophe
		"x\u00a0\u00a0y",                        // phrase with a space that is unicode in the text
		"As an AI language model, I " + strings.Repeat("x ", 200),
		"Sure! " + strings.Repeat("\u2019 ", 50),
	} {
		t.Run(text, func(t *testing.T) {
			var s State
			for _, m := range matchers(t) {
				checkSplits(t, &s, m, text, nil) // one delta
				all := make([]int, len(text))    // byte by byte
				for i := range all {
					all[i] = i
				}
				checkSplits(t, &s, m, text, all)
				for i := range len(text) + 1 { // every single cut
					checkSplits(t, &s, m, text, []int{i})
					for j := i; j <= len(text) && len(text) <= 64; j++ { // every pair of cuts (short texts)
						checkSplits(t, &s, m, text, []int{i, j})
					}
				}
			}
		})
	}
}

// TestState_random compares State with the specification on random texts
// drawn from the pieces that make normalisation hard, in random deltas.
func TestState_random(t *testing.T) {
	pieces := []string{
		"I", "'", "\u2019", "\u2018", "\u02bc", "m", " ", "  ", "\n", "\t", "\u00a0", "\u2003", "sorry",
		",", "but", "can't", "ab", "cd", "É", "\xe2", "\x80", "\x99", "\xff", "\ufffd", "x", "y", "z", "q", "6", "7",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var s State
	ms := matchers(t)
	for range 3000 {
		var b strings.Builder
		for range rng.IntN(20) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		text := b.String()
		var cuts []int
		for at := 0; at < len(text); at += 1 + rng.IntN(4) {
			cuts = append(cuts, at)
		}
		checkSplits(t, &s, ms[rng.IntN(len(ms))], text, cuts)
	}
}

// FuzzState: go test ./plugins/refusalcore -fuzz FuzzState
func FuzzState(f *testing.F) {
	for _, text := range vectorTexts {
		f.Add(text, []byte{1, 2, 3}, false)
	}
	f.Add("ab cd", []byte{1, 1}, true)
	f.Add("I\u2019m  sorry", []byte{1, 1, 1, 1, 1, 1}, false)
	f.Add("x\xe2\x80y", []byte{2, 1}, true)
	ms := matchers(f)
	f.Fuzz(func(t *testing.T, text string, steps []byte, custom bool) {
		m := ms[0]
		if custom {
			m = ms[1+len(text)%2]
		}
		var cuts []int
		at := 0
		for _, st := range steps { // each step is a delta length
			at += int(st % 8)
			cuts = append(cuts, at)
		}
		var s State
		checkSplits(t, &s, m, text, cuts)
	})
}

func TestState_resetReusesBuffers(t *testing.T) {
	m, err := New(DefaultPhrases())
	require.NoError(t, err)
	deltas := []string{"I\u2019", "m sor", "ry, but ", "I can", "\xe2\x80", "\x99t help"}
	var s State
	run := func() {
		s.Reset(m)
		for _, d := range deltas {
			s.Feed(d)
		}
	}
	run()
	o, p := s.Outcome()
	require.Equal(t, Match, o)
	require.Equal(t, "i'm sorry, but i can't", p)
	require.Zero(t, testing.AllocsPerRun(100, run), "a reused State does not allocate")
}

func TestState_stopsWorkOnceDecided(t *testing.T) {
	m, err := New([]string{"abc"})
	require.NoError(t, err)
	var s State
	s.Reset(m)
	o, _ := s.Feed("xyz")
	require.Equal(t, Diverge, o)
	o, _ = s.Feed("abc") // "xyzabc" still diverges
	require.Equal(t, Diverge, o)
	s.Reset(m)
	o, p := s.Feed("ABC and a long tail")
	require.Equal(t, Match, o)
	require.Equal(t, "abc", p)
	require.Negative(t, s.node, "final after the phrase: later deltas are not read")
	s.Reset(m)
	s.Feed("ab")
	require.GreaterOrEqual(t, s.node, int32(0), "still undecided")
	m, err = New([]string{"abc def", "abc"})
	require.NoError(t, err)
	s.Reset(m)
	o, p = s.Feed("abc")
	require.Equal(t, Match, o)
	require.Equal(t, "abc", p)
	require.GreaterOrEqual(t, s.node, int32(0), "the earlier, longer phrase can still match")
	o, p = s.Feed(" de")
	require.Equal(t, Match, o)
	require.Equal(t, "abc", p)
	o, p = s.Feed("f")
	require.Equal(t, "abc def", p)
	require.Negative(t, s.node)
}
