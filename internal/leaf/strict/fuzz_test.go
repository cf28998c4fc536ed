package strict_test

import (
	"errors"
	"testing"

	"github.com/retryhost/retryhost/internal/leaf/strict"
)

// FuzzDecode: neither decoder panics on any input, and every error either
// is an *Error with a line or names a Go type the decoder cannot fill.
// Seeds: testdata/fuzz/FuzzDecode plus the policy examples below.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"s": "x", "l": [{"n": 1, "d": "2s"}], "raw": {"a": [1]}, "any": null}`,
		"s: x\nl:\n  - {n: 1, d: 2s}\nraw: {a: [1]}\nm:\n  k: &k {n: 2}\n  j: *k\n",
		"{\n// c\n\"u\": 18446744073709551615}", "u: 0x1_0\nf: 1e3\n", "[", "a: [\n", "? [a]\n: 1\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, yaml bool) {
		var d doc
		var err error
		if yaml {
			_, err = strict.DecodeYAML(data, &d)
		} else {
			_, err = strict.Decode(data, &d)
		}
		var se *strict.Error
		if err != nil && errors.As(err, &se) && se.Line < 1 {
			t.Fatalf("an error without a line: %v", err)
		}
	})
}
