// Package jsonschema generates policy/schema.json, the JSON Schema of a
// policy file, from the schema's Go types (package policy's File) and
// their doc comments, so that editors complete and check policy files
// (JSON, or YAML through a schema-aware YAML plugin) by the same schema the
// loader enforces. A test keeps the committed file current.
package jsonschema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strings"

	"github.com/retryhost/retryhost/policy"
)

// enums are the closed sets of string values, by "Type.field" (the file's
// names); the loader rejects anything else.
var enums = map[string][]string{
	"ModelSpec.provider":           {"openai", "azure", "openrouter", "vllm", "ollama", "anthropic", "gemini", "vertex", "bedrock", "scripted"},
	"RuleSpec.action":              {"switch", "retry", "give-up"},
	"PluginSpec.fail":              {"open", "closed"},
	"BackoffSpec.jitter":           {"none", "full", "equal"},
	"File.commit":                  {"output", "legacy"},
	"File.after_commit":            {"error", "continue"},
	"File.empty_answer":            {"accept", "fail"},
	"ModelSpec.after_commit":       {"error", "continue"},
	"GroupSpec.after_commit":       {"error", "continue"},
	"ModelSpec.unsupported_params": {"drop", "skip"},
	"RefusalSpec.reasoning":        {"detach", "hold"},
	"MatchSpec.class":              {"unknown", "timeout", "canceled", "rate-limit", "overloaded", "server", "client", "auth", "context-length", "content-filter", "refusal", "network", "transform", "plugin"},
	"MatchSpec.finish":             {"unknown", "stop", "length", "content-filter", "tool-calls", "error", "other", "refusal"},
	"MatchSpec.status":             nil, // integers: see minimum/maximum below
	"MatchSpec.status_range":       nil,
}

// Generate returns the schema, with descriptions read from schemaGo (the
// source of policy/schema.go).
func Generate(schemaGo []byte) ([]byte, error) {
	docs, err := fieldDocs(schemaGo)
	if err != nil {
		return nil, err
	}
	g := &gen{docs: docs, defs: map[string]any{}}
	root := g.object(reflect.TypeFor[policy.File]())
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	root["$id"] = "https://github.com/retryhost/retryhost/policy/schema.json"
	root["title"] = "retryhost policy"
	root["required"] = []string{"models"}
	root["$defs"] = g.defs
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// fieldDocs reads each struct field's comment, by "Type.GoField".
func fieldDocs(src []byte) (map[string]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "schema.go", src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	docs := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return false
		}
		for _, fl := range st.Fields.List {
			text := strings.TrimSpace(fl.Doc.Text())
			if text == "" {
				text = strings.TrimSpace(fl.Comment.Text())
			}
			for _, name := range fl.Names {
				docs[ts.Name.Name+"."+name.Name] = strings.Join(strings.Fields(text), " ")
			}
		}
		return false
	})
	return docs, nil
}

type gen struct {
	docs map[string]string
	defs map[string]any
}

var durationPattern = `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`

func (g *gen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		s := g.schema(f.Type)
		if vals, ok := enums[t.Name()+"."+name]; ok && vals != nil {
			if s["type"] == "array" {
				s["items"] = map[string]any{"enum": vals}
			} else {
				s = map[string]any{"enum": vals}
			}
		}
		switch t.Name() + "." + name {
		case "MatchSpec.status", "MatchSpec.status_range":
			s["items"] = map[string]any{"type": "integer", "minimum": 100, "maximum": 599}
			if name == "status_range" {
				s["minItems"], s["maxItems"] = 2, 2
			}
		case "SandboxSpec.memory":
			s = map[string]any{"type": []string{"integer", "string"}, "pattern": `^[0-9]+ ?(B|KiB|MiB|GiB)?$`}
		case "PluginSpec.config":
			s = map[string]any{}
		case "ModelSpec.api_key_env":
			s["pattern"] = `^[A-Za-z_][A-Za-z0-9_]*$`
		case "ModelSpec.name":
			s["pattern"] = `^[A-Za-z0-9][A-Za-z0-9._-]*$`
		}
		if d := g.docs[t.Name()+"."+f.Name]; d != "" {
			s["description"] = d
		}
		props[name] = s
	}
	return map[string]any{"type": "object", "additionalProperties": false, "properties": props}
}

func (g *gen) schema(t reflect.Type) map[string]any {
	switch {
	case t.Name() == "Duration":
		return map[string]any{"type": "string", "pattern": durationPattern}
	case t == reflect.TypeFor[json.RawMessage]():
		return map[string]any{} // any JSON value; narrowed by the field below
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.schema(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64, reflect.Int32:
		return map[string]any{"type": "integer"}
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		return map[string]any{"type": "integer", "minimum": 0}
	case reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		if t.Elem().Kind() == reflect.Interface {
			return map[string]any{"type": "object"}
		}
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Interface:
		return map[string]any{}
	case reflect.Struct:
		if _, ok := g.defs[t.Name()]; !ok {
			g.defs[t.Name()] = nil // recursion guard
			g.defs[t.Name()] = g.object(t)
		}
		return map[string]any{"$ref": "#/$defs/" + t.Name()}
	}
	panic(fmt.Sprintf("jsonschema: unsupported type %v", t))
}
