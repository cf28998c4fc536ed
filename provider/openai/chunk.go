package openai

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"

	oai "github.com/openai/openai-go/v3"

	"github.com/retryhost/retryhost/abi"
)

// chunk is what the adapter reads of one chat.completion.chunk: the
// fields source.chunk maps to parts, nothing else. It is filled either by
// decodeChunk (the lean decoder, for the common, well-typed chunk) or from
// the SDK's oai.ChatCompletionChunk (fromSDK), and both must agree on
// every input decodeChunk accepts (FuzzChunkDecoders checks it).
type chunk struct {
	id, model string
	created   int64
	// system_fingerprint and service_tier (WithChunkFields).
	fingerprint, tier string
	hasUsage          bool // the SDK's c.JSON.Usage.Valid()
	usage             abi.Usage
	choices           []choice // the choices with index 0, in order (n > 1 is not modelled)

	lastID, lastModel string // the previous chunk's, reused when they repeat
	d                 lean   // decodeChunk's reader
	// completion has the reader take a non-streamed chat.completion
	// (decodeCompletion): each choice's "message" in place of its
	// "delta", its tool calls indexed by their place.
	completion bool
}

type choice struct {
	content, refusal, reasoning, finish string
	tools                               []toolDelta
	// Its logprobs object and that object's content and refusal arrays,
	// as raw JSON; "" when absent or null (WithChunkFields).
	lp, lpContent, lpRefusal string
}

type toolDelta struct {
	index          int64
	id, name, args string
}

// reset empties c for the next chunk, keeping its buffers and, for
// reuse, the last id and model (every chunk of a stream repeats them).
func (c *chunk) reset() {
	clear(c.choices)
	*c = chunk{choices: c.choices[:0], lastID: cmpOr(c.id, c.lastID), lastModel: cmpOr(c.model, c.lastModel)}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// fromSDK fills c from the SDK's decoding of a chunk.
func (c *chunk) fromSDK(sc *oai.ChatCompletionChunk) {
	c.reset()
	c.id, c.model, c.created = sc.ID, sc.Model, sc.Created
	c.fingerprint, c.tier = sc.SystemFingerprint, string(sc.ServiceTier)
	if sc.JSON.Usage.Valid() {
		c.hasUsage, c.usage = true, usage(&sc.Usage)
	}
	for i := range sc.Choices {
		ch := &sc.Choices[i]
		if ch.Index != 0 {
			continue
		}
		d := &ch.Delta
		o := choice{content: d.Content, refusal: d.Refusal, reasoning: reasoningText(d.JSON.ExtraFields), finish: ch.FinishReason}
		if ch.JSON.Logprobs.Valid() {
			o.lp = ch.JSON.Logprobs.Raw()
			if lp := &ch.Logprobs; lp.JSON.Content.Valid() {
				o.lpContent = lp.JSON.Content.Raw()
			}
			if lp := &ch.Logprobs; lp.JSON.Refusal.Valid() {
				o.lpRefusal = lp.JSON.Refusal.Raw()
			}
		}
		for j := range d.ToolCalls {
			tc := &d.ToolCalls[j]
			o.tools = append(o.tools, toolDelta{index: tc.Index, id: tc.ID, name: tc.Function.Name, args: tc.Function.Arguments})
		}
		c.choices = append(c.choices, o)
	}
}

// decodeChunk decodes data (one SSE event's data, a JSON object) into c
// without reflection, for the chunk shape every OpenAI-compatible server
// sends: the fields read have their JSON types (strings or null, integers
// or null, objects or null, arrays or null), no key is escaped, and there
// is no top-level "error". It reports false for anything else, which the
// caller then decodes with the SDK, whose lenient rules (a number where a
// string belongs is stringified, and so on) this decoder does not repeat.
// It validates the whole document as encoding/json does, so a malformed
// event is never accepted here.
func decodeChunk(data []byte, c *chunk) bool {
	c.reset()
	// The reader is the chunk's: the member functions it is handed to
	// would move a local one to the heap, once per event.
	d := &c.d
	*d = lean{b: data}
	d.ws()
	ok := d.object(0, c.top)
	d.ws()
	ok = ok && d.i == len(d.b)
	*d = lean{} // the event's data is its body's, and only until its next event
	return ok
}

// decodeCompletion is decodeChunk for a non-streamed chat.completion
// (WithUpstreamJSON): c is filled as fromCompletion fills it, and it
// reports false for what the SDK must decode (the same rules as
// decodeChunk's, and an "error" member). FuzzCompletionDecoders checks
// that both agree.
func decodeCompletion(data []byte, c *chunk) bool {
	c.reset()
	c.completion = true
	d := &c.d
	*d = lean{b: data}
	d.ws()
	ok := d.object(0, c.top)
	d.ws()
	ok = ok && d.i == len(d.b)
	*d = lean{} // c's strings are copies: data is not kept
	c.completion = false
	return ok
}

// lean is a strict, validating JSON reader over one document.
type lean struct {
	b []byte
	i int
}

// maxLeanDepth bounds the nesting the lean decoder follows; deeper
// documents go to the SDK (encoding/json allows 10,000).
const maxLeanDepth = 64

// maxLeanKeys bounds the members of an object whose members are read
// (repeated keys are looked for); a larger one goes to the SDK.
const maxLeanKeys = 32

func (d *lean) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// object reads an object, calling member for each key with the reader at
// the value; member must consume the value and report whether it was
// well-typed. A nil member skips every value.
func (d *lean) object(depth int, member func(d *lean, key []byte, depth int) bool) bool {
	if depth > maxLeanDepth || d.i >= len(d.b) || d.b[d.i] != '{' {
		return false
	}
	d.i++
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return true
	}
	var (
		// The keys so far, as offset<<32 | length: a third of the bytes
		// of slices to clear per object; and a bit per (length + first
		// byte + twice the last) mod 64, so that a new key is compared
		// with the others only when one may equal it.
		seen  [maxLeanKeys]uint64
		bloom uint64
		n     int
	)
	for {
		d.ws()
		key, escaped, ok := d.rawString()
		if !ok || escaped {
			return false // an escaped key may name a field: the SDK's rules
		}
		if member != nil {
			// A repeated key: which one the SDK keeps is its own rule.
			if n == len(seen) {
				return false
			}
			h := uint(len(key))
			if len(key) > 0 {
				h += uint(key[0]) + uint(key[len(key)-1])<<1
			}
			if bloom&(1<<(h&63)) != 0 {
				for _, k := range seen[:n] {
					if off := k >> 32; string(d.b[off:off+k&0xffffffff]) == string(key) {
						return false
					}
				}
			}
			bloom |= 1 << (h & 63)
			seen[n] = uint64(d.i-1-len(key))<<32 | uint64(len(key))
			n++
		}
		d.ws()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return false
		}
		d.i++
		d.ws()
		if member != nil {
			if !member(d, key, depth+1) {
				return false
			}
		} else if !d.skip(depth + 1) {
			return false
		}
		if more, ok := d.next('}'); !more {
			return ok
		}
	}
}

// next reads what follows an object's member or an array's element: ','
// (more follows) or close (the end; ok). Anything else is not ok.
func (d *lean) next(close byte) (more, ok bool) {
	d.ws()
	if d.i >= len(d.b) {
		return false, false
	}
	switch d.b[d.i] {
	case ',':
		d.i++
		return true, true
	case close:
		d.i++
		return false, true
	}
	return false, false
}

// array reads an array, calling elem for each element.
func (d *lean) array(depth int, elem func(d *lean, depth int) bool) bool {
	if depth > maxLeanDepth || d.i >= len(d.b) || d.b[d.i] != '[' {
		return false
	}
	d.i++
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return true
	}
	for {
		d.ws()
		if !elem(d, depth+1) {
			return false
		}
		if more, ok := d.next(']'); !more {
			return ok
		}
	}
}

// skip reads and validates any value.
func (d *lean) skip(depth int) bool {
	if d.i >= len(d.b) {
		return false
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(depth, nil)
	case c == '[':
		return d.array(depth, func(d *lean, depth int) bool { return d.skip(depth) })
	case c == '"':
		_, _, ok := d.rawString()
		return ok
	case c == 't':
		return d.lit("true")
	case c == 'f':
		return d.lit("false")
	case c == 'n':
		return d.lit("null")
	default:
		_, ok := d.number()
		return ok
	}
}

func (d *lean) lit(s string) bool {
	if len(d.b)-d.i < len(s) || string(d.b[d.i:d.i+len(s)]) != s {
		return false
	}
	d.i += len(s)
	return true
}

// null consumes a null if one is next.
func (d *lean) null() bool {
	if d.i < len(d.b) && d.b[d.i] == 'n' {
		return d.lit("null")
	}
	return false
}

// number reads a JSON number and returns its text.
func (d *lean) number() ([]byte, bool) {
	s := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.b) && d.b[d.i] == '0':
		d.i++
	case d.i < len(d.b) && d.b[d.i] >= '1' && d.b[d.i] <= '9':
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
		}
	default:
		return nil, false
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if !d.digits() {
			return nil, false
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if !d.digits() {
			return nil, false
		}
	}
	return d.b[s:d.i], true
}

func (d *lean) digits() bool {
	s := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	return d.i > s
}

// int reads an integer (or null, as 0) that fits an int64 without doubt;
// a fraction, an exponent or 19 digits and more are left to the SDK.
func (d *lean) int(v *int64) bool {
	if d.null() {
		*v = 0
		return true
	}
	n, ok := d.number()
	if !ok {
		return false
	}
	neg := n[0] == '-'
	if neg {
		n = n[1:]
	}
	if len(n) > 18 {
		return false
	}
	var x int64
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
		x = x*10 + int64(c-'0')
	}
	if neg {
		x = -x
	}
	*v = x
	return true
}

// rawString reads a string token and returns its contents (between the
// quotes, still escaped) and whether it holds an escape. Control
// characters are rejected, as JSON says; bytes that are not UTF-8 pass (as
// in encoding/json's validation).
func (d *lean) rawString() (raw []byte, escaped, ok bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false, false
	}
	d.i++
	s := d.i
	for {
		if len(d.b)-d.i >= 8 { // 8 bytes at a time, to the first that is not plain
			m := special8(binary.LittleEndian.Uint64(d.b[d.i:]))
			if m == 0 {
				d.i += 8
				continue
			}
			d.i += bits.TrailingZeros64(m) >> 3
		}
		if d.i >= len(d.b) {
			return nil, false, false
		}
		c := d.b[d.i]
		switch {
		case c == '"':
			raw = d.b[s:d.i]
			d.i++
			return raw, escaped, true
		case c == '\\':
			escaped = true
			d.i++
			if d.i >= len(d.b) {
				return nil, false, false
			}
			switch d.b[d.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				d.i++
			case 'u':
				if len(d.b)-d.i < 5 {
					return nil, false, false
				}
				for _, h := range d.b[d.i+1 : d.i+5] {
					if !isHex(h) {
						return nil, false, false
					}
				}
				d.i += 5
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		default:
			d.i++
		}
	}
}

// special8 marks, with the high bit of its byte, each of the 8 bytes in v
// (little-endian) that is '"', '\\' or a control character, and may mark
// plain bytes above the first one marked, never below: the lowest mark
// is the first special byte. (The tests for a zero byte and for a byte
// below n, bytes - 0x01… or n…, masked by the bytes' own high bits, have
// no false negatives; a false positive needs a borrow from a true one
// below it.)
func special8(v uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := v ^ lo*'"'
	b := v ^ lo*'\\'
	return ((q-lo)&^q | (b-lo)&^b | (v-lo*0x20)&^v) & hi
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// str reads a string (or null, as "") the way the SDK reads a string
// field: raw bytes as they are (no UTF-8 repair), escapes undone as gjson
// undoes them.
func (d *lean) str(v *string) bool {
	if d.null() {
		*v = ""
		return true
	}
	raw, escaped, ok := d.rawString()
	if !ok {
		return false
	}
	if !escaped {
		*v = string(raw)
	} else {
		*v = unescapeGJSON(raw)
	}
	return true
}

// strReuse is str, but yields prev itself when the value equals it.
func (d *lean) strReuse(v *string, prev string) bool {
	if s := d.i; d.i < len(d.b) && d.b[d.i] == '"' {
		if raw, escaped, ok := d.rawString(); ok && !escaped && string(raw) == prev {
			*v = prev
			return true
		}
		d.i = s
	}
	return d.str(v)
}

// rawArray reads an array (or null, as "") and returns its text as it
// came; anything else is left to the SDK.
func (d *lean) rawArray(depth int, v *string) bool {
	*v = ""
	if d.null() {
		return true
	}
	s := d.i
	if !d.array(depth, func(d *lean, depth int) bool { return d.skip(depth) }) {
		return false
	}
	*v = string(d.b[s:d.i])
	return true
}

// extraStr reads a field the SDK keeps raw in ExtraFields and the adapter
// decodes with encoding/json into a string (reasoningText): "" for
// anything but a string.
func (d *lean) extraStr(v *string) bool {
	s := d.i
	if d.i < len(d.b) && d.b[d.i] == '"' {
		raw, escaped, ok := d.rawString()
		if !ok {
			return false
		}
		if !escaped && utf8.Valid(raw) {
			*v = string(raw)
			return true
		}
		// Into a local: v would go to the heap with it, on every call.
		var u string
		ok = json.Unmarshal(d.b[s:d.i], &u) == nil
		*v = u
		return ok
	}
	*v = ""
	return d.skip(0)
}

// unescapeGJSON undoes a valid JSON string's escapes as gjson (which the
// SDK decodes with) does: a surrogate followed by any \u escape is paired
// with it (U+FFFD if they do not pair); a lone one becomes U+FFFD.
func unescapeGJSON(raw []byte) string {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(raw[i+1:])
			i += 5
			if utf16.IsSurrogate(r) && len(raw)-i >= 6 && raw[i] == '\\' && raw[i+1] == 'u' {
				r = utf16.DecodeRune(r, hex4(raw[i+2:]))
				i += 6
			}
			out = utf8.AppendRune(out, r)
			i--
		default: // '"', '\\', '/'
			out = append(out, raw[i])
		}
	}
	return string(out)
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// top reads the chunk's top-level members.
func (c *chunk) top(d *lean, key []byte, depth int) bool {
	switch string(key) {
	case "id":
		return d.strReuse(&c.id, c.lastID)
	case "model":
		return d.strReuse(&c.model, c.lastModel)
	case "created":
		return d.int(&c.created)
	case "system_fingerprint":
		return d.str(&c.fingerprint)
	case "service_tier":
		return d.str(&c.tier)
	case "usage":
		if d.null() {
			c.hasUsage, c.usage = false, abi.Usage{}
			return true
		}
		c.hasUsage, c.usage = true, abi.Usage{}
		return d.object(depth, c.usageMember)
	case "choices":
		clear(c.choices)
		c.choices = c.choices[:0]
		if d.null() {
			return true
		}
		return d.array(depth, c.choice)
	case "error":
		return false // the SDK ends the stream with it
	}
	return d.skip(depth)
}

func (c *chunk) usageMember(d *lean, key []byte, depth int) bool {
	u := &c.usage
	switch string(key) {
	case "prompt_tokens":
		return d.int(&u.InputTokens)
	case "completion_tokens":
		return d.int(&u.OutputTokens)
	case "prompt_tokens_details":
		u.CacheReadTokens, u.CacheWriteTokens = 0, 0
		if d.null() {
			return true
		}
		return d.object(depth, func(d *lean, key []byte, depth int) bool {
			switch string(key) {
			case "cached_tokens":
				return d.int(&u.CacheReadTokens)
			case "cache_write_tokens":
				return d.int(&u.CacheWriteTokens)
			}
			return d.skip(depth)
		})
	case "completion_tokens_details":
		u.ReasoningTokens = 0
		if d.null() {
			return true
		}
		return d.object(depth, func(d *lean, key []byte, depth int) bool {
			if string(key) == "reasoning_tokens" {
				return d.int(&u.ReasoningTokens)
			}
			return d.skip(depth)
		})
	}
	return d.skip(depth)
}

// choice reads one element of choices; only index 0 is kept.
func (c *chunk) choice(d *lean, depth int) bool {
	var (
		o                     choice
		index                 int64
		reasoningC, reasoning string
	)
	ok := d.object(depth, func(d *lean, key []byte, depth int) bool {
		switch string(key) {
		case "index":
			return d.int(&index)
		case "finish_reason":
			return d.str(&o.finish)
		case "logprobs":
			o.lp, o.lpContent, o.lpRefusal = "", "", ""
			if d.null() {
				return true
			}
			s := d.i
			ok := d.object(depth, func(d *lean, key []byte, depth int) bool {
				switch string(key) {
				case "content":
					return d.rawArray(depth, &o.lpContent)
				case "refusal":
					return d.rawArray(depth, &o.lpRefusal)
				}
				return d.skip(depth)
			})
			o.lp = string(d.b[s:d.i])
			return ok
		case "delta", "message":
			if (string(key) == "message") != c.completion {
				return d.skip(depth) // not a member of this shape
			}
			o.content, o.refusal, o.tools, reasoningC, reasoning = "", "", o.tools[:0], "", ""
			if d.null() {
				return true
			}
			return d.object(depth, func(d *lean, key []byte, depth int) bool {
				switch string(key) {
				case "content":
					return d.str(&o.content)
				case "refusal":
					return d.str(&o.refusal)
				case "reasoning_content":
					return d.extraStr(&reasoningC)
				case "reasoning":
					return d.extraStr(&reasoning)
				case "tool_calls":
					o.tools = o.tools[:0]
					if d.null() {
						return true
					}
					return d.array(depth, func(d *lean, depth int) bool {
						var t toolDelta
						if !d.object(depth, t.member) {
							return false
						}
						if c.completion {
							t.index = int64(len(o.tools)) // a message's calls have no index
						}
						o.tools = append(o.tools, t)
						return true
					})
				}
				return d.skip(depth)
			})
		}
		return d.skip(depth)
	})
	if !ok {
		return false
	}
	if index == 0 {
		if o.reasoning = reasoningC; o.reasoning == "" {
			o.reasoning = reasoning
		}
		c.choices = append(c.choices, o)
	}
	return true
}

func (t *toolDelta) member(d *lean, key []byte, depth int) bool {
	switch string(key) {
	case "index":
		return d.int(&t.index)
	case "id":
		return d.str(&t.id)
	case "function":
		t.name, t.args = "", ""
		if d.null() {
			return true
		}
		return d.object(depth, func(d *lean, key []byte, depth int) bool {
			switch string(key) {
			case "name":
				return d.str(&t.name)
			case "arguments":
				return d.str(&t.args)
			}
			return d.skip(depth)
		})
	}
	return d.skip(depth)
}
