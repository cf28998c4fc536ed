package sdk

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeJSON(t *testing.T) {
	type inner struct {
		Delay string `json:"delay"`
	}
	type cfg struct {
		Name  string            `json:"name"`
		Rules []inner           `json:"rules"`
		Retry *inner            `json:"retry"`
		Map   map[string]inner  `json:"map"`
		Plain map[string]string `json:"plain"`
		Other int
		Skip  int `json:"-"`
	}
	for _, tc := range []struct{ name, in, err string }{
		{"empty keeps defaults", "  \n", ""},
		{"all known", `{"name":"x","rules":[{"delay":"1s"}],"retry":{"delay":"2s"},"map":{"a":{"delay":"3s"}},"plain":{"k":"v"},"Other":3}`, ""},
		{"a key spells its field exactly", `{"NAME":"x"}`, `unknown field "NAME"`},
		{"a Go field name as is", `{"Other":1}`, ""},
		{"duplicate key", `{"name":"x","Other":1,"name":"y"}`, `duplicate field "name"`},
		{"duplicate key once decoded", `{"name":"x","\u006eame":"y"}`, `duplicate field "name"`},
		{"duplicate key in a map", `{"plain":{"k":"a","k":"b"}}`, `duplicate field "plain.k"`},
		{"same key in two objects", `{"rules":[{"delay":"1s"},{"delay":"2s"}],"retry":{"delay":"1s"}}`, ""},
		{"null at the top", `null`, "null is not a value"},
		{"null in a field", `{"retry":null}`, `"retry": null is not a value`},
		{"null in an array", `{"rules":[{"delay":"1s"},null]}`, `"rules[1]": null`},
		{"invalid UTF-8", "{\"name\":\"\xff\"}", "not valid UTF-8"},
		{"blank is JSON white space only", " \t\r\n", ""},
		{"other white space is not blank", "\v", "invalid character"},
		{"strings with escapes and brackets", `{"name":"a\"]}{,","plain":{"[":"\\"}}`, ""},
		{"unknown top-level", `{"nam":"x"}`, `unknown field "nam"`},
		{"unknown in a slice element", `{"rules":[{"delay":"1s"},{"dealy":"1s"}]}`, `unknown field "rules[1].dealy"`},
		{"unknown behind a pointer", `{"retry":{"wait":"1s"}}`, `unknown field "retry.wait"`},
		{"unknown in a map value", `{"map":{"a":{"x":1}}}`, `unknown field "map.a.x"`},
		{"json:\"-\" is not a key", `{"Skip":1}`, `unknown field "Skip"`},
		{"wrong type", `{"name":3}`, "cannot unmarshal"},
		{"trailing data", `{"name":"x"} {}`, "invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := cfg{Name: "default"}
			err := DecodeJSON([]byte(tc.in), &v)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
			require.ErrorContains(t, err, "config: ")
		})
	}
}

// FuzzDecodeJSON: DecodeJSON never panics (its key check scans the
// document by hand), and what it accepts is valid JSON with no key twice
// in an object (go test ./plugins/sdk -fuzz FuzzDecodeJSON).
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"name":"x","rules":[{"delay":"1s"}],"map":{"a":{"delay":"2s"}}}`,
		`{"name":"a\"]}{,\\","plain":{"[":"\\"}}`, `{"name":"x","name":"y"}`, `{"retry":null}`, `[1,2]`, `{"plain":{"k":"v" , "l" : "w"}}`} {
		f.Add(s)
	}
	type inner struct {
		Delay string `json:"delay"`
	}
	type cfg struct {
		Name  string            `json:"name"`
		Rules []inner           `json:"rules"`
		Retry *inner            `json:"retry"`
		Map   map[string]inner  `json:"map"`
		Plain map[string]string `json:"plain"`
		Any   any               `json:"any"`
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v cfg
		if DecodeJSON([]byte(s), &v) != nil || len(bytes.Trim([]byte(s), " \t\r\n")) == 0 {
			return
		}
		require.True(t, json.Valid([]byte(s)))
		require.NoError(t, checkKeys([]byte(s)))
	})
}
