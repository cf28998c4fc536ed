package gateway

import (
	"bytes"
	"encoding/json"

	"github.com/retryhost/retryhost/abi"
)

// usageTap reads the usage an upstream reports in the answer that a
// forwarded door passes on, from the bytes as they go by: it keeps no copy
// of the answer, only the usage object (at most maxUsageBytes of it).
//
// A JSON answer's usage is its top-level "usage" object: an embeddings
// answer's {"prompt_tokens", "total_tokens"}, a Responses answer's
// {"input_tokens", "output_tokens", "input_tokens_details": {"cached_tokens"}}.
// In an event stream (a streamed Responses request), it is the
// "response"'s "usage" of each event's data (response.completed,
// response.incomplete, response.failed carry one; the events before them
// carry null): the last one reported counts.
type usageTap struct {
	sse  bool // an event stream: the data lines' JSON, event by event
	scan jsonScan

	// The event stream's line: its start read up to "data:" (prefix
	// bytes), then its data (inData) or the rest skipped.
	prefix  int
	inData  bool
	skip    bool
	midLine bool
}

// maxUsageBytes bounds the usage object a tap keeps: OpenAI's are under
// 300 bytes; a larger one is not read (the request keeps its estimate).
const maxUsageBytes = 4 << 10

// newUsageTap reads a JSON answer, or an event stream's when sse.
func newUsageTap(sse bool) *usageTap {
	t := &usageTap{sse: sse}
	t.scan.path = [][]byte{[]byte("usage")}
	if sse {
		t.scan.path = [][]byte{[]byte("response"), []byte("usage")}
	}
	return t
}

// Write reads p, the next bytes of the answer; it never fails.
func (t *usageTap) Write(p []byte) (int, error) {
	if !t.sse {
		t.scan.feed(p)
		return len(p), nil
	}
	const data = "data:"
	for i := 0; i < len(p); {
		switch {
		case t.inData || t.skip:
			j := bytes.IndexByte(p[i:], '\n')
			if j < 0 {
				if t.inData {
					t.scan.feed(p[i:])
				}
				return len(p), nil
			}
			if t.inData {
				t.scan.feed(p[i : i+j]) // the lines of one event's data are one JSON text
			}
			t.inData, t.skip, t.midLine, t.prefix = false, false, false, 0
			i += j + 1
		case p[i] == '\r':
			i++
		case p[i] == '\n':
			if !t.midLine {
				t.scan.reset() // a blank line ends the event
			}
			t.midLine, t.prefix = false, 0
			i++
		case p[i] == data[t.prefix]:
			t.midLine = true
			t.prefix++
			i++
			if t.prefix == len(data) {
				t.inData = true
			}
		default:
			t.midLine, t.skip = true, true
		}
	}
	return len(p), nil
}

// usage is the last usage the answer reported, and whether it reported one.
func (t *usageTap) usage() (abi.Usage, bool) {
	if !t.scan.found {
		return abi.Usage{}, false
	}
	return t.scan.usage, true
}

// jsonScan follows the structure of a JSON text given piece by piece, to
// read the object that path names (a member of the top-level object, of
// its member, …); found says it has read one (a later one replaces it).
type jsonScan struct {
	path [][]byte

	depth   int  // containers open
	matched int  // path's names the open containers at depths 2… are, so far
	armed   bool // path[matched]'s ':' was read: its value comes next
	inStr   bool
	esc     bool
	naming  bool // the string read is at depth matched+1: perhaps the name path[matched]
	name    []byte
	nameBad bool // the string is not path[matched] (longer, or escaped)
	lastOK  bool // the last string read at depth matched+1 was path[matched]
	capAt   int  // the depth of the object captured, 0: none
	buf     []byte
	over    bool // the captured object passed maxUsageBytes

	found bool
	usage abi.Usage
}

// reset readies s for another JSON text, keeping what it found.
func (s *jsonScan) reset() {
	s.depth, s.matched, s.armed, s.inStr, s.esc, s.naming, s.lastOK, s.capAt, s.over = 0, 0, false, false, false, false, false, 0, false
	s.buf = s.buf[:0]
}

// structural are the bytes that start or end a string or a container.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

const structuralBytes = `"{}[]`

// feed reads the next bytes of the text.
func (s *jsonScan) feed(p []byte) {
	next := [len(structuralBytes)]int{-1, -1, -1, -1, -1}
	for i := 0; i < len(p); i++ {
		b := p[i]
		if s.capAt > 0 && !s.over {
			if len(s.buf) >= maxUsageBytes {
				s.over = true
			} else {
				s.buf = append(s.buf, b)
			}
		}
		if s.inStr {
			if s.esc {
				s.esc = false
				s.nameBad = true
				continue
			}
			if !s.naming && s.capAt == 0 {
				// Skip to the next quote or backslash: most of a long
				// string (a base64 vector) goes by here.
				j := bytes.IndexByte(p[i:], '"')
				if j < 0 {
					j = len(p) - i
				}
				if k := bytes.IndexByte(p[i:i+j], '\\'); k >= 0 {
					j = k
				}
				if i += j; i == len(p) {
					return
				}
				b = p[i]
			}
			switch b {
			case '\\':
				s.esc = true
			case '"':
				s.inStr = false
				if s.naming {
					s.naming = false
					s.lastOK = !s.nameBad && bytes.Equal(s.name, s.path[s.matched])
				}
			default:
				if s.naming && !s.nameBad {
					if len(s.name) < len(s.path[s.matched]) {
						s.name = append(s.name, b)
					} else {
						s.nameBad = true
					}
				}
			}
			continue
		}
		if s.depth > s.matched+1 && s.capAt == 0 && !structural[b] {
			// Below the path only where strings and containers start
			// and end matters: skip to the nearest (most of an
			// embeddings answer, its vectors' numbers, goes by here).
			// next keeps each byte's next place in p, each found by
			// one scan past the last.
			j := len(p)
			for k := range next {
				if next[k] < i {
					next[k] = len(p)
					if n := bytes.IndexByte(p[i:], structuralBytes[k]); n >= 0 {
						next[k] = i + n
					}
				}
				j = min(j, next[k])
			}
			if i = j; i == len(p) {
				return
			}
			b = p[i]
		}
		switch b {
		case '"':
			s.inStr = true
			if s.capAt == 0 && s.depth == s.matched+1 && s.matched < len(s.path) {
				s.naming, s.nameBad, s.name = true, false, s.name[:0]
			}
			s.armed = false
		case ':':
			if s.depth == s.matched+1 && s.lastOK && s.capAt == 0 {
				s.armed = true
			}
			s.lastOK = false
		case '{', '[':
			s.depth++
			if s.armed && b == '{' {
				if s.matched+1 < len(s.path) {
					s.matched++
				} else {
					s.capAt, s.over = s.depth, false
					s.buf = append(s.buf[:0], b)
				}
			}
			s.armed = false
		case '}', ']':
			if s.capAt == s.depth {
				s.capAt = 0
				if !s.over {
					s.take(s.buf)
				}
			}
			s.depth--
			if s.matched > 0 && s.depth <= s.matched {
				s.matched = max(s.depth-1, 0)
			}
			s.armed, s.lastOK = false, false
		case ' ', '\t', '\n', '\r':
		default:
			s.armed, s.lastOK = false, false // a number, true, false or null
		}
	}
}

// wireUsage is the usage objects of OpenAI's embeddings and Responses
// answers.
type wireUsage struct {
	PromptTokens       *int64 `json:"prompt_tokens"`
	TotalTokens        int64  `json:"total_tokens"`
	InputTokens        int64  `json:"input_tokens"`
	OutputTokens       int64  `json:"output_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
}

// take reads a usage object captured.
func (s *jsonScan) take(obj []byte) {
	var w wireUsage
	if json.Unmarshal(obj, &w) != nil {
		return
	}
	u := abi.Usage{InputTokens: w.InputTokens, OutputTokens: w.OutputTokens,
		CacheReadTokens: w.InputTokensDetails.CachedTokens, ReasoningTokens: w.OutputTokensDetails.ReasoningTokens}
	if w.PromptTokens != nil { // an embeddings answer's: all input
		u.InputTokens = *w.PromptTokens
		u.OutputTokens = max(0, w.TotalTokens-*w.PromptTokens)
	}
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CacheReadTokens < 0 || u.ReasoningTokens < 0 {
		return
	}
	s.usage, s.found = u, true
}

// add appends an attempt a forwarded door made to the trail.
func (t *acctTrail) add(a acctAttempt) {
	if p, ok := t.prices[a.model]; ok {
		a.cost = p.Cost(a.usage)
	}
	t.mu.Lock()
	if t.attempts == nil {
		t.attempts = t.first[:0]
	}
	t.attempts = append(t.attempts, a)
	t.mu.Unlock()
}
