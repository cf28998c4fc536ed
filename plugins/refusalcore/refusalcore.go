// Package refusalcore is the pure decision logic of the refusal detector:
// normalise the leading text of a stream and match it against refusal
// phrases by prefix. It is shared by the driver's native detector and the
// Wasm refusal plugin, so both decide byte for byte the same.
//
// The package uses the standard library only and builds for GOOS=wasip1.
package refusalcore

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Outcome is the decision over the text seen so far.
type Outcome uint8

const (
	// Hold means the text is still a prefix of some phrase (or empty): wait
	// for more text.
	Hold Outcome = iota
	// Match means the text starts with a phrase: the model refused.
	Match
	// Diverge means the text can no longer become any phrase: not a refusal.
	Diverge
)

// String returns "hold", "match" or "diverge".
func (o Outcome) String() string {
	switch o {
	case Hold:
		return "hold"
	case Match:
		return "match"
	case Diverge:
		return "diverge"
	}
	return "unknown"
}

// defaultPhrases is drawn from the refusal prefixes published with
// jailbreak and refusal benchmarks (the "test prefixes" of Zou et al.'s
// llm-attacks, and the ai-retry refusal-recovery example). Each is the
// opening of an answer, since the detector matches by prefix.
var defaultPhrases = [...]string{
	"I'm sorry, but I can't",
	"I'm sorry, but I cannot",
	"I'm sorry, but I won't",
	"I'm sorry, I can't",
	"I'm sorry, I cannot",
	"I am sorry, but I cannot",
	"I am sorry, but I can't",
	"I apologize, but I cannot",
	"I apologize, but I can't",
	"I apologise, but I cannot",
	"My apologies, but I can't",
	"Sorry, but I can't",
	"Sorry, but I cannot",
	"Sorry, I can't help with",
	"I cannot help with",
	"I can't help with",
	"I cannot assist with",
	"I can't assist with",
	"I cannot provide",
	"I can't provide",
	"I'm unable to help with",
	"I am unable to help with",
	"I'm not able to help with",
	"I won't be able to help with",
	"As an AI language model",
	"As an AI, I cannot",
	"As an AI, I can't",
}

// DefaultPhrases returns a fresh copy of the default refusal phrases, as
// written (not normalised).
func DefaultPhrases() []string {
	out := make([]string, len(defaultPhrases))
	copy(out, defaultPhrases[:])
	return out
}

// ErrEmptyPhrase is returned by [New] for a phrase that is empty once normalised.
var ErrEmptyPhrase = errors.New("refusalcore: empty phrase")

// Matcher holds a normalised phrase list. It is immutable and safe for
// concurrent use.
type Matcher struct {
	phrases []string // normalised, in the order given
	maxLen  int      // length of the longest normalised phrase, in bytes
	dfa     dfa      // the phrases' trie, for State
}

// New normalises the phrases once. An empty list or a phrase that normalises
// to nothing is an error: an empty phrase would match every stream.
func New(phrases []string) (*Matcher, error) {
	if len(phrases) == 0 {
		return nil, fmt.Errorf("%w: no phrases", ErrEmptyPhrase)
	}
	m := &Matcher{phrases: make([]string, len(phrases))}
	for i, p := range phrases {
		n := Normalize(p)
		if n == "" {
			return nil, fmt.Errorf("%w: phrase %d (%q)", ErrEmptyPhrase, i, p)
		}
		m.phrases[i] = n
		m.maxLen = max(m.maxLen, len(n))
	}
	if err := m.dfa.compile(m.phrases); err != nil {
		return nil, err
	}
	return m, nil
}

// Phrases returns the normalised phrases.
func (m *Matcher) Phrases() []string { return append([]string(nil), m.phrases...) }

// MaxLen is the byte length of the longest normalised phrase: a Hold never
// lasts beyond that much normalised text.
func (m *Matcher) MaxLen() int { return m.maxLen }

// Decide judges normalised text (as built by [AppendNormalized] over all the
// leading text so far). On Match it also returns the phrase, the first in
// list order that the text starts with.
func (m *Matcher) Decide(norm []byte) (Outcome, string) {
	t := string(norm) // no allocation: the conversion does not escape below
	prefix := false
	for _, p := range m.phrases {
		if strings.HasPrefix(t, p) {
			return Match, p
		}
		if !prefix && strings.HasPrefix(p, t) {
			prefix = true
		}
	}
	if prefix {
		return Hold, ""
	}
	return Diverge, ""
}

// DecideText normalises text and decides; a convenience over
// [AppendNormalized] and [Matcher.Decide] that allocates.
func (m *Matcher) DecideText(text string) (Outcome, string) {
	return m.Decide(AppendNormalized(nil, text))
}

// Normalize lower-cases s, folds typographic apostrophes to ', collapses
// every run of white space to one space and trims both ends.
func Normalize(s string) string { return string(AppendNormalized(nil, s)) }

// AppendNormalized appends the normalised form of s to dst (see
// [Normalize]). An incomplete UTF-8 sequence at the very end of s (a rune
// split across two deltas) is left out, so that it does not read as a
// divergence before its remaining bytes arrive; an invalid sequence
// elsewhere is kept as U+FFFD.
func AppendNormalized(dst []byte, s string) []byte {
	start := len(dst)
	space := false
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch {
			case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f':
				space = true
				continue
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			}
			if space && len(dst) > start {
				dst = append(dst, ' ')
			}
			space = false
			dst = append(dst, c)
			continue
		}
		if !utf8.FullRuneInString(s[i:]) {
			break // a split rune at the end: wait for the rest
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if unicode.IsSpace(r) {
			space = true
			continue
		}
		switch r {
		case '\u2018', '\u2019', '\u02bc', '\u2032', '\uff07':
			r = '\''
		default:
			r = unicode.ToLower(r)
		}
		if space && len(dst) > start {
			dst = append(dst, ' ')
		}
		space = false
		dst = utf8.AppendRune(dst, r)
	}
	return dst
}
