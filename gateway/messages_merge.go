package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// member is one member of a JSON object: its key and its value's JSON.
type member struct{ key, value string }

// members returns the members of the JSON object obj in their order, each
// value byte for byte as obj has it; false when obj is not one valid JSON
// object.
func members(obj string) ([]member, bool) {
	dec := json.NewDecoder(strings.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var ms []member
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		ms = append(ms, member{key, string(v)})
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false // something after the object
	}
	return ms, true
}

// appendMerged appends the JSON object obj with the members of set: each
// replaces the value of every member of obj with its key, in place, and
// those obj lacks follow its own. The rest of obj goes out as it was: its
// members in their order, their values byte for byte (its keys
// re-escaped). It reports false, with b as it was, when obj is not one
// valid JSON object.
func appendMerged(b []byte, obj string, set []member) ([]byte, bool) {
	ms, ok := members(obj)
	if !ok {
		return b, false
	}
	b = append(b, '{')
	used := make([]bool, len(set))
	n := 0
	for _, m := range ms {
		for j := range set {
			if set[j].key == m.key {
				m.value, used[j] = set[j].value, true
			}
		}
		b = appendMember(b, n > 0, m)
		n++
	}
	for j, m := range set {
		if !used[j] {
			b = appendMember(b, n > 0, m)
			n++
		}
	}
	return append(b, '}'), true
}

// appendMember appends "key":value, after a comma if comma.
func appendMember(b []byte, comma bool, m member) []byte {
	if comma {
		b = append(b, ',')
	}
	b = appendJSONString(b, m.key)
	b = append(b, ':')
	return append(b, m.value...)
}
