package vkey

import (
	"bytes"
	"cmp"
	"encoding/json"
	"runtime"
	"strconv"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// decodeFile decodes a key file's JSON exactly as json.Unmarshal into a
// File does (same result, same error), faster: a file in the shape
// retryhost keys writes (lower-case field names, each once, strings
// without escapes, no nulls) is read by a decoder that knows the fields;
// anything else, and every mistake, goes to json.Unmarshal, whose answer
// is then the answer.
func decodeFile(data []byte) (*File, error) { return decodeString(string(data)) }

// decodeString is decodeFile on a string, which the keys decoded on the
// fast path keep (their strings are parts of it, not copies): one
// allocation for the file rather than one per string.
func decodeString(s string) (*File, error) {
	if f, ok := fastFile(s); ok {
		return f, nil
	}
	var f File
	if err := json.Unmarshal(bytesOf(s), &f); err != nil { // it reads data, never writes it
		return nil, err
	}
	return &f, nil
}

// bytesOf returns s's bytes, not copied: not to be written.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// fastFile is the fast path: ok is false at the first byte it does not
// take, and the input is then json.Unmarshal's.
func fastFile(data string) (*File, bool) {
	d := newDecoder(data)
	f := &File{}
	var seenStore, seenKeys bool
	ok := d.object(func(name string) bool {
		switch name {
		case "on_store_down":
			if seenStore {
				return false
			}
			seenStore = true
			s, ok := d.str()
			f.OnStoreDown = s
			return ok
		case "keys":
			if seenKeys {
				return false
			}
			seenKeys = true
			var ok bool
			f.Keys, ok = d.keyArray()
			return ok
		}
		return false
	})
	d.ws()
	return f, ok && d.i == len(d.b)
}

// A decoder reads s, through b (its bytes, read only); the strings it
// returns are parts of s.
type decoder struct {
	s    string
	b    []byte
	i    int
	slab []Key // where key takes its next Key from
	// slabSize is how many Keys a slab holds (0: 256).
	slabSize int
}

func newDecoder(s string) decoder { return decoder{s: s, b: bytesOf(s)} }

// parallelMin is the least "keys" array, in bytes, that keyArray reads
// in parallel chunks.
const parallelMin = 1 << 20

// keyArray reads the "keys" array: in chunks, one goroutine each, when
// it is large and the process has more than one CPU, else in one pass.
func (d *decoder) keyArray() ([]*Key, bool) {
	d.ws()
	start := d.i
	if procs := runtime.GOMAXPROCS(0); procs > 1 && len(d.b)-start >= parallelMin {
		if keys, end, ok := parallelKeys(d.s, start, 2*procs); ok {
			d.i = end
			return keys, true
		}
	}
	d.i = start
	keys := make([]*Key, 0, (len(d.b)-start)/256+1)
	ok := d.array(func() bool {
		k, ok := d.key()
		keys = append(keys, k)
		return ok
	})
	return keys, ok
}

// parallelKeys reads the array at b[start] in n chunks at once. Each
// chunk starts at a guess of where a key object starts (a "{" after "}"
// and ",", which a string may hold too), found near an n-th of the
// array; chunk i reads keys until it stands exactly at chunk i+1's
// start, so that, from the first chunk's true start on, each start is
// shown to be a true one by the chunk before it. Any chunk that does
// not land so, or any mistake, is ok false: the caller reads the array
// in one pass, whose answer is the answer. end is after the "]".
func parallelKeys(src string, start, n int) (keys []*Key, end int, ok bool) {
	b := bytesOf(src)
	if b[start] != '[' {
		return nil, 0, false
	}
	starts := []int{start + 1}
	for j := 1; j < n; j++ {
		c := keyStartNear(b, start+j*(len(b)-start)/n)
		if c > starts[len(starts)-1] {
			starts = append(starts, c)
		}
	}
	if len(starts) < 2 {
		return nil, 0, false
	}
	parts := make([][]*Key, len(starts))
	oks := make([]bool, len(starts))
	var wg sync.WaitGroup
	for j, s := range starts {
		next := -1 // the last chunk ends at the "]"
		if j+1 < len(starts) {
			next = starts[j+1]
		}
		hint := (len(b)-s)/256 + 1
		if next >= 0 {
			hint = (next-s)/256 + 1
		}
		wg.Go(func() {
			d := newDecoder(src)
			d.i = s
			parts[j], oks[j] = d.keysUntil(next, hint)
			if next < 0 {
				end = d.i
			}
		})
	}
	wg.Wait()
	total := 0
	for j := range parts {
		if !oks[j] {
			return nil, 0, false
		}
		total += len(parts[j])
	}
	keys = make([]*Key, 0, total)
	for _, p := range parts {
		keys = append(keys, p...)
	}
	return keys, end, true
}

// keysUntil reads keys and the commas between them until, after a comma,
// it stands at next; or, with next -1, until the array's "]".
func (d *decoder) keysUntil(next, hint int) ([]*Key, bool) {
	keys := make([]*Key, 0, hint)
	for {
		k, ok := d.key()
		if !ok {
			return nil, false
		}
		keys = append(keys, k)
		if next < 0 && d.lit(']') {
			return keys, true
		}
		if !d.lit(',') {
			return nil, false
		}
		d.ws()
		switch {
		case d.i == next:
			return keys, true
		case next >= 0 && d.i > next:
			return nil, false
		}
	}
}

// keyStartNear returns where the first "{" at or after i that follows
// "}" and "," (white space between) is, within 64 KiB; -1 if none.
func keyStartNear(b []byte, i int) int {
	limit := min(len(b), i+64<<10)
	for i < limit {
		j := bytes.IndexByte(b[i:limit], '{')
		if j < 0 {
			return -1
		}
		i += j
		p := i - 1
		for p >= 0 && isSpace(b[p]) {
			p--
		}
		if p >= 0 && b[p] == ',' {
			p--
			for p >= 0 && isSpace(b[p]) {
				p--
			}
			if p >= 0 && b[p] == '}' {
				return i
			}
		}
		i++
	}
	return -1
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (d *decoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// lit consumes c after white space.
func (d *decoder) lit(c byte) bool {
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// plain marks the bytes a string on the fast path holds as they are:
// printable ASCII but the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// rawStr returns a string's content, quotes excluded, if it has no
// escape, no control character and is valid UTF-8 (what json.Unmarshal
// would copy unchanged).
func (d *decoder) rawStr() (string, bool) {
	if !d.lit('"') {
		return "", false
	}
	b, start := d.b, d.i
	ascii := true
	for i := start; i < len(b); i++ {
		if plain[b[i]] {
			continue
		}
		switch c := b[i]; {
		case c == '"':
			d.i = i + 1
			s := d.s[start:i]
			return s, ascii || utf8.ValidString(s)
		case c >= utf8.RuneSelf:
			ascii = false
		default: // a backslash or a control character
			return "", false
		}
	}
	return "", false
}

func (d *decoder) str() (string, bool) { return d.rawStr() }

// object reads {"name": value, ...}, field calling value's reader.
func (d *decoder) object(field func(name string) bool) bool {
	if !d.lit('{') {
		return false
	}
	if d.lit('}') {
		return true
	}
	for {
		name, ok := d.rawStr()
		if !ok || !d.lit(':') || !field(name) {
			return false
		}
		if d.lit('}') {
			return true
		}
		if !d.lit(',') {
			return false
		}
	}
}

// array reads [value, ...], elem reading each value.
func (d *decoder) array(elem func() bool) bool {
	if !d.lit('[') {
		return false
	}
	if d.lit(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.lit(']') {
			return true
		}
		if !d.lit(',') {
			return false
		}
	}
}

// number returns a JSON number's text (the grammar json.Unmarshal takes).
func (d *decoder) number() ([]byte, bool) {
	d.ws()
	b, start := d.b, d.i
	i := start
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() bool {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > j
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return nil, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return nil, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return nil, false
		}
	}
	d.i = i
	return b[start:i], true
}

func (d *decoder) int64() (int64, bool) {
	s, ok := d.number()
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(s), 10, 64) // a fraction or exponent fails: json's error then
	return n, err == nil
}

func (d *decoder) float64() (float64, bool) {
	s, ok := d.number()
	if !ok {
		return 0, false
	}
	x, err := strconv.ParseFloat(string(s), 64)
	return x, err == nil
}

func (d *decoder) bool() (bool, bool) {
	d.ws()
	switch {
	case len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "true":
		d.i += 4
		return true, true
	case len(d.b)-d.i >= 5 && string(d.b[d.i:d.i+5]) == "false":
		d.i += 5
		return false, true
	}
	return false, false
}

// key reads one key object.
func (d *decoder) key() (*Key, bool) {
	if len(d.slab) == 0 {
		d.slab = make([]Key, cmp.Or(d.slabSize, 256)) // one allocation for many keys
	}
	k := &d.slab[0]
	d.slab = d.slab[1:]
	var seen uint16
	once := func(bit uint16) bool {
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	}
	ok := d.object(func(name string) bool {
		var ok bool
		switch name {
		case "id":
			if !once(1 << 0) {
				return false
			}
			k.ID, ok = d.str()
		case "hash":
			if !once(1 << 1) {
				return false
			}
			k.Hash, ok = d.str()
		case "routes":
			if !once(1 << 2) {
				return false
			}
			k.Routes = []string{}
			ok = d.array(func() bool {
				r, ok := d.str()
				k.Routes = append(k.Routes, r)
				return ok
			})
		case "rpm":
			if !once(1 << 3) {
				return false
			}
			k.RPM, ok = d.int64()
		case "tpm":
			if !once(1 << 4) {
				return false
			}
			k.TPM, ok = d.int64()
		case "max_concurrent":
			if !once(1 << 5) {
				return false
			}
			var n int64
			n, ok = d.int64()
			k.MaxConcurrent = int(n)
			ok = ok && int64(k.MaxConcurrent) == n
		case "budget":
			if !once(1 << 6) {
				return false
			}
			ok = d.budget(&k.Budget)
		case "expires":
			if !once(1 << 7) {
				return false
			}
			ok = d.time(&k.Expires)
		case "revoked":
			if !once(1 << 8) {
				return false
			}
			k.Revoked, ok = d.bool()
		case "created":
			if !once(1 << 9) {
				return false
			}
			ok = d.time(&k.Created)
		case "metadata":
			if !once(1 << 10) {
				return false
			}
			k.Metadata = map[string]string{}
			ok = d.object(func(name string) bool {
				if _, dup := k.Metadata[name]; dup {
					return false
				}
				v, ok := d.str()
				k.Metadata[name] = v
				return ok
			})
		}
		return ok
	})
	return k, ok
}

func (d *decoder) budget(b *Budget) bool {
	var seen uint8
	return d.object(func(name string) bool {
		var bit uint8
		var ok bool
		switch name {
		case "tokens_per_day":
			bit = 1
			b.TokensPerDay, ok = d.int64()
		case "tokens_per_month":
			bit = 2
			b.TokensPerMonth, ok = d.int64()
		case "cost_per_day":
			bit = 4
			b.CostPerDay, ok = d.float64()
		case "cost_per_month":
			bit = 8
			b.CostPerMonth, ok = d.float64()
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return ok
	})
}

// time reads a string as time.Time's UnmarshalJSON does.
func (d *decoder) time(t interface{ UnmarshalJSON([]byte) error }) bool {
	d.ws()
	start := d.i
	if _, ok := d.rawStr(); !ok {
		return false
	}
	return t.UnmarshalJSON(d.b[start:d.i]) == nil
}
