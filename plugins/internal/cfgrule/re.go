package cfgrule

import (
	"errors"
	"unicode/utf8"
)

// The regex subset's limits, the C build's (plugins/c/regex.h).
const (
	MaxPattern   = 512  // bytes of one pattern
	MaxProg      = 1000 // instructions of one pattern's program, its MATCH included
	MaxProgTotal = 8192 // instructions of all the patterns of a config
	MaxDepth     = 32   // group nesting
	MaxItems     = 4096 // character class items of all the patterns
)

// Patterns checks patterns against the RE2 subset the C build of errmatch
// implements (the grammar is in plugins/c/regex.h and plugins/README.md),
// counting the program each compiles to as regex.h does, so the two builds
// accept exactly the same patterns. Check every pattern of a config through
// one Patterns: the totals are per config. The zero value is ready.
type Patterns struct {
	prog, items int // totals so far
	// the pattern being checked
	p          string
	i, start   int
	fold       bool
	err        error
	depthLimit int
}

// Check reports why p is outside the subset or over a limit, or nil. A
// rejected pattern counts nothing towards the totals.
func (c *Patterns) Check(p string) error {
	if len(p) > MaxPattern {
		return errors.New("longer than 512 bytes")
	}
	progBefore, itemsBefore := c.prog, c.items
	c.p, c.i, c.start, c.fold, c.err = p, 0, c.prog, false, nil
	if len(p) >= 4 && p[:4] == "(?i)" {
		c.fold, c.i = true, 4
	}
	if c.alt(0) && !c.end() {
		c.fail("unmatched )")
	}
	if c.err != nil {
		c.prog, c.items = progBefore, itemsBefore
		return c.err
	}
	c.prog++ // MATCH
	return nil
}

func (c *Patterns) fail(m string) bool {
	if c.err == nil {
		c.err = errors.New(m)
	}
	return false
}

func (c *Patterns) grow(k int) bool {
	if c.prog-c.start+k > MaxProg-1 {
		return c.fail("compiles to over 1000 instructions")
	}
	if c.prog+k > MaxProgTotal-1 {
		return c.fail("the patterns compile to over 8192 instructions in all")
	}
	return true
}

func (c *Patterns) emit() bool {
	if !c.grow(1) {
		return false
	}
	c.prog++
	return true
}

func (c *Patterns) end() bool { return c.i >= len(c.p) }

func (c *Patterns) item() bool {
	if c.items == MaxItems {
		return c.fail("the patterns have over 4096 class items in all")
	}
	c.items++
	return true
}

func isPunct(b byte) bool {
	return b >= '!' && b <= '/' || b >= ':' && b <= '@' || b >= '[' && b <= '`' || b >= '{' && b <= '~'
}

func isPerl(b byte) bool {
	switch b {
	case 'd', 'D', 'w', 'W', 's', 'S':
		return true
	}
	return false
}

func isCtrl(b byte) bool {
	switch b {
	case 'n', 't', 'r', 'f', 'v':
		return true
	}
	return false
}

var ctrl = map[byte]rune{'n': '\n', 't': '\t', 'r': '\r', 'f': '\f', 'v': '\v'}

func (c *Patterns) rune() rune {
	r, size := utf8.DecodeRuneInString(c.p[c.i:])
	c.i += size
	return r
}

func (c *Patterns) literal(r rune) bool {
	if r == utf8.RuneError {
		return c.fail("U+FFFD is not in the subset")
	}
	if c.fold && r >= 0x80 {
		return c.fail("(?i) applies to ASCII only: a non-ASCII rune is not in the subset")
	}
	return true
}

func (c *Patterns) classSingle() (rune, bool) {
	if c.end() {
		return 0, c.fail("missing ]")
	}
	switch b := c.p[c.i]; b {
	case '[':
		return 0, c.fail("[ in a class: escape it")
	case '-':
		return 0, c.fail("- in a class: put it first or last, or escape it")
	case ']':
		return 0, c.fail("bad class range")
	case '\\':
		if c.i+1 >= len(c.p) {
			return 0, c.fail("trailing \\")
		}
		e := c.p[c.i+1]
		c.i += 2
		if isCtrl(e) {
			return ctrl[e], true
		}
		if isPunct(e) {
			return rune(e), true
		}
		return 0, c.fail("an escape not in the subset")
	}
	r := c.rune()
	return r, c.literal(r)
}

func (c *Patterns) class() bool {
	c.i++
	count := 0
	if !c.end() && c.p[c.i] == '^' {
		c.i++
	}
	for {
		if c.end() {
			return c.fail("missing ]")
		}
		b := c.p[c.i]
		if b == ']' {
			if count == 0 {
				return c.fail("empty class")
			}
			c.i++
			break
		}
		if b == '-' && (count == 0 || c.i+1 < len(c.p) && c.p[c.i+1] == ']') {
			c.i++
			if !c.item() {
				return false
			}
			count++
			continue
		}
		if b == '\\' && c.i+1 < len(c.p) && isPerl(c.p[c.i+1]) {
			if !c.item() {
				return false
			}
			c.i += 2
			if !c.end() && c.p[c.i] == '-' && c.i+1 < len(c.p) && c.p[c.i+1] != ']' {
				return c.fail("bad class range")
			}
			count++
			continue
		}
		lo, ok := c.classSingle()
		if !ok {
			return false
		}
		if !c.end() && c.p[c.i] == '-' && c.i+1 < len(c.p) && c.p[c.i+1] != ']' {
			c.i++
			hi, ok := c.classSingle()
			if !ok {
				return false
			}
			if hi < lo {
				return c.fail("bad class range")
			}
		}
		if !c.item() {
			return false
		}
		count++
	}
	return c.emit()
}

const none = -1

func (c *Patterns) repeat(a, lo, hi int) bool {
	s := c.prog - a
	size := lo * s
	if hi == none {
		size += s + 2
	} else {
		size += (hi - lo) * (s + 1)
	}
	c.prog = a
	if size > s && !c.grow(min(size, MaxProg)) {
		return false
	}
	c.prog = a + size
	return true
}

func (c *Patterns) count() (int, bool) {
	b, x := c.i, 0
	for !c.end() && c.p[c.i] >= '0' && c.p[c.i] <= '9' {
		x = x*10 + int(c.p[c.i]-'0')
		c.i++
		if c.i-b > 4 {
			return 0, false
		}
	}
	if c.i == b || c.i-b > 1 && c.p[b] == '0' || x > 1000 {
		return 0, false
	}
	return x, true
}

// piece parses an atom and the repetition after it, if any.
func (c *Patterns) piece(depth int) bool {
	a := c.prog
	anchor, ok := c.atom(depth)
	if !ok {
		return false
	}
	if c.end() {
		return true
	}
	lo, hi, rep, ok := c.repetition()
	if !ok || !rep {
		return ok
	}
	if anchor {
		return c.fail("repetition of ^ or $ is not in the subset")
	}
	if !c.end() && c.p[c.i] == '?' {
		c.i++
	}
	if !c.end() && (c.p[c.i] == '*' || c.p[c.i] == '+' || c.p[c.i] == '?' || c.p[c.i] == '{') {
		return c.fail("invalid nested repetition operator")
	}
	if hi == none && lo <= 1 {
		if lo == 0 {
			return c.grow(1) && c.emitAfterGrow() && c.emit()
		}
		return c.emit()
	}
	return c.repeat(a, lo, hi)
}

// atom parses a group, a dot, an anchor (anchor true), a class, an escape
// or a literal.
func (c *Patterns) atom(depth int) (anchor, ok bool) {
	switch c.p[c.i] {
	case '(':
		return false, c.group(depth)
	case '.':
		c.i++
		return false, c.emit()
	case '^', '$':
		c.i++
		return true, c.emit()
	case '[':
		return false, c.class()
	case '*', '+', '?', '{':
		return false, c.fail("missing argument to repetition operator")
	case '\\':
		return false, c.escape()
	default:
		return false, c.literal(c.rune()) && c.emit()
	}
}

// group parses a group, ( or (?:, and what it holds.
func (c *Patterns) group(depth int) bool {
	c.i++
	if !c.end() && c.p[c.i] == '?' {
		if c.i+1 < len(c.p) && c.p[c.i+1] == ':' {
			c.i += 2
		} else {
			return c.fail("(? groups other than (?: and a leading (?i) are not in the subset")
		}
	}
	if depth+1 > MaxDepth {
		return c.fail("groups nest over 32 deep")
	}
	if !c.alt(depth + 1) {
		return false
	}
	if c.end() || c.p[c.i] != ')' {
		return c.fail("missing )")
	}
	c.i++
	return true
}

// escape parses a backslash escape: a Perl class, a control character or
// an escaped punctuation mark.
func (c *Patterns) escape() bool {
	if c.i+1 >= len(c.p) {
		return c.fail("trailing \\")
	}
	e := c.p[c.i+1]
	c.i += 2
	switch {
	case isPerl(e):
		return c.item() && c.emit()
	case isCtrl(e), isPunct(e):
		return c.emit()
	default:
		return c.fail("an escape not in the subset")
	}
}

// repetition parses a repetition operator: *, +, ? or {n}, {n,} or
// {n,m}, as lo and hi (none: no bound); rep false when none follows.
func (c *Patterns) repetition() (lo, hi int, rep, ok bool) {
	switch c.p[c.i] {
	case '*':
		lo, hi = 0, none
		c.i++
	case '+':
		lo, hi = 1, none
		c.i++
	case '?':
		lo, hi = 0, 1
		c.i++
	case '{':
		c.i++
		var ok bool
		if lo, ok = c.count(); !ok {
			return 0, 0, false, c.fail("bad repetition {n,m}")
		}
		hi = lo
		if !c.end() && c.p[c.i] == ',' {
			c.i++
			hi = none
			if !c.end() && c.p[c.i] != '}' {
				if hi, ok = c.count(); !ok {
					return 0, 0, false, c.fail("bad repetition {n,m}")
				}
			}
		}
		if c.end() || c.p[c.i] != '}' || hi != none && hi < lo {
			return 0, 0, false, c.fail("bad repetition {n,m}")
		}
		c.i++
	default:
		return 0, 0, false, true
	}
	return lo, hi, true, true
}

// emitAfterGrow counts the SPLIT regex.h's shift inserts (grow checked).
func (c *Patterns) emitAfterGrow() bool {
	c.prog++
	return true
}

func (c *Patterns) alt(depth int) bool {
	for {
		for !c.end() && c.p[c.i] != '|' && c.p[c.i] != ')' {
			if !c.piece(depth) {
				return false
			}
		}
		if c.end() || c.p[c.i] != '|' {
			return true
		}
		c.i++
		if !c.grow(1) {
			return false
		}
		c.prog++ // the SPLIT shift inserts
		if !c.emit() {
			return false
		}
	}
}
