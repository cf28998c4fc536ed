package strict_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/leaf/strict"
)

// TestDecodeYAML: YAML decodes into the same values as the JSON it
// mirrors, with positions for later errors.
func TestDecodeYAML(t *testing.T) {
	var d doc
	src := `# a comment
s: x
b: false
f: 1.5
u: 0x07
l:
  - {n: 1, d: 2s}
m:
  k: {n: 2}
raw: {a: [1, 2], s: "t"}
any: [1, two]
p: null
`
	dd, err := strict.DecodeYAML([]byte(src), &d)
	require.NoError(t, err)
	require.Equal(t, "x", d.S)
	require.NotNil(t, d.B)
	require.False(t, *d.B)
	require.Equal(t, 1.5, d.F)
	require.Equal(t, uint64(7), d.U)
	require.Equal(t, []inner{{N: 1, D: strict.Duration(2 * time.Second)}}, d.L)
	require.Equal(t, 2, d.M["k"].N)
	require.JSONEq(t, `{"a": [1, 2], "s": "t"}`, string(d.Raw))
	require.Equal(t, []any{1.0, "two"}, d.Any)
	require.Nil(t, d.P)
	require.True(t, dd.Has("l[0].d"))
	require.Equal(t, "line 9:10: m.k.n: bad", dd.Errorf("m.k.n", "bad").Error())
}

// TestDecodeYAMLErrors: the strictness of JSON, with YAML's positions.
func TestDecodeYAMLErrors(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"unknown field", "s: x\nt: 1\n", "line 2:1: t: unknown field (want one of s, b, f, u, l, m, raw, any, p)"},
		{"nested unknown", "l:\n  - n: 1\n  - z: 1\n", "line 3:5: l[1].z: unknown field (want one of n, d)"},
		{"duplicate", "s: x\ns: y\n", `line 2:1: duplicate key "s"`},
		{"wrong type", "l: {}\n", "line 1:4: l: want an array, got an object"},
		{"not an integer", "l: [{n: 1.5}]\n", "line 1:9: l[0].n: want an integer, got 1.5"},
		{"quoted number is a string", "u: \"7\"\n", "line 1:4: u: want a non-negative integer, got a string"},
		{"yes is not a boolean", "b: yes\n", "line 1:4: b: want true or false, got a string"},
		{"duration number", "p: {d: 30}\n", `line 1:8: p.d: want a duration string such as "250ms", got a number`},
		{"syntax", "s: x\n  t: [\n", "line 2: "},
		{"tab indentation", "s: x\nl:\n\t- n: 1\n", "line 3: found character that cannot start any token"},
		{"two documents", "s: x\n---\ns: y\n", "line 2:1: unexpected data after the top-level value"},
		{"empty", "# nothing\n", "line 1:1: empty document"},
		{"top level not a mapping", "- 1\n", "line 1:1: want an object, got an array"},
		{"merge key", "base: &b {n: 1}\nl:\n  - <<: *b\n", "line 3:5: merge keys (<<) are not supported"},
		{"infinite float", "f: .inf\n", "line 1:4: want a finite number, got .inf"},
		{"binary tag", "s: !!binary aGk=\n", "line 1:4: unsupported tag !!binary"},
		{"complex key", "? [a]\n: 1\n", "line 1:3: a mapping key must be a plain scalar"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d doc
			_, err := strict.DecodeYAML([]byte(tt.src), &d)
			require.ErrorContains(t, err, tt.want)
			var se *strict.Error
			require.ErrorAs(t, err, &se)
			require.Positive(t, se.Line)
		})
	}
}

// TestYAMLAliases: an alias repeats a value (errors point at the alias),
// and nested aliases that would expand past MaxYAMLNodes are refused
// instead of building an exponential tree.
func TestYAMLAliases(t *testing.T) {
	var d doc
	_, err := strict.DecodeYAML([]byte("m:\n  a: &x {n: 1}\n  b: *x\n"), &d)
	require.NoError(t, err)
	require.Equal(t, 1, d.M["b"].N)
	_, err = strict.DecodeYAML([]byte("m:\n  a: &x {n: 1}\n  b: *x\nl: [*x, {n: x}]\n"), &d)
	require.ErrorContains(t, err, "line 4:13: l[1].n: want an integer")

	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [*a%[3]d, *a%[3]d, *a%[3]d, *a%[3]d, *a%[3]d, *a%[3]d, *a%[3]d, *a%[3]d, *a%[3]d, *a%[3]d]\n", i, i, i-1)
	}
	var anyDoc map[string]any
	_, err = strict.DecodeYAML([]byte(b.String()), &anyDoc)
	require.ErrorContains(t, err, "more than 100000 values once its aliases are expanded")
}
