package plugins

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/plugins/refusalcore"
)

// The refusal detectors of the AssemblyScript and Rust SDKs start from
// refusalcore's default phrases and fold case with Go's unicode.ToLower
// table, as the C build does (c/phrases.h, c/lower.h); these render their
// generated sources, and the tests below keep the committed files equal.

// lowerRanges are unicode.CaseRanges' lower-case deltas as (lo, hi, delta)
// triples, delta 0x110000 for an Upper-Lower alternating range.
func lowerRanges() [][3]int {
	var out [][3]int
	for _, cr := range unicode.CaseRanges {
		d := int(cr.Delta[unicode.LowerCase])
		if d == 0 {
			continue
		}
		if d == unicode.UpperLower {
			d = 0x110000
		}
		out = append(out, [3]int{int(cr.Lo), int(cr.Hi), d})
	}
	return out
}

const asRefusalTables = "sdk/assemblyscript/examples/refusal/tables.ts"

func asTablesSource() string {
	var b strings.Builder
	b.WriteString("// Generated from refusalcore.DefaultPhrases and Go's unicode.CaseRanges by the\n" +
		"// plugins package's tests (go test ./plugins -run TestSDKTables -update). DO NOT EDIT.\n\n" +
		"export const DEFAULT_PHRASES: string[] = [\n")
	for _, p := range refusalcore.DefaultPhrases() {
		b.WriteString("  " + strconv.Quote(p) + ",\n")
	}
	b.WriteString("];\n\n// lo, hi, delta triples; delta 0x110000 marks an Upper-Lower alternating range.\n" +
		"export const LOWER_ALT: i32 = 0x110000;\n" +
		"export const LOWER_RANGES: StaticArray<i32> = [\n")
	for _, r := range lowerRanges() {
		fmt.Fprintf(&b, "  0x%x, 0x%x, %d,\n", r[0], r[1], r[2])
	}
	b.WriteString("];\n")
	return b.String()
}

const rustRefusalTables = "sdk/rust/examples/refusal/tables.rs"

func rustTablesSource() string {
	var b strings.Builder
	b.WriteString("// Generated from refusalcore.DefaultPhrases and Go's unicode.CaseRanges by the\n" +
		"// plugins package's tests (go test ./plugins -run TestSDKTables -update). DO NOT EDIT.\n\n" +
		"pub const DEFAULT_PHRASES: &[&str] = &[\n")
	for _, p := range refusalcore.DefaultPhrases() {
		b.WriteString("    " + strconv.Quote(p) + ",\n")
	}
	b.WriteString("];\n\n/// An Upper-Lower alternating range's delta.\npub const LOWER_ALT: i32 = 0x110000;\n" +
		"/// (lo, hi, delta) of Go's unicode.ToLower.\n" +
		"pub const LOWER_RANGES: &[(u32, u32, i32)] = &[\n")
	for _, r := range lowerRanges() {
		fmt.Fprintf(&b, "    (0x%x, 0x%x, %d),\n", r[0], r[1], r[2])
	}
	b.WriteString("];\n")
	return b.String()
}

// TestSDKTables keeps the SDK refusal detectors' generated tables equal to
// refusalcore's phrases and the Go toolchain's case table.
func TestSDKTables(t *testing.T) {
	for path, want := range map[string]string{asRefusalTables: asTablesSource(), rustRefusalTables: rustTablesSource()} {
		if *update {
			require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, want, string(got), "%s is stale: go test ./plugins -run TestSDKTables -update && make -C plugins", path)
	}
}
