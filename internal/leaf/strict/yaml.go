package strict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// MaxYAMLNodes bounds the nodes of a YAML document after its aliases are
// expanded, so that a few lines of nested aliases (the "billion laughs")
// cannot make the decoder build an exponentially large tree.
const MaxYAMLNodes = 100_000

// DecodeYAML decodes the YAML document data into v (a non-nil pointer)
// strictly, with the same rules and errors as [Decode]: YAML adds comments
// (#), block style, unquoted strings and anchors with aliases; merge keys
// (<<) are rejected, as are tags other than YAML's core schema and a
// mapping key that is not a plain scalar.
func DecodeYAML(data []byte, v any) (*Doc, error) {
	doc := &Doc{data: data, pos: map[string]where{}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if err == io.EOF {
			return doc, &Error{Line: 1, Col: 1, Msg: "empty document"}
		}
		return doc, yamlSyntax(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		if err != nil {
			return doc, yamlSyntax(err)
		}
		return doc, &Error{Line: extra.Line, Col: extra.Column, Msg: "unexpected data after the top-level value (a second YAML document)"}
	}
	c := &yamlConv{budget: MaxYAMLNodes}
	n, err := c.node(&root)
	if err != nil {
		return doc, err
	}
	return doc, doc.decodeRoot(n, v)
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func yamlSyntax(err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{Line: line, Msg: m[2]}
	}
	return &Error{Line: 1, Msg: strings.TrimPrefix(msg, "yaml: ")}
}

type yamlConv struct{ budget int }

// node converts y, its aliases expanded within the budget, into a node
// with its JSON text.
func (c *yamlConv) node(y *yaml.Node) (*node, error) {
	if c.budget--; c.budget < 0 {
		return nil, &Error{Line: y.Line, Col: y.Column, Msg: fmt.Sprintf("the document has more than %d values once its aliases are expanded", MaxYAMLNodes)}
	}
	at := where{line: y.Line, col: y.Column}
	n := &node{at: at}
	var err error
	switch y.Kind {
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return nil, yamlFail(y, "empty document")
		}
		return c.node(y.Content[0])
	case yaml.AliasNode:
		if y.Alias == nil {
			return nil, yamlFail(y, "unknown alias %q", y.Value)
		}
		a, err := c.node(y.Alias)
		if err != nil {
			return nil, err
		}
		cp := *a
		cp.at = at // errors point at the alias, where the value is used
		return &cp, nil
	case yaml.MappingNode:
		err = c.mapping(n, y)
	case yaml.SequenceNode:
		n.kind = '['
		for _, e := range y.Content {
			vn, err := c.node(e)
			if err != nil {
				return nil, err
			}
			n.vals = append(n.vals, vn)
		}
	case yaml.ScalarNode:
		err = scalar(n, y)
	default:
		return nil, yamlFail(y, "unsupported YAML node")
	}
	if err != nil {
		return nil, err
	}
	if n.raw, err = n.json(nil); err != nil {
		return nil, err
	}
	return n, nil
}

// yamlFail is an error at y.
func yamlFail(y *yaml.Node, format string, args ...any) error {
	return &Error{Line: y.Line, Col: y.Column, Msg: fmt.Sprintf(format, args...)}
}

// mapping converts a mapping's pairs into n: keys plain scalars, each
// once, no merge keys.
func (c *yamlConv) mapping(n *node, y *yaml.Node) error {
	n.kind = '{'
	for i := 0; i+1 < len(y.Content); i += 2 {
		k, v := y.Content[i], y.Content[i+1]
		if k.Kind != yaml.ScalarNode || (k.Tag != "!!str" && k.Tag != "!!int" && k.Tag != "!!bool" && k.Tag != "!!float") {
			if k.Tag == "!!merge" {
				return &Error{Line: k.Line, Col: k.Column, Msg: "merge keys (<<) are not supported: repeat the fields, or use an alias for a whole value"}
			}
			return &Error{Line: k.Line, Col: k.Column, Msg: "a mapping key must be a plain scalar"}
		}
		if slicesContains(n.keys, k.Value) {
			return &Error{Line: k.Line, Col: k.Column, Msg: fmt.Sprintf("duplicate key %q", k.Value)}
		}
		vn, err := c.node(v)
		if err != nil {
			return err
		}
		n.keys = append(n.keys, k.Value)
		n.keyAt = append(n.keyAt, where{line: k.Line, col: k.Column})
		n.vals = append(n.vals, vn)
	}
	return nil
}

// scalar converts a scalar by its tag: a string, a boolean, null, or a
// finite number.
func scalar(n *node, y *yaml.Node) error {
	switch y.Tag {
	case "!!str", "!!timestamp":
		n.kind, n.str = 's', y.Value
	case "!!bool":
		b, err := strconv.ParseBool(y.Value)
		if err != nil {
			return yamlFail(y, "invalid boolean %q", y.Value)
		}
		n.kind, n.b = 'b', b
	case "!!null":
		n.kind = 'z'
	case "!!int":
		v := strings.ReplaceAll(y.Value, "_", "")
		if i, err := strconv.ParseInt(v, 0, 64); err == nil {
			n.kind, n.num = 'n', json.Number(strconv.FormatInt(i, 10))
		} else if u, err := strconv.ParseUint(v, 0, 64); err == nil {
			n.kind, n.num = 'n', json.Number(strconv.FormatUint(u, 10))
		} else {
			return yamlFail(y, "invalid integer %q", y.Value)
		}
	case "!!float":
		f, err := strconv.ParseFloat(strings.ReplaceAll(y.Value, "_", ""), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return yamlFail(y, "want a finite number, got %s", y.Value)
		}
		n.kind, n.num = 'n', json.Number(strconv.FormatFloat(f, 'g', -1, 64))
	default:
		return yamlFail(y, "unsupported tag %s", y.Tag)
	}
	return nil
}

// json appends n as JSON text (what a RawMessage or an any field gets).
func (n *node) json(b []byte) ([]byte, error) {
	switch n.kind {
	case '{':
		b = append(b, '{')
		for i, k := range n.keys {
			if i > 0 {
				b = append(b, ',')
			}
			kb, _ := json.Marshal(k)
			b = append(append(b, kb...), ':')
			b = append(b, n.vals[i].raw...)
		}
		return append(b, '}'), nil
	case '[':
		b = append(b, '[')
		for i, v := range n.vals {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, v.raw...)
		}
		return append(b, ']'), nil
	case 's':
		sb, err := json.Marshal(n.str)
		return append(b, sb...), err
	case 'n':
		return append(b, n.num...), nil
	case 'b':
		return strconv.AppendBool(b, n.b), nil
	case 'z':
		return append(b, "null"...), nil
	}
	return nil, errors.New("strict: unknown node kind")
}
