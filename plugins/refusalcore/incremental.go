package refusalcore

import (
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
	m     *Matcher
	alive []int32 // phrases (indices, in list order) still longer than and prefixed by the text
	match int32   // the first phrase in list order the text starts with, or -1
	n     int     // normalised bytes so far
	space bool    // a run of white space is pending: a space is written before the next rune, if any text precedes it
	cut   [utf8.UTFMax - 1]byte
	ncut  uint8  // a rune cut at the end of the last delta: its leading bytes
	buf   []byte // the normalised bytes of the current delta
}

// Reset readies s for a new stream judged by m, keeping its buffers.
func (s *State) Reset(m *Matcher) {
	s.m, s.match, s.n, s.space, s.ncut = m, -1, 0, false, 0
	s.alive = s.alive[:0]
	for i := range m.phrases {
		s.alive = append(s.alive, int32(i))
	}
}

// Outcome is the decision over the text fed so far (Hold before any text),
// with the phrase on Match; the same as the last [State.Feed] returned.
func (s *State) Outcome() (Outcome, string) {
	switch {
	case s.match >= 0:
		return Match, s.m.phrases[s.match]
	case len(s.alive) > 0:
		return Hold, ""
	}
	return Diverge, ""
}

// Feed adds the next delta of the leading text and decides over all the
// text fed so far: the result equals m.DecideText(text so far).
func (s *State) Feed(delta string) (Outcome, string) {
	if len(s.alive) == 0 {
		return s.Outcome() // decided for good: no phrase can change the outcome
	}
	s.buf = s.buf[:0]
	i := 0
	if s.ncut > 0 {
		i = s.resumeCut(delta)
	}
	// Normalise (as AppendNormalized) only as far as the longest phrase
	// still alive: beyond it, every alive phrase has matched or diverged.
	need := s.longest() - s.n
	for i < len(delta) && len(s.buf) < need {
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
			if s.space && s.n+len(s.buf) > 0 {
				s.buf = append(s.buf, ' ')
			}
			s.space = false
			s.buf = append(s.buf, c)
			continue
		}
		if !utf8.FullRuneInString(delta[i:]) {
			s.ncut = uint8(copy(s.cut[:], delta[i:])) // wait for the rest of the rune
			break
		}
		r, size := utf8.DecodeRuneInString(delta[i:])
		i += size
		s.put(r)
	}
	s.advance()
	return s.Outcome()
}

// resumeCut completes the rune cut at the end of the previous delta with
// the first bytes of delta and returns how many bytes of delta it used.
func (s *State) resumeCut(delta string) int {
	var b [2*utf8.UTFMax - 1]byte
	k := copy(b[:], s.cut[:s.ncut])
	used := copy(b[k:], delta[:min(len(delta), utf8.UTFMax)])
	if !utf8.FullRune(b[:k+used]) {
		s.ncut = uint8(copy(s.cut[:], b[:k+used])) // still cut: delta was too short
		return len(delta)
	}
	r, size := utf8.DecodeRune(b[:k+used])
	s.ncut = 0
	if size > k {
		s.put(r)
		return size - k
	}
	// Invalid: a cut sequence is a leading byte followed by continuation
	// bytes, each of which decodes alone as U+FFFD (as the whole text
	// would), and the delta is read from its start.
	for range k {
		s.put(utf8.RuneError)
	}
	return 0
}

// put appends the normalised form of the non-ASCII rune r to buf.
func (s *State) put(r rune) {
	if unicode.IsSpace(r) {
		s.space = true
		return
	}
	switch r {
	case '\u2018', '\u2019', '\u02bc', '\u2032', '\uff07':
		r = '\''
	default:
		r = unicode.ToLower(r)
	}
	if s.space && s.n+len(s.buf) > 0 {
		s.buf = append(s.buf, ' ')
	}
	s.space = false
	s.buf = utf8.AppendRune(s.buf, r)
}

// longest is the byte length of the longest phrase still alive.
func (s *State) longest() int {
	l := 0
	for _, k := range s.alive {
		l = max(l, len(s.m.phrases[k]))
	}
	return l
}

// advance compares the normalised bytes of this delta with the phrases
// still alive: a phrase they complete matches, one they depart from dies.
func (s *State) advance() {
	if len(s.buf) == 0 {
		return
	}
	t := string(s.buf) // no allocation: t does not escape
	live := s.alive[:0]
	for _, k := range s.alive {
		rest := s.m.phrases[k][s.n:]
		if len(rest) > len(t) {
			if rest[:len(t)] == t {
				live = append(live, k)
			}
			continue
		}
		if t[:len(rest)] == rest && (s.match < 0 || k < s.match) {
			s.match = k
		}
	}
	s.alive = live
	s.n += len(s.buf)
}
