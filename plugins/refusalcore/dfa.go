package refusalcore

import (
	"errors"
	"fmt"
	"math"
)

// The phrases compiled once, in New, into a byte trie over the normalised
// text, stored as a dense transition table: state = next[state*ncls +
// class(byte)]. Because a trie has one path per prefix, everything the
// decision needs is a function of the node alone (the first phrase in list
// order that the path starts with, and whether a phrase earlier in the
// list can still complete below it), so it is folded into the table: a
// transition either goes to a state (≥ 0) or to a final decision (< 0),
// Diverge (-1) or Match phrase k (-2-k). A State is then one state id and
// a Feed one table load per normalised byte, whatever the number of
// phrases.
//
// White space is folded in too. Normalisation turns a run of white space
// into one space written only before the next rune (and not at the
// start), so the table has, besides each trie node n (states 0…N-1), a
// state N+n, "n and a pending space": it decides as n does, white space
// keeps it, and any other byte moves as n's ' ' child would on it. The
// white-space class is the same for every white-space byte and rune, and
// for the ' ' of the phrases: raw ASCII then needs one load and one table
// step per byte, with no other branch.

const (
	decDiverge = -1 // the final decision Diverge; -2-k is Match phrase k

	classSpace = 1   // white space, and the normalised ' '
	classRune  = 255 // raw: a byte ≥ 0x80, decoded as a rune first
)

// maxTable bounds the transition table (entries, 512 MiB): a phrase list
// beyond it (a hundred thousand phrases or more) is refused rather than
// allocated. A variable for the tests.
var maxTable = 1 << 27

// ErrTooLarge is returned by [New] for a phrase list whose table would
// exceed its bound.
var ErrTooLarge = errors.New("refusalcore: phrase list too large")

type dfa struct {
	// raw maps an input byte to its class once normalised: ASCII capitals
	// fold to their lower case, ASCII white space is classSpace and a byte
	// ≥ 0x80 is classRune (decoded and normalised as a rune first).
	raw [256]uint8
	// class maps a normalised byte to its class: 0 for a byte no phrase
	// has, else 1…ncls-1. Normalised phrases hold at most 213 distinct
	// bytes (no ASCII capital or white space other than ' ', valid UTF-8).
	class [256]uint8
	ncls  int
	// next maps row + class to the next state's row (state*ncls), or a
	// decision < 0. Class 0 (a byte in no phrase) leaves the trie, so
	// next[row] is also the state's own outcome: Match -2-next[row] (the
	// first phrase in list order its text starts with) if ≤ -2, else Hold.
	next []int32
}

// compile builds the table for the normalised phrases.
func (d *dfa) compile(phrases []string) error {
	d.classes(phrases)
	total := 1
	for _, p := range phrases {
		total += len(p)
	}
	if total >= math.MaxInt32/4 || 2*total > maxTable/d.ncls {
		return fmt.Errorf("%w: %d bytes of phrases over %d distinct bytes need up to %d table entries, over %d",
			ErrTooLarge, total-1, d.ncls-2, 2*total*d.ncls, maxTable)
	}
	t := d.trie(phrases)
	t.settle()
	d.next = t.transitions()
	return nil
}

// noPhrase is a trie's "no phrase": above every phrase's index.
const noPhrase = math.MaxInt32

// classes gives each byte of the phrases a class, and each input byte the
// class of its normalised form.
func (d *dfa) classes(phrases []string) {
	d.class[' '] = classSpace
	d.ncls = 2
	for _, p := range phrases {
		for i := 0; i < len(p); i++ {
			if d.class[p[i]] == 0 {
				d.class[p[i]] = uint8(d.ncls)
				d.ncls++
			}
		}
	}
	for c := range 256 {
		switch {
		case c >= 0x80:
			d.raw[c] = classRune
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f':
			d.raw[c] = classSpace
		case 'A' <= c && c <= 'Z':
			d.raw[c] = d.class[c+'a'-'A']
		default:
			d.raw[c] = d.class[c]
		}
	}
}

// A phraseTrie is the phrases' trie, from which the table is built.
type phraseTrie struct {
	w int // the classes, a node's row width
	// child holds the children by class (0 = none: the root is no one's
	// child), w to a node; end[node] is the first phrase in list order
	// ending at node.
	child, end []int32
	// match[n] is the first phrase ending at n or above it; below[n] the
	// first ending strictly under it (settle).
	match, below []int32
}

// trie builds the phrases' trie over d's classes.
func (d *dfa) trie(phrases []string) *phraseTrie {
	w := d.ncls
	t := &phraseTrie{w: w, child: make([]int32, w, 64*w), end: []int32{noPhrase}}
	for k, p := range phrases {
		n := 0
		for i := 0; i < len(p); i++ {
			at := n*w + int(d.class[p[i]])
			if t.child[at] == 0 {
				t.child[at] = int32(len(t.end))
				t.end = append(t.end, noPhrase)
				t.child = append(t.child, make([]int32, w)...)
			}
			n = int(t.child[at])
		}
		t.end[n] = min(t.end[n], int32(k))
	}
	return t
}

// children is node n's row of children by class.
func (t *phraseTrie) children(n int) []int32 { return t.child[n*t.w : (n+1)*t.w] }

// settle computes match and below. A child's id is above its parent's:
// match flows down in id order, below up in reverse.
func (t *phraseTrie) settle() {
	nodes := len(t.end)
	t.match = make([]int32, nodes)
	t.below = make([]int32, nodes)
	t.match[0] = noPhrase
	for n := range nodes {
		for _, ch := range t.children(n) {
			if ch != 0 {
				t.match[ch] = min(t.match[n], t.end[ch])
			}
		}
	}
	for n := nodes - 1; n >= 0; n-- {
		t.below[n] = noPhrase
		for _, ch := range t.children(n) {
			if ch != 0 {
				t.below[n] = min(t.below[n], t.end[ch], t.below[ch])
			}
		}
	}
}

// enter is the state for entering trie node n: n itself, or its final
// decision once the text starts with a phrase k and no phrase before k
// can complete further down (the outcome is then Match k for good).
func (t *phraseTrie) enter(n int32) int32 {
	if t.match[n] != noPhrase && t.below[n] > t.match[n] {
		return -2 - t.match[n]
	}
	return n
}

// fall is the decision when the text leaves the trie after node n.
func (t *phraseTrie) fall(n int) int32 {
	if t.match[n] != noPhrase {
		return -2 - t.match[n]
	}
	return decDiverge
}

// transitions is the table: a row per node, then a row per node with a
// space pending, each state stored as the offset of its row
// (state*ncls), so that a step is one add and one load.
func (t *phraseTrie) transitions() []int32 {
	nodes, w, child := len(t.end), t.w, t.child
	next := make([]int32, 2*nodes*w)
	for n := range nodes {
		row, pend := next[n*w:(n+1)*w], next[(nodes+n)*w:(nodes+n+1)*w]
		for c, ch := range t.children(n) {
			if ch == 0 {
				row[c] = t.fall(n)
			} else {
				row[c] = t.enter(ch)
			}
		}
		row[classSpace] = int32(nodes + n) // the space waits for the next rune
		if n == 0 {
			row[classSpace] = 0 // no text yet: leading white space is dropped
		}
		sp := child[n*w+classSpace] // where the pending space leads
		for c := range pend {
			switch {
			case c == classSpace:
				pend[c] = int32(nodes + n)
			case sp == 0:
				pend[c] = t.fall(n)
			case t.enter(sp) != sp:
				pend[c] = t.enter(sp)
			case child[int(sp)*w+c] == 0:
				pend[c] = t.fall(int(sp))
			default:
				pend[c] = t.enter(child[int(sp)*w+c])
			}
		}
	}
	for i, v := range next {
		if v >= 0 {
			next[i] = v * int32(w)
		}
	}
	return next
}
