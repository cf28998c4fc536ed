package vkey

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// decodeFile decodes a key file's JSON exactly as json.Unmarshal into a
// File does (same result, same error), faster: a file in the shape
// retryhost keys writes (lower-case field names, each once, strings
// without escapes, no nulls) is read by a decoder that knows the fields;
// anything else, and every mistake, goes to json.Unmarshal, whose answer
// is then the answer.
func decodeFile(data []byte) (*File, error) {
	if f, ok := fastFile(data); ok {
		return f, nil
	}
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// fastFile is the fast path: ok is false at the first byte it does not
// take, and the input is then json.Unmarshal's.
func fastFile(data []byte) (*File, bool) {
	d := decoder{b: data}
	f := &File{}
	var seenStore, seenKeys bool
	ok := d.object(func(name []byte) bool {
		switch string(name) {
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
			f.Keys = make([]*Key, 0, len(data)/256+1)
			return d.array(func() bool {
				k, ok := d.key()
				f.Keys = append(f.Keys, k)
				return ok
			})
		}
		return false
	})
	d.ws()
	return f, ok && d.i == len(d.b)
}

type decoder struct {
	b []byte
	i int
}

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

// rawStr returns a string's content, quotes excluded, if it has no
// escape, no control character and is valid UTF-8 (what json.Unmarshal
// would copy unchanged).
func (d *decoder) rawStr() ([]byte, bool) {
	if !d.lit('"') {
		return nil, false
	}
	start := d.i
	ascii := true
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			return s, ascii || utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		d.i++
	}
	return nil, false
}

func (d *decoder) str() (string, bool) {
	s, ok := d.rawStr()
	return string(s), ok
}

// object reads {"name": value, ...}, field calling value's reader.
func (d *decoder) object(field func(name []byte) bool) bool {
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
	k := &Key{}
	var seen uint16
	once := func(bit uint16) bool {
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	}
	ok := d.object(func(name []byte) bool {
		var ok bool
		switch string(name) {
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
			ok = d.object(func(name []byte) bool {
				if _, dup := k.Metadata[string(name)]; dup {
					return false
				}
				v, ok := d.str()
				k.Metadata[string(name)] = v
				return ok
			})
		}
		return ok
	})
	return k, ok
}

func (d *decoder) budget(b *Budget) bool {
	var seen uint8
	return d.object(func(name []byte) bool {
		var bit uint8
		var ok bool
		switch string(name) {
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
