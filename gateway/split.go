package gateway

import (
	"bytes"
	"encoding/json"
)

// splitObject returns the members of body, a JSON object, as
// json.Unmarshal into a map[string]json.RawMessage would (the last of a
// duplicated key wins, each value exactly its bytes), without its
// reflective decoding: every request's body goes through here. The values
// share body's array, which lives as long as the request. ok is false,
// and nothing is returned, for what it leaves to json.Unmarshal: a body
// that is not valid JSON or not an object (for the error), and a key with
// an escape or a byte outside ASCII (which the decoder unescapes and
// repairs).
func splitObject(body []byte) (fields map[string]json.RawMessage, ok bool) {
	if !json.Valid(body) {
		return nil, false
	}
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return nil, false
	}
	fields = make(map[string]json.RawMessage, 8)
	if _, ok = eachMember(body, i, func(key, val []byte) bool {
		fields[string(key)] = json.RawMessage(val)
		return true
	}); !ok {
		return nil, false
	}
	return fields, true
}

// eachMember walks the members of the valid JSON object at b[i] (a '{'): fn
// gets each key (the bytes between its quotes) and value (exactly its
// bytes, capped). It returns the index just past the object, or false as
// soon as fn does or a key has an escape or a byte outside ASCII (which
// json.Unmarshal would unescape and repair).
func eachMember(b []byte, i int, fn func(key, val []byte) bool) (end int, ok bool) {
	i = skipSpace(b, i+1)
	if b[i] == '}' {
		return i + 1, true
	}
	for {
		// b is valid: here is a key, a colon, a value, then ',' or '}'.
		start := i + 1
		i = start
		for b[i] != '"' {
			if c := b[i]; c == '\\' || c >= 0x80 {
				return 0, false
			}
			i++
		}
		key := b[start:i]
		i = skipSpace(b, i+1) + 1 // past the colon
		i = skipSpace(b, i)
		vend := skipValue(b, i)
		if !fn(key, b[i:vend:vend]) {
			return 0, false
		}
		i = skipSpace(b, vend)
		if b[i] == '}' {
			return i + 1, true
		}
		i = skipSpace(b, i+1) // past the comma
	}
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the valid JSON value starting at
// i.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	default: // a number, true, false or null: up to a delimiter
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// skipString returns the index just past the JSON string starting at i.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// decodeMessages decodes raw, a request's "messages" (valid JSON: the
// body was validated whole), into msgs as json.Unmarshal would, without
// its reflective decoding and second validation, for the shape nearly
// every request has: an array of objects whose role and tool_call_id are
// plain strings (no escape, valid UTF-8), whose content is kept raw, and
// whose tool_calls go to json.Unmarshal. Members the type has no field for
// are skipped, as json.Unmarshal skips them. ok is false, with nothing
// decoded, for anything else (a key that matches a field only as
// json.Unmarshal matches, regardless of case; a key with an escape or a
// byte outside ASCII; a value of another type; an element that is not an
// object), which json.Unmarshal then decodes or reports.
func decodeMessages(raw []byte) (msgs []wireMessage, ok bool) {
	i := skipSpace(raw, 0)
	if i == len(raw) || raw[i] != '[' {
		return nil, false
	}
	i = skipSpace(raw, i+1)
	msgs = make([]wireMessage, 0, messagesCap(raw, i))
	if raw[i] == ']' {
		return msgs, true
	}
	for {
		if raw[i] != '{' {
			return nil, false
		}
		msgs = append(msgs, wireMessage{})
		if i, ok = decodeMessage(raw, i, &msgs[len(msgs)-1]); !ok {
			return nil, false
		}
		i = skipSpace(raw, i)
		if raw[i] == ']' {
			return msgs, true
		}
		i = skipSpace(raw, i+1) // past the comma
	}
}

// messagesCap is the room to make for the messages of the array whose
// first element starts at raw[i]: 4 for a short array (most requests),
// else its element count, so that a long history (a body of 250,000
// messages) is decoded into one slice instead of a dozen that each
// doubling leaves behind.
func messagesCap(raw []byte, i int) int {
	if len(raw)-i < 4<<10 {
		return 4
	}
	return countElements(raw, i)
}

// countElements counts the elements of a valid JSON array from raw[i], the
// first element's start (or the closing bracket).
func countElements(raw []byte, i int) int {
	n := 0
	for i < len(raw) && raw[i] != ']' {
		i = skipValue(raw, i)
		n++
		if i = skipSpace(raw, i); i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return n
}

// decodeMessage decodes the object at raw[i] into m (see decodeMessages)
// and returns the index just past it.
func decodeMessage(raw []byte, i int, m *wireMessage) (end int, ok bool) {
	return eachMember(raw, i, func(key, val []byte) (ok bool) {
		switch string(key) {
		case "role":
			m.Role, ok = plainString(val)
			return ok
		case "content":
			m.Content = json.RawMessage(val)
		case "tool_call_id":
			m.ToolCallID, ok = plainString(val)
			return ok
		case "tool_calls":
			return json.Unmarshal(val, &m.ToolCalls) == nil
		default:
			for _, f := range [...]string{"role", "content", "tool_call_id", "tool_calls"} {
				if bytes.EqualFold(key, []byte(f)) {
					return false // json.Unmarshal's case-insensitive match
				}
			}
		}
		return true
	})
}
