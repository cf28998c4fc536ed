// Package strict decodes JSON or YAML into Go structs the way a
// configuration file wants it: an unknown field, a duplicate key, a wrong
// type or trailing data is an error that names the field's path
// (rules[2].when.status) and its line and column, and every decoded value's
// position stays available so that later validation can point at the same
// place.
//
// Both formats are parsed into one tree (JSON by encoding/json's tokenizer,
// YAML by go.yaml.in/yaml/v3's node API), and one decoder maps the tree
// onto Go values, so the two formats accept the same documents with the
// same errors.
//
// It reads struct fields by their `json` tag (the name only; options such as
// omitempty are ignored). Supported types: string, bool, the integer and
// float kinds, slices, maps with string keys, pointers, structs,
// [Duration], json.RawMessage (the value as JSON text: a JSON document's
// exact text) and any (decoded by encoding/json from that text).
//
// In JSON, line comments ("// …" to the end of the line, outside strings)
// are allowed and ignored, so that a policy file can explain itself; YAML
// has its own (#).
package strict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Error is a decoding or validation error at a place in the document.
type Error struct {
	Path      string // rules[2].action; empty for the document itself
	Line, Col int    // 1-based; 0 when unknown
	Msg       string
}

func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.Line > 0 && e.Col > 0:
		fmt.Fprintf(&b, "line %d:%d: ", e.Line, e.Col)
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Duration is a time.Duration written as a Go duration string ("250ms",
// "1m30s") in JSON. A bare number is an error: its unit would be a guess.
type Duration time.Duration

// Doc is a decoded document: it remembers where each path's value starts.
type Doc struct {
	data []byte
	pos  map[string]where
}

// where is a position: a byte offset (JSON) or a line and column (YAML).
type where struct {
	off       int64
	line, col int
}

func (d *Doc) lineCol(w where) (int, int) {
	if w.line > 0 {
		return w.line, w.col
	}
	return lineCol(d.data, w.off)
}

// Errorf returns an *Error at path (its line and column if path was decoded,
// else those of the nearest decoded parent).
func (d *Doc) Errorf(path, format string, args ...any) *Error {
	e := &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
	for p := path; ; {
		if w, ok := d.pos[p]; ok {
			e.Line, e.Col = d.lineCol(w)
			break
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			if w, ok := d.pos[""]; ok && p != "" {
				e.Line, e.Col = d.lineCol(w)
			}
			break
		}
		p = p[:i]
	}
	return e
}

// Has reports whether path was present in the document.
func (d *Doc) Has(path string) bool { _, ok := d.pos[path]; return ok }

// Decode decodes the JSON document data into v (a non-nil pointer) strictly.
func Decode(data []byte, v any) (*Doc, error) {
	data = blankComments(data)
	doc := &Doc{data: data, pos: map[string]where{}}
	root, err := parse(data)
	if err != nil {
		return doc, err
	}
	return doc, doc.decodeRoot(root, v)
}

func (d *Doc) decodeRoot(root *node, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return errors.New("strict: Decode needs a non-nil pointer")
	}
	return d.decode(root, rv.Elem(), "")
}

type node struct {
	kind     byte  // '{', '[', 's', 'n', 'b', 'z'
	off, end int64 // JSON: the value's text is data[off:end]
	at       where
	raw      []byte // YAML: the value as JSON text
	keys     []string
	keyAt    []where
	vals     []*node
	str      string
	num      json.Number
	b        bool
}

func lineCol(data []byte, off int64) (int, int) {
	off = min(off, int64(len(data)))
	pre := data[:off]
	line := bytes.Count(pre, []byte{'\n'}) + 1
	col := int(off) - bytes.LastIndexByte(pre, '\n')
	return line, col
}

// blankComments returns data with every // comment outside a string
// replaced by spaces: offsets, lines and columns stay those of the file.
func blankComments(data []byte) []byte {
	if !bytes.Contains(data, []byte("//")) {
		return data
	}
	out := bytes.Clone(data)
	inString, escaped := false, false
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			for ; i < len(out) && out[i] != '\n'; i++ {
				out[i] = ' '
			}
		}
	}
	return out
}

func parse(data []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	p := &parser{data: data, dec: dec}
	n, err := p.value()
	if err != nil {
		return nil, err
	}
	off := p.start()
	if _, err := dec.Token(); err != io.EOF {
		l, c := lineCol(data, off)
		return nil, &Error{Line: l, Col: c, Msg: "unexpected data after the top-level value"}
	}
	return n, nil
}

type parser struct {
	data []byte
	dec  *json.Decoder
}

// start is the offset of the next value: past white space and separators.
func (p *parser) start() int64 {
	off := p.dec.InputOffset()
	for off < int64(len(p.data)) && strings.IndexByte(" \t\r\n,:", p.data[off]) >= 0 {
		off++
	}
	return off
}

func (p *parser) syntax(err error) error {
	var se *json.SyntaxError
	off := p.dec.InputOffset()
	msg := err.Error()
	if errors.As(err, &se) {
		off = se.Offset
	}
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		off, msg = int64(len(p.data)), "unexpected end of the document"
	}
	l, c := lineCol(p.data, off)
	return &Error{Line: l, Col: c, Msg: strings.TrimPrefix(msg, "json: ")}
}

func (p *parser) value() (*node, error) {
	off := p.start()
	tok, err := p.dec.Token()
	if err != nil {
		return nil, p.syntax(err)
	}
	n := &node{off: off, at: where{off: off}}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n.kind = '{'
			for p.dec.More() {
				koff := p.start()
				kt, err := p.dec.Token()
				if err != nil {
					return nil, p.syntax(err)
				}
				k := kt.(string)
				if slicesContains(n.keys, k) {
					l, c := lineCol(p.data, koff)
					return nil, &Error{Line: l, Col: c, Msg: fmt.Sprintf("duplicate key %q", k)}
				}
				v, err := p.value()
				if err != nil {
					return nil, err
				}
				n.keys, n.keyAt, n.vals = append(n.keys, k), append(n.keyAt, where{off: koff}), append(n.vals, v)
			}
		case '[':
			n.kind = '['
			for p.dec.More() {
				v, err := p.value()
				if err != nil {
					return nil, err
				}
				n.vals = append(n.vals, v)
			}
		}
		if _, err := p.dec.Token(); err != nil {
			return nil, p.syntax(err)
		}
	case string:
		n.kind, n.str = 's', t
	case json.Number:
		n.kind, n.num = 'n', t
	case bool:
		n.kind, n.b = 'b', t
	case nil:
		n.kind = 'z'
	}
	n.end = p.dec.InputOffset()
	return n, nil
}

func slicesContains(s []string, k string) bool {
	for _, x := range s {
		if x == k {
			return true
		}
	}
	return false
}

var (
	durationType = reflect.TypeFor[Duration]()
	rawType      = reflect.TypeFor[json.RawMessage]()
)

func kindName(k byte) string {
	switch k {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 's':
		return "a string"
	case 'n':
		return "a number"
	case 'b':
		return "a boolean"
	}
	return "null"
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// text is n as JSON text.
func (d *Doc) text(n *node) []byte {
	if n.raw != nil {
		return n.raw
	}
	return d.data[n.off:n.end]
}

// decode sets v from n, the value at path, recording n's position there.
func (d *Doc) decode(n *node, v reflect.Value, path string) error {
	d.pos[path] = n.at
	switch v.Type() {
	case durationType:
		return d.decodeDuration(n, v, path)
	case rawType:
		v.SetBytes(bytes.Clone(d.text(n)))
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if n.kind == 'z' {
			v.SetZero()
			return nil
		}
		nv := reflect.New(v.Type().Elem())
		if err := d.decode(n, nv.Elem(), path); err != nil {
			return err
		}
		v.Set(nv)
	case reflect.Interface:
		var x any
		if err := json.Unmarshal(d.text(n), &x); err != nil {
			return d.Errorf(path, "%v", err)
		}
		if x != nil {
			v.Set(reflect.ValueOf(x))
		}
	case reflect.String, reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return d.decodeScalar(n, v, path)
	case reflect.Slice:
		return d.decodeSlice(n, v, path)
	case reflect.Map:
		return d.decodeMap(n, v, path)
	case reflect.Struct:
		return d.decodeStruct(n, v, path)
	default:
		return fmt.Errorf("strict: type %v is not supported", v.Type())
	}
	return nil
}

// wrong is the error of n at path when v wants something else.
func (d *Doc) wrong(n *node, path, want string) error {
	return d.Errorf(path, "want %s, got %s", want, kindName(n.kind))
}

// decodeDuration sets a time.Duration from a Go duration string, never a
// negative one.
func (d *Doc) decodeDuration(n *node, v reflect.Value, path string) error {
	if n.kind != 's' {
		return d.Errorf(path, "want a duration string such as \"250ms\", got %s", kindName(n.kind))
	}
	t, err := time.ParseDuration(n.str)
	if err != nil {
		return d.Errorf(path, "invalid duration %q (want a Go duration such as \"250ms\" or \"1m30s\")", n.str)
	}
	if t < 0 {
		return d.Errorf(path, "negative duration %q", n.str)
	}
	v.SetInt(int64(t))
	return nil
}

// decodeScalar sets a string, a bool, an integer or a float of v's kind.
func (d *Doc) decodeScalar(n *node, v reflect.Value, path string) error {
	switch v.Kind() {
	case reflect.String:
		if n.kind != 's' {
			return d.wrong(n, path, "a string")
		}
		v.SetString(n.str)
	case reflect.Bool:
		if n.kind != 'b' {
			return d.wrong(n, path, "true or false")
		}
		v.SetBool(n.b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n.kind != 'n' {
			return d.wrong(n, path, "an integer")
		}
		i, err := strconv.ParseInt(string(n.num), 10, 64)
		if err != nil || v.OverflowInt(i) {
			return d.Errorf(path, "want an integer, got %s", n.num)
		}
		v.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.kind != 'n' {
			return d.wrong(n, path, "a non-negative integer")
		}
		i, err := strconv.ParseUint(string(n.num), 10, 64)
		if err != nil || v.OverflowUint(i) {
			return d.Errorf(path, "want a non-negative integer, got %s", n.num)
		}
		v.SetUint(i)
	case reflect.Float32, reflect.Float64:
		if n.kind != 'n' {
			return d.wrong(n, path, "a number")
		}
		f, err := n.num.Float64()
		if err != nil || math.IsInf(f, 0) {
			return d.Errorf(path, "want a number, got %s", n.num)
		}
		v.SetFloat(f)
	}
	return nil
}

// decodeSlice sets a slice from an array (null: nil).
func (d *Doc) decodeSlice(n *node, v reflect.Value, path string) error {
	if n.kind == 'z' {
		v.SetZero()
		return nil
	}
	if n.kind != '[' {
		return d.wrong(n, path, "an array")
	}
	s := reflect.MakeSlice(v.Type(), len(n.vals), len(n.vals))
	for i, e := range n.vals {
		if err := d.decode(e, s.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	v.Set(s)
	return nil
}

// decodeMap sets a map with string keys from an object.
func (d *Doc) decodeMap(n *node, v reflect.Value, path string) error {
	if n.kind != '{' {
		return d.wrong(n, path, "an object")
	}
	if v.Type().Key().Kind() != reflect.String {
		return fmt.Errorf("strict: map key type %v is not supported", v.Type().Key())
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.keys))
	for i, k := range n.keys {
		e := reflect.New(v.Type().Elem()).Elem()
		if err := d.decode(n.vals[i], e, join(path, k)); err != nil {
			return err
		}
		m.SetMapIndex(reflect.ValueOf(k).Convert(v.Type().Key()), e)
	}
	v.Set(m)
	return nil
}

// decodeStruct sets a struct's fields from an object, refusing a key that
// names no field.
func (d *Doc) decodeStruct(n *node, v reflect.Value, path string) error {
	if n.kind != '{' {
		return d.wrong(n, path, "an object")
	}
	fields := fieldsOf(v.Type())
	for i, k := range n.keys {
		idx, ok := fields.index[k]
		if !ok {
			kp := join(path, k)
			d.pos[kp] = n.keyAt[i]
			return d.Errorf(kp, "unknown field (want one of %s)", strings.Join(fields.names, ", "))
		}
		if err := d.decode(n.vals[i], v.Field(idx), join(path, k)); err != nil {
			return err
		}
	}
	return nil
}

type fieldSet struct {
	index map[string]int
	names []string
}

func fieldsOf(t reflect.Type) fieldSet {
	fs := fieldSet{index: map[string]int{}}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fs.index[name] = i
		fs.names = append(fs.names, name)
	}
	return fs
}
