package refusalcore

import (
	mbits "math/bits"
	"unicode"
	"unicode/utf8"
)

// State is the decision for one stream, fed one delta at a time: after each
// [State.Feed] it holds exactly what [Matcher.DecideText] returns for all the
// text fed so far, at a cost of O(delta) instead of O(text), because it
// resumes the normalisation where the last delta stopped and compares the
// new normalised bytes only with the phrases the text is still a prefix of.
// Once the outcome can no longer change (Diverge, or Match with no longer
// phrase still possible) a Feed does no work at all.
//
// The zero State is not ready: call [State.Reset] first. Reset keeps the
// State's buffers, so a State reused across streams does not allocate in
// steady state. A State is not safe for concurrent use (a stream's parts
// arrive one at a time).
type State struct {
	m      *Matcher
	alive0 uint64   // phrases 0–63 still longer than and prefixed by the text, a bit each
	aliveN []uint64 // phrases from 64 on, the same (only for longer lists)
	nalive int      // phrases alive
	long   int      // byte length of the longest phrase alive
	match  int32    // the first phrase in list order the text starts with, or -1
	n      int      // normalised bytes so far
	space  bool     // a run of white space is pending: a space is written before the next rune, if any text precedes it
	ncut   uint8    // a rune cut at the end of the last delta: its leading bytes
	cut    [utf8.UTFMax - 1]byte
}

// Reset readies s for a new stream judged by m, keeping its buffers.
func (s *State) Reset(m *Matcher) {
	s.m, s.match, s.n, s.space, s.ncut = m, -1, 0, false, 0
	s.nalive, s.long = len(m.phrases), m.maxLen
	s.alive0 = ^uint64(0) >> (64 - min(64, s.nalive))
	s.aliveN = s.aliveN[:0]
	for left := s.nalive - 64; left > 0; left -= 64 {
		s.aliveN = append(s.aliveN, ^uint64(0)>>(64-min(64, left)))
	}
}

// word is the bit set of phrases 64w to 64w+63.
func (s *State) word(w int) *uint64 {
	if w == 0 {
		return &s.alive0
	}
	return &s.aliveN[w-1]
}

// Outcome is the decision over the text fed so far (Hold before any text),
// with the phrase on Match; the same as the last [State.Feed] returned.
func (s *State) Outcome() (Outcome, string) {
	switch {
	case s.match >= 0:
		return Match, s.m.phrases[s.match]
	case s.nalive > 0:
		return Hold, ""
	}
	return Diverge, ""
}

// Feed adds the next delta of the leading text and decides over all the
// text fed so far: the result equals m.DecideText(text so far).
func (s *State) Feed(delta string) (Outcome, string) {
	if s.nalive == 0 {
		return s.Outcome() // decided for good: no phrase can change the outcome
	}
	// The normalised bytes of this delta: on the stack unless the delta
	// normalises to more than buf holds before every phrase is resolved.
	var buf [128]byte
	out := buf[:0]
	i := 0
	if s.ncut > 0 {
		out, i = s.resumeCut(out, delta)
	}
	// Normalise (as AppendNormalized) only as far as the longest phrase
	// still alive: beyond it, every alive phrase has matched or diverged.
	need := s.long - s.n
	for i < len(delta) && len(out) < need {
		c := delta[i]
		if c < utf8.RuneSelf {
			i++
			switch {
			case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f':
				s.space = true
				continue
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			}
			if s.space && s.n+len(out) > 0 {
				out = append(out, ' ')
			}
			s.space = false
			out = append(out, c)
			continue
		}
		if !utf8.FullRuneInString(delta[i:]) {
			s.ncut = uint8(copy(s.cut[:], delta[i:])) // wait for the rest of the rune
			break
		}
		r, size := utf8.DecodeRuneInString(delta[i:])
		i += size
		out = s.put(out, r)
	}
	s.advance(out)
	return s.Outcome()
}

// resumeCut completes the rune cut at the end of the previous delta with
// the first bytes of delta, appends its normalised form to out and returns
// how many bytes of delta it used.
func (s *State) resumeCut(out []byte, delta string) ([]byte, int) {
	var b [2*utf8.UTFMax - 1]byte
	k := copy(b[:], s.cut[:s.ncut])
	used := copy(b[k:], delta[:min(len(delta), utf8.UTFMax)])
	if !utf8.FullRune(b[:k+used]) {
		s.ncut = uint8(copy(s.cut[:], b[:k+used])) // still cut: delta was too short
		return out, len(delta)
	}
	r, size := utf8.DecodeRune(b[:k+used])
	s.ncut = 0
	if size > k {
		return s.put(out, r), size - k
	}
	// Invalid: a cut sequence is a leading byte followed by continuation
	// bytes, each of which decodes alone as U+FFFD (as the whole text
	// would), and the delta is read from its start.
	for range k {
		out = s.put(out, utf8.RuneError)
	}
	return out, 0
}

// put appends the normalised form of the non-ASCII rune r to out.
func (s *State) put(out []byte, r rune) []byte {
	if unicode.IsSpace(r) {
		s.space = true
		return out
	}
	switch r {
	case '\u2018', '\u2019', '\u02bc', '\u2032', '\uff07':
		r = '\''
	default:
		r = unicode.ToLower(r)
	}
	if s.space && s.n+len(out) > 0 {
		out = append(out, ' ')
	}
	s.space = false
	return utf8.AppendRune(out, r)
}

// advance compares the normalised bytes of this delta with the phrases
// still alive: a phrase they complete matches, one they depart from dies.
func (s *State) advance(out []byte) {
	if len(out) == 0 {
		return
	}
	t := string(out) // no allocation: t does not escape
	s.long = 0
	for w := range 1 + len(s.aliveN) {
		word := s.word(w)
		for bits := *word; bits != 0; bits &= bits - 1 {
			b := mbits.TrailingZeros64(bits)
			k := w*64 + b
			rest := s.m.phrases[k][s.n:]
			if len(rest) > len(t) && rest[:len(t)] == t {
				s.long = max(s.long, len(s.m.phrases[k]))
				continue // still alive
			}
			*word &^= 1 << b
			s.nalive--
			if len(rest) <= len(t) && t[:len(rest)] == rest && (s.match < 0 || int32(k) < s.match) {
				s.match = int32(k) // an earlier, longer phrase completed after a later, shorter one
			}
		}
	}
	s.n += len(out)
}
