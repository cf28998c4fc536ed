package policy_test

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReferenceCoversTheSchema: docs/policy-reference.md has a section per
// object of policy/schema.json ("### `File`" for the top level, "###
// `ModelSpec`" … for its $defs), and each section's table has a row per
// property of that object and no other. A field added to the file's types
// (and so to the generated schema) without a row in the reference fails
// here, as does a row for a field that no longer exists.
func TestReferenceCoversTheSchema(t *testing.T) {
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Defs       map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"$defs"`
	}
	b, err := os.ReadFile("schema.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &schema))
	want := map[string][]string{"File": keys(schema.Properties)}
	for name, d := range schema.Defs {
		want[name] = keys(d.Properties)
	}

	page, err := os.ReadFile("../docs/policy-reference.md")
	require.NoError(t, err)
	got := map[string][]string{}
	section := ""
	sectionRE := regexp.MustCompile("^### `(\\w+)`")
	rowRE := regexp.MustCompile("^\\| `([a-z0-9_]+)` \\|")
	for _, l := range strings.Split(string(page), "\n") {
		if strings.HasPrefix(l, "## ") {
			section = ""
		}
		if m := sectionRE.FindStringSubmatch(l); m != nil {
			section = m[1]
			require.NotContains(t, got, section, "two sections for %s", section)
			got[section] = []string{}
			continue
		}
		if m := rowRE.FindStringSubmatch(l); m != nil && section != "" {
			require.NotContains(t, got[section], m[1], "%s.%s has two rows", section, m[1])
			got[section] = append(got[section], m[1])
		}
	}
	for name := range got {
		sort.Strings(got[name])
	}
	require.Equal(t, want, got, "docs/policy-reference.md's field tables against policy/schema.json")
}

func keys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
