package refusalcore

import (
	"errors"
	"math"
)

// The phrases compiled once, in New, into a byte trie over the normalised
// text, stored as a dense transition table: state = next[state*ncls +
// class(byte)]. Because a trie has one path per prefix, everything the
// decision needs is a function of the node alone (the first phrase in list
// order that the path starts with, and whether a phrase earlier in the
// list can still complete below it), so it is folded into the table: a
// transition either goes to a trie node (≥ 0) or to a final decision
// (< 0), Diverge (-1) or Match phrase k (-2-k). A State is then one node
// id and a Feed one table load per normalised byte, whatever the number
// of phrases.

const (
	decDiverge = -1 // the final decision Diverge; -2-k is Match phrase k

	classRune  = 254 // raw: a byte ≥ 0x80, decoded as a rune
	classSpace = 255 // raw: ASCII white space
)

// maxTable bounds the transition table (entries): a phrase list beyond it
// (hundreds of thousands of phrases) is refused rather than allocated.
const maxTable = 1 << 27

var errTooLarge = errors.New("refusalcore: phrase list too large")

type dfa struct {
	// raw maps an input byte to its class once normalised: ASCII capitals
	// fold to their lower case, ASCII white space is classSpace and a byte
	// ≥ 0x80 is classRune (decoded and normalised as a rune first).
	raw [256]uint8
	// class maps a normalised byte to its class: 0 for a byte no phrase
	// has, else 1…ncls-1. Normalised phrases hold at most 213 distinct
	// bytes (no ASCII capital or white space other than ' ', valid UTF-8).
	class [256]uint8
	space uint8   // class(' ')
	ncls  int     // classes
	next  []int32 // node*ncls + class → the next node, or a decision < 0
	match []int32 // node → the first phrase in list order its path starts with, or -1
}

// compile builds the table for the normalised phrases.
func (d *dfa) compile(phrases []string) error {
	d.ncls = 1
	for _, p := range phrases {
		for i := 0; i < len(p); i++ {
			if d.class[p[i]] == 0 {
				d.class[p[i]] = uint8(d.ncls)
				d.ncls++
			}
		}
	}
	d.space = d.class[' ']
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

	// The trie: children by class (0 = none: the root is no one's child),
	// and end[node] the first phrase in list order ending at node.
	const none = math.MaxInt32
	total := 1
	for _, p := range phrases {
		total += len(p)
	}
	if total >= math.MaxInt32/2 || total > maxTable/d.ncls {
		return errTooLarge
	}
	next := make([]int32, d.ncls, 64*d.ncls)
	end := []int32{none}
	for k, p := range phrases {
		n := 0
		for i := 0; i < len(p); i++ {
			at := n*d.ncls + int(d.class[p[i]])
			if next[at] == 0 {
				next[at] = int32(len(end))
				end = append(end, none)
				next = append(next, make([]int32, d.ncls)...)
			}
			n = int(next[at])
		}
		end[n] = min(end[n], int32(k))
	}
	nodes := len(end)
	// A child's id is above its parent's: match flows down in id order,
	// below (the first phrase ending strictly under a node) up in reverse.
	match := make([]int32, nodes)
	below := make([]int32, nodes)
	match[0] = none
	for n := range nodes {
		below[n] = none
		for _, ch := range next[n*d.ncls : (n+1)*d.ncls] {
			if ch != 0 {
				match[ch] = min(match[n], end[ch])
			}
		}
	}
	for n := nodes - 1; n >= 0; n-- {
		for _, ch := range next[n*d.ncls : (n+1)*d.ncls] {
			if ch != 0 {
				below[n] = min(below[n], end[ch], below[ch])
			}
		}
	}
	// decided is the final decision at node n, or 0 if more text can still
	// change it: once the text starts with phrase k and no phrase before k
	// can complete further down, the outcome is Match k for good.
	decided := func(n int32) int32 {
		if match[n] != none && below[n] > match[n] {
			return -2 - match[n]
		}
		return 0
	}
	for n := range nodes {
		fall := int32(decDiverge) // no phrase continues with this byte
		if match[n] != none {
			fall = -2 - match[n]
		}
		row := next[n*d.ncls : (n+1)*d.ncls]
		for c, ch := range row {
			switch {
			case ch == 0:
				row[c] = fall
			case decided(ch) != 0:
				row[c] = decided(ch)
			}
		}
		if match[n] == none {
			match[n] = -1
		}
	}
	d.next, d.match = next, match
	return nil
}
