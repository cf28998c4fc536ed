package driver

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestOverlap(t *testing.T) {
	for _, tc := range []struct {
		name, sent, next string
		window, want     int
	}{
		{"nothing sent", "", "Hello", 256, 0},
		{"no repeat", "Hello", " world", 256, 0},
		{"repeats the last word", "The quick brown", "brown fox", 256, 5},
		{"repeats a space", "Hello ", " world", 256, 1},
		{"whole next repeats", "abc def", "def", 256, 3},
		{"longest wins", "a la la la", "la la land", 256, 8},
		{"window bounds it", "xx abcdef", "abcdef!", 4, 0},
		{"window fits", "xx abcdef", "cdef!", 4, 4},
		{"rune boundary", "naïve", "ïve thing", 256, 4},
		{"no split inside a rune", "a\u00e9", "\xa9x", 256, 0},
		{"next shorter than sent tail", "abcabc", "c", 256, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, overlap([]byte(tc.sent), []byte(tc.next), tc.window))
		})
	}
}

func TestSettled(t *testing.T) {
	for _, tc := range []struct {
		name, sent, head string
		want             bool
	}{
		{"no occurrence", "Hello world", " and", true},
		{"could grow", "the brown fox", "brown", false},
		{"only at the end", "the brown fox", "fox", true},
		{"prefix of the tail's end", "the brown fox", "fo", false},
		{"empty sent", "", "x", true},
		{"repeat in the middle", "ab ab ab", "ab", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, settled([]byte(tc.sent), []byte(tc.head), SpliceWindow))
		})
	}
	require.True(t, settled([]byte("abc"), bytes.Repeat([]byte("a"), SpliceWindow), SpliceWindow))
}

// FuzzOverlap pins the trimmer's promise: what it drops is exactly a
// repeat of the sent text's tail, within the window, on rune boundaries,
// and it is the longest such repeat; everything after it is kept. And a
// head judged settled never grows into a longer overlap.
func FuzzOverlap(f *testing.F) {
	f.Add("The quick brown", "brown fox", 256, 3)
	f.Add("naïve", "ïve", 256, 1)
	f.Add("la la la", "la la land", 8, 2)
	f.Add("", "x", 1, 1)
	f.Fuzz(func(t *testing.T, sent, next string, window, cut int) {
		if window < 1 || window > 1024 {
			window = SpliceWindow
		}
		s, n := []byte(sent), []byte(next)
		k := overlap(s, n, window)
		require.GreaterOrEqual(t, k, 0)
		require.LessOrEqual(t, k, min(window, len(s), len(n)))
		require.Equal(t, next[:k], sent[len(sent)-k:], "drops only a repeat of the tail")
		require.Equal(t, sent+next[k:], sent+strings.Clone(next)[k:])
		if utf8.ValidString(next) {
			require.True(t, utf8.ValidString(next[k:]), "never splits a rune")
		}
		for j := k + 1; j <= min(window, len(s), len(n)); j++ {
			if utf8.RuneStart(s[len(s)-j]) && (j == len(n) || utf8.RuneStart(n[j])) {
				require.NotEqual(t, next[:j], sent[len(sent)-j:], "a longer overlap was missed")
			}
		}
		// A head settled at any cut keeps the overlap it had: reading more
		// of the continuation could not have trimmed more.
		if cut < 1 || cut > len(n) {
			return
		}
		head := n[:cut]
		if settled(s, head, window) && (cut == len(n) || utf8.RuneStart(n[cut])) {
			require.Equal(t, k, overlap(s, head, window), "settled at %d but the whole trims otherwise", cut)
		}
	})
}
