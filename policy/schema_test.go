package policy_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/policy/internal/jsonschema"
)

// TestSchemaJSONIsCurrent: the committed schema.json is what go generate
// writes from schema.go, so editors never validate against a stale schema
// (run `go generate ./policy` after changing the schema).
func TestSchemaJSONIsCurrent(t *testing.T) {
	src, err := os.ReadFile("schema.go")
	require.NoError(t, err)
	want, err := jsonschema.Generate(src)
	require.NoError(t, err)
	got, err := os.ReadFile("schema.json")
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "schema.json is stale: run go generate ./policy")

	var s struct {
		Defs map[string]struct {
			Properties map[string]struct {
				Items struct{ Enum []string }
			}
		} `json:"$defs"`
	}
	require.NoError(t, json.Unmarshal(got, &s))
	var classes []string
	for c := driver.ClassUnknown; c <= driver.ClassPlugin; c++ {
		classes = append(classes, c.String())
	}
	require.Equal(t, classes, s.Defs["MatchSpec"].Properties["class"].Items.Enum, "the schema's classes are the driver's")
}
