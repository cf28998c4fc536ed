package strict_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/leaf/strict"
)

type inner struct {
	N int             `json:"n"`
	D strict.Duration `json:"d"`
}

type doc struct {
	S    string           `json:"s"`
	B    *bool            `json:"b"`
	F    float64          `json:"f"`
	U    uint64           `json:"u"`
	L    []inner          `json:"l"`
	M    map[string]inner `json:"m"`
	Raw  json.RawMessage  `json:"raw"`
	Any  any              `json:"any"`
	P    *inner           `json:"p"`
	skip int
}

func TestDecode(t *testing.T) {
	var d doc
	src := `{"s": "x", "b": false, "f": 1.5, "u": 7, "l": [{"n": 1, "d": "2s"}],
	 "m": {"k": {"n": 2}}, "raw": {"a": [1, 2]}, "any": [1, "two"], "p": null}`
	dd, err := strict.Decode([]byte(src), &d)
	require.NoError(t, err)
	require.Equal(t, "x", d.S)
	require.NotNil(t, d.B)
	require.False(t, *d.B)
	require.Equal(t, 1.5, d.F)
	require.Equal(t, uint64(7), d.U)
	require.Equal(t, []inner{{N: 1, D: strict.Duration(2 * time.Second)}}, d.L)
	require.Equal(t, 2, d.M["k"].N)
	require.JSONEq(t, `{"a": [1, 2]}`, string(d.Raw))
	require.Equal(t, []any{1.0, "two"}, d.Any)
	require.Nil(t, d.P)
	require.True(t, dd.Has("l[0].d"))
	require.False(t, dd.Has("l[0].n.x"))
	e := dd.Errorf("m.k.n", "bad")
	require.Equal(t, "line 2:20: m.k.n: bad", e.Error())
	e = dd.Errorf("m.k.missing", "absent")
	require.Equal(t, 2, e.Line, "an absent path points at its nearest parent")
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"unknown field", `{"s": "x",
  "t": 1}`, "line 2:3: t: unknown field (want one of s, b, f, u, l, m, raw, any, p)"},
		{"nested unknown", `{"l": [{"n": 1}, {"z": 1}]}`, "line 1:19: l[1].z: unknown field (want one of n, d)"},
		{"duplicate", `{"s": "x", "s": "y"}`, `line 1:12: duplicate key "s"`},
		{"wrong type", `{"l": {}}`, "line 1:7: l: want an array, got an object"},
		{"not an integer", `{"l": [{"n": 1.5}]}`, "line 1:14: l[0].n: want an integer, got 1.5"},
		{"negative unsigned", `{"u": -1}`, "u: want a non-negative integer, got -1"},
		{"bool", `{"b": "yes"}`, "b: want true or false, got a string"},
		{"duration number", `{"p": {"d": 30}}`, `p.d: want a duration string such as "250ms", got a number`},
		{"syntax", "{\n\n  \"s\": }", "line 3:8: invalid character '}' looking for beginning of value"},
		{"eof", `{"s": "x"`, "line 1:10: unexpected end of the document"},
		{"trailing", `{} []`, "line 1:4: unexpected data after the top-level value"},
		{"top level not object", `[]`, "line 1:1: want an object, got an array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d doc
			_, err := strict.Decode([]byte(tt.src), &d)
			require.ErrorContains(t, err, tt.want)
			var se *strict.Error
			require.ErrorAs(t, err, &se)
		})
	}
}

func TestLineComments(t *testing.T) {
	var d doc
	src := "{\n  // a comment with \"quotes\" and a } brace\n  \"s\": \"http://not-a-comment\", // trailing\n  \"raw\": {\"k\": 1 // inside raw\n  },\n  \"u\": \"x\"\n}"
	_, err := strict.Decode([]byte(src), &d)
	require.EqualError(t, err, "line 6:8: u: want a non-negative integer, got a string", "positions survive comments")
	require.Equal(t, "http://not-a-comment", d.S)
	require.JSONEq(t, `{"k": 1}`, string(d.Raw))
}
