package plugins

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// cLowerHeader renders c/lower.h: unicode.CaseRanges' lower-case deltas,
// so the C refusal guest folds case as refusalcore (unicode.ToLower) does,
// in every script.
func cLowerHeader() string {
	var b strings.Builder
	b.WriteString("/* Generated from Go's unicode.CaseRanges by the plugins package's tests\n" +
		" * (go test ./plugins -run TestCLower -update). DO NOT EDIT. */\n" +
		"#define LOWER_ALT 0x110000 /* an Upper-Lower alternating range */\n" +
		"static const struct { u32 lo, hi; i32 d; } lower_ranges[] = {\n")
	for _, cr := range unicode.CaseRanges {
		d := cr.Delta[unicode.LowerCase]
		if d == 0 {
			continue
		}
		if d == unicode.UpperLower {
			d = 0x110000
		}
		fmt.Fprintf(&b, "\t{0x%x, 0x%x, %d},\n", cr.Lo, cr.Hi, d)
	}
	b.WriteString("};\n")
	return b.String()
}

// TestCLower keeps c/lower.h equal to the Go toolchain's case table.
func TestCLower(t *testing.T) {
	want := cLowerHeader()
	if *update {
		require.NoError(t, os.WriteFile("c/lower.h", []byte(want), 0o644))
	}
	got, err := os.ReadFile("c/lower.h")
	require.NoError(t, err)
	require.Equal(t, want, string(got), "c/lower.h is stale: go test ./plugins -run TestCLower -update && make -C plugins")
}
