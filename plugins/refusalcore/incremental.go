package refusalcore

import (
	"unicode"
	"unicode/utf8"
)

// State is the decision for one stream, fed one delta at a time: after each
// [State.Feed] it holds exactly what [Matcher.DecideText] returns for all the
// text fed so far, at a cost of O(delta) instead of O(text) and independent
// of the number of phrases: it resumes the normalisation where the last
// delta stopped and walks the phrases' trie (compiled once by [New]) one
// table load per normalised byte. Once the outcome can no longer change
// (Diverge, or Match with no phrase earlier in the list still possible) a
// Feed does no work at all.
//
// The zero State is not ready: call [State.Reset] first. A State holds no
// buffers, so reusing one across streams never allocates. A State is not
// safe for concurrent use (a stream's parts arrive one at a time).
type State struct {
	m *Matcher
	// node is the state of the normalised text so far (a trie node, or
	// one with a pending space), as the offset of its row in the table
	// (0 = the root: no text yet); or, once final, the decision:
	// decDiverge, or -2-k for Match phrase k.
	node int32
	ncut uint8 // a rune cut at the end of the last delta: its leading bytes
	cut  [utf8.UTFMax - 1]byte
}

// Reset readies s for a new stream judged by m.
func (s *State) Reset(m *Matcher) {
	s.m, s.node, s.ncut = m, 0, 0
}

// Outcome is the decision over the text fed so far (Hold before any text),
// with the phrase on Match; the same as the last [State.Feed] returned.
func (s *State) Outcome() (Outcome, string) {
	k := s.node
	if k >= 0 {
		k = -2 - s.m.dfa.next[k] // the state's leaving transition: its match
		if k < 0 {
			return Hold, "" // the text is a prefix of some phrase (every node is)
		}
		return Match, s.m.phrases[k]
	}
	if k == decDiverge {
		return Diverge, ""
	}
	return Match, s.m.phrases[-2-k]
}

// Feed adds the next delta of the leading text and decides over all the
// text fed so far: the result equals m.DecideText(text so far).
func (s *State) Feed(delta string) (Outcome, string) {
	if s.node < 0 {
		return s.Outcome() // decided for good
	}
	i := 0
	if s.ncut > 0 {
		if i = s.resumeCut(delta); s.node < 0 {
			return s.Outcome()
		}
	}
	// The normalisation of AppendNormalized, each normalised byte stepped
	// through the table as soon as it is known: an ASCII byte (white space
	// included) is one add and one load, in a loop of its own with no call
	// in it; a non-ASCII rune is decoded and normalised first.
	for {
		i = s.ascii(delta, i)
		if i == len(delta) || s.node < 0 {
			break
		}
		if !utf8.FullRuneInString(delta[i:]) {
			s.ncut = uint8(copy(s.cut[:], delta[i:])) // wait for the rest of the rune
			break
		}
		r, size := utf8.DecodeRuneInString(delta[i:])
		i += size
		s.put(r)
	}
	return s.Outcome()
}

// ascii steps the bytes of delta from i on through the table up to the
// first non-ASCII byte or a final decision, and returns where it stopped.
func (s *State) ascii(delta string, i int) int {
	d := &s.m.dfa
	next, node := d.next, s.node
	for ; i < len(delta) && node >= 0; i++ {
		c := d.raw[delta[i]]
		if c == classRune {
			break
		}
		node = next[int(node)+int(c)]
	}
	s.node = node
	return i
}

// resumeCut completes the rune cut at the end of the previous delta with
// the first bytes of delta, steps its normalised form through the trie and
// returns how many bytes of delta it used.
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

// put steps the normalised form of the non-ASCII rune r through the table.
func (s *State) put(r rune) {
	if s.node < 0 {
		return
	}
	if unicode.IsSpace(r) {
		s.step(classSpace)
		return
	}
	switch r {
	case '\u2018', '\u2019', '\u02bc', '\u2032', '\uff07':
		r = '\''
	default:
		r = unicode.ToLower(r)
	}
	d := &s.m.dfa
	var b [utf8.UTFMax]byte
	for _, c := range b[:utf8.EncodeRune(b[:], r)] {
		s.step(d.class[c])
	}
}

// step moves s along the class c, unless already decided.
func (s *State) step(c uint8) {
	if s.node >= 0 {
		s.node = s.m.dfa.next[int(s.node)+int(c)]
	}
}
