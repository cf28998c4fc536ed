package scenario_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/cmd/internal/scenario"
)

func TestParseErrors(t *testing.T) {
	const pol = `"policy": {"models": [{"name": "a", "provider": "scripted"}]}`
	tests := []struct{ name, doc, want string }{
		{"no requests", `{` + pol + `, "scripts": {"a": {"attempts": [{}]}}}`, "requests: at least one request is required"},
		{"unknown field", `{` + pol + `, "expect": {}}`, "line 1:65: expect: unknown field"},
		{"missing script", `{` + pol + `, "requests": [{}]}`, `scripts: no script for scripted model "a"`},
		{"attempts and chaos", `{` + pol + `, "scripts": {"a": {}}, "requests": [{}]}`, "scripts.a: give exactly one of attempts or chaos"},
		{"bad chaos", `{` + pol + `, "scripts": {"a": {"chaos": {"text": "x", "chunks": 0}}}, "requests": [{}]}`, "scripts.a.chaos: needs text, chunks >= 1"},
		{"two actions in a step", `{` + pol + `, "scripts": {"a": {"attempts": [{"steps": [{"text": "x", "cut": true}]}]}}, "requests": [{}]}`, "scripts.a.attempts[0].steps[0]: give exactly one of text, part"},
		{"no action in a step", `{` + pol + `, "scripts": {"a": {"attempts": [{"steps": [{}]}]}}, "requests": [{}]}`, "scripts.a.attempts[0].steps[0]: give exactly one of"},
		{"unknown part kind", `{` + pol + `, "scripts": {"a": {"attempts": [{"steps": [{"part": "text"}]}]}}, "requests": [{}]}`, `scripts.a.attempts[0].steps[0].part: unknown part kind "text"`},
		{"delta without part", `{` + pol + `, "scripts": {"a": {"attempts": [{"steps": [{"text": "x", "delta": "y"}]}]}}, "requests": [{}]}`, "delta and name go with part"},
		{"bad finish", `{` + pol + `, "scripts": {"a": {"attempts": [{"steps": [{"finish": "done"}]}]}}, "requests": [{}]}`, `steps[0].finish: unknown finish reason "done"`},
		{"open error and steps", `{` + pol + `, "scripts": {"a": {"attempts": [{"open_error": {"status": 500}, "steps": [{"cut": true}]}]}}, "requests": [{}]}`, "scripts.a.attempts[0]: give open_error or steps, not both"},
		{"plugin errors expected", `{` + pol + `, "scripts": {"a": {"attempts": [{}]}}, "requests": [{"expect": {"plugin_errors": [{"plugin": "x"}]}}]}`, "requests[0].expect: plugin_errors is reported, not expected"},
		{"bad caller duration", `{` + pol + `, "scripts": {"a": {"attempts": [{}]}}, "requests": [{"caller": {"timeout": "3"}}]}`, `requests[0].caller.timeout: invalid duration "3"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := scenario.Parse([]byte(tt.doc))
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestPolicyErrorsNameTheirPlaceInTheScenario: a policy mistake inside a
// scenario is a load error whose path starts at "policy".
func TestPolicyErrorsNameTheirPlaceInTheScenario(t *testing.T) {
	doc := `{
  "policy": {"models": [{"name": "a", "provider": "scripted"}],
             "rules": [{"when": {"any": true}, "action": "switch", "model": "b"}]},
  "scripts": {"a": {"attempts": [{}]}},
  "requests": [{}]
}`
	s, d, err := scenario.Parse([]byte(doc))
	require.NoError(t, err)
	res, err := s.Run(t.Context(), d, scenario.Options{})
	require.NoError(t, err)
	require.Equal(t, `line 3:77: policy.rules[0].model: unknown model "b" (declare it under models)`, res.LoadError)
	require.Contains(t, s.Diff(res), "- want the policy to load")
}
