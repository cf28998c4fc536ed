package driver

import (
	"bytes"
	"unicode/utf8"
)

// SpliceWindow is the most bytes of a continuation's head that the splice
// compares with the tail of the text already sent. Models asked to
// continue an answer often repeat its last words; the longest overlap of
// the continuation's head with the sent text's tail, up to this many
// bytes, is dropped, so the seam neither repeats nor loses text. An
// overlap longer than the window is not recognised (the repeat then shows).
const SpliceWindow = 256

// overlap returns how many leading bytes of next repeat the end of sent:
// the longest k, at most window, such that next[:k] equals the last k
// bytes of sent, with the cut on a rune boundary in both (so that trimming
// never splits a UTF-8 sequence). 0 when nothing overlaps.
func overlap(sent, next []byte, window int) int {
	for k := min(len(sent), len(next), window); k > 0; k-- {
		if !utf8.RuneStart(sent[len(sent)-k]) || (k < len(next) && !utf8.RuneStart(next[k])) {
			continue
		}
		if bytes.Equal(sent[len(sent)-k:], next[:k]) {
			return k
		}
	}
	return 0
}

// settled reports whether more of a continuation's head could not change
// its overlap with sent: the head fills the window, or it occurs nowhere in
// the window's tail of sent where a longer overlap could still begin. The
// splice passes the head on as soon as it is settled, so a continuation
// that does not repeat the tail costs no wait.
func settled(sent, head []byte, window int) bool {
	if len(head) >= window {
		return true
	}
	tail := sent[max(0, len(sent)-window):]
	// An overlap longer than head starts at i with i+len(head) < len(tail)
	// and tail[i:] beginning with head.
	for i := 0; i+len(head) < len(tail); {
		j := bytes.Index(tail[i:len(tail)-1], head)
		if j < 0 {
			return true
		}
		if i+j+len(head) < len(tail) {
			return false
		}
		i += j + 1
	}
	return true
}
