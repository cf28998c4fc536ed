package refusalcore

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNormalize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"   \n\t ", ""},
		{"  I'm   Sorry,\n\nBUT  ", "i'm sorry, but"},
		{"I\u2019m sorry", "i'm sorry"},
		{"I\u2018m\u00a0sorry", "i'm sorry"},
		{"ÉCOLE", "école"},
		{"abc\xe2\x80", "abc"},    // a split rune at the end waits
		{"a\xffb", "a\ufffdb"},    // an invalid byte elsewhere stays visible
		{"x\u2003\u2003y", "x y"}, // unicode spaces collapse too
	} {
		t.Run(tc.in, func(t *testing.T) {
			require.Equal(t, tc.want, Normalize(tc.in))
		})
	}
}

func TestMatcher_Decide(t *testing.T) {
	m, err := New([]string{"I'm sorry, but I can't", "As an AI language model"})
	require.NoError(t, err)
	for _, tc := range []struct {
		text   string
		want   Outcome
		phrase string
	}{
		{"", Hold, ""},
		{"  ", Hold, ""},
		{"I", Hold, ""},
		{"I\u2019m  SORRY,", Hold, ""},
		{"I'm sorry, but I can't do that.", Match, "i'm sorry, but i can't"},
		{"I'm sorry, but I can't", Match, "i'm sorry, but i can't"},
		{"As an AI language model, I", Match, "as an ai language model"},
		{"Sure! Here", Diverge, ""},
		{"I'm happy", Diverge, ""},
		{"I'm sorry, but I ca\xe2\x80", Hold, ""},
	} {
		t.Run(tc.text, func(t *testing.T) {
			got, phrase := m.DecideText(tc.text)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.phrase, phrase)
		})
	}
}

func TestNew_rejectsEmptyPhrases(t *testing.T) {
	_, err := New(nil)
	require.ErrorIs(t, err, ErrEmptyPhrase)
	_, err = New([]string{"ok", " \n "})
	require.ErrorIs(t, err, ErrEmptyPhrase)
}

func TestDefaultPhrases(t *testing.T) {
	m, err := New(DefaultPhrases())
	require.NoError(t, err)
	got, _ := m.DecideText("I’m sorry, but I can’t help with that.")
	require.Equal(t, Match, got)
	got, _ = m.DecideText("Sure, here is the code:")
	require.Equal(t, Diverge, got)
	// The copy is the caller's to change.
	p := DefaultPhrases()
	p[0] = "x"
	require.NotEqual(t, "x", DefaultPhrases()[0])
}

func TestNew_refusesAHugeTable(t *testing.T) {
	defer func(n int) { maxTable = n }(maxTable)
	maxTable = 1000
	phrases := make([]string, 60)
	for i := range phrases {
		phrases[i] = fmt.Sprintf("phrase %d", i)
	}
	_, err := New(phrases)
	require.ErrorIs(t, err, ErrTooLarge)
	_, err = New(phrases[:2])
	require.NoError(t, err, "a short list fits")
}
