package policy_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
)

// A built-in condition whose config switches to a model
// the policy does not have is an error at load, at the config's place,
// never a switch the driver can only skip at request time. A model's key
// is its name, so configs name models by name (an old "provider/model"
// key is exactly the mistake reported).
func TestBuiltinSwitchTargetsAreCheckedAtLoad(t *testing.T) {
	ctx := context.Background()
	models := `"models": [{"name": "a", "provider": "scripted"}, {"name": "b", "provider": "scripted"}]`
	for _, tc := range []struct {
		name, rules, err string
	}{
		{"errmatch, an unknown target", `[{"plugin": {"builtin": "errmatch", "config": {"rules": [{"status": [429], "retry": {}}, {"status": ["500-599"], "switch": {"model": "c"}}]}}}]`,
			`line 1:147: rules[0].plugin.config: the errmatch plugin switches to model "c", which is not a model of this policy (its models' keys: a, b)`},
		{"errmatch, a config given as a string", `[{"plugin": {"builtin": "errmatch", "config": "{\"rules\": [{\"switch\": {\"model\": \"openai/gpt\"}}]}"}}]`,
			`rules[0].plugin.config: the errmatch plugin switches to model "openai/gpt"`},
		{"finish, an unknown target", `[{"plugin": {"builtin": "finish", "config": {"switch": {"content-filter": "b", "length": "zzz"}}}}]`,
			`rules[0].plugin.config: the finish plugin switches to model "zzz"`},
		// Loading the Go guests is slow: the cases that load share one policy.
		{"known targets, and a plugin rule with an action of its own (the rule's target counts)", `[
			{"plugin": {"builtin": "errmatch", "config": {"rules": [{"switch": {"model": "b"}}]}}},
			{"plugin": {"builtin": "finish", "config": {"switch": {"content-filter": "b"}, "raw": {"SAFETY": "a"}}}},
			{"plugin": {"builtin": "errmatch", "config": {"rules": [{"switch": {"model": "c"}}]}}, "action": "switch", "model": "b"}]`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := bound()
			opts.Builtin = plugins.Module
			p, err := policy.Parse(ctx, []byte(`{`+models+`, "rules": `+tc.rules+`}`), opts)
			if tc.err == "" {
				require.NoError(t, err)
				require.NoError(t, p.Close(ctx))
				return
			}
			require.ErrorContains(t, err, tc.err)
			require.Nil(t, p)
		})
	}
}
