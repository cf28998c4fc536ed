package policy_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
	_ "github.com/retryhost/retryhost/provider/anthropic" // policy files name it
	_ "github.com/retryhost/retryhost/provider/bedrock"
	_ "github.com/retryhost/retryhost/provider/gemini"
	_ "github.com/retryhost/retryhost/provider/openai"
)

// The Gemini adapter's SDK starts opencensus's worker when it is linked.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// fakeModel is a bound model: the policy only needs its key.
type fakeModel struct{ key string }

func (f fakeModel) Key() string { return f.key }
func (f fakeModel) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	return &driver.Response{}, nil
}
func (f fakeModel) Stream(context.Context, *driver.Request) (driver.Stream, error) { return nil, nil }

func bound() policy.Options {
	return policy.Options{
		Name:   "p.json",
		Dir:    "../host/testdata",
		Models: map[string]driver.Model{"a": fakeModel{"s/a"}, "b": fakeModel{"s/b"}},
		Getenv: func(k string) string {
			if k == "SET_KEY" {
				return "sk-test"
			}
			return ""
		},
	}
}

const models = `"models": [{"name": "a", "provider": "scripted"}, {"name": "b", "provider": "scripted"}]`

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"syntax", "{\n  \"models\": [,]\n}", "p.json: line 2:14: invalid character ','"},
		{"truncated", `{"models": [`, "p.json: line 1:13: unexpected end of the document"},
		{"trailing data", `{"models": []} {}`, "line 1:16: unexpected data after the top-level value"},
		{"unknown top field", "{\n" + models + ",\n  \"retries\": 3\n}", "p.json: line 3:3: retries: unknown field (want one of models, rules,"},
		{"duplicate key", `{"sticky": "after-request", "sticky": "x"}`, `line 1:29: duplicate key "sticky"`},
		{"no models", `{}`, "models: at least one model is required"},
		{"model name missing", `{"models": [{"provider": "scripted"}]}`, "models[0].name: required"},
		{"duplicate model", `{"models": [{"name": "a", "provider": "scripted"}, {"name": "a", "provider": "scripted"}]}`, `models[1].name: duplicate model name "a"`},
		{"unknown provider", `{"models": [{"name": "z", "provider": "bedrock-x"}]}`, `models[0].provider: unknown provider "bedrock-x" (want openai, azure, openrouter, vllm, ollama, anthropic, gemini, vertex, bedrock or scripted)`},
		{"bedrock without region", `{"models": [{"name": "z", "provider": "bedrock", "model": "amazon.nova-lite-v1:0"}]}`, "models[0].region: required for provider bedrock: set the model's region (such as us-east-1) or the environment variable AWS_REGION"},
		{"bedrock bad region", `{"models": [{"name": "z", "provider": "bedrock", "model": "amazon.nova-lite-v1:0", "region": "US East"}]}`, `models[0].region: "US East" is not an AWS region`},
		{"region not for openai", `{"models": [{"name": "z", "provider": "openai", "model": "m", "api_key_env": "SET_KEY", "region": "us-east-1"}]}`, "models[0].region: only for provider bedrock"},
		{"unbound scripted", `{"models": [{"name": "z", "provider": "scripted"}]}`, `models[0].provider: scripted model "z" has no script bound`},
		{"openai without model", `{"models": [{"name": "z", "provider": "openai", "api_key_env": "SET_KEY"}]}`, "models[0].model: required for provider openai"},
		{"key env unset", `{"models": [{"name": "z", "provider": "anthropic", "model": "m", "api_key_env": "NOPE"}]}`, "models[0].api_key_env: environment variable NOPE is not set"},
		{"unknown model field", `{"models": [{"name": "a", "provider": "scripted", "key": "x"}]}`, "line 1:51: models[0].key: unknown field (want one of name, provider, model, base_url, api_key_env, region, project, location, deployment, api_version, api, upstream_json, headers, params, unsupported_params, after_commit, embedding, price)"},
		{"wrong type", `{"models": [{"name": 7}]}`, "line 1:22: models[0].name: want a string, got a number"},
		{"rule needs when or plugin", `{` + models + `, "rules": [{"action": "retry"}]}`, "rules[0]: give exactly one of when"},
		{"rule unknown action", `{` + models + `, "rules": [{"when": {"any": true}, "action": "swtich"}]}`, `rules[0].action: unknown action "swtich" (want switch, retry or give-up)`},
		{"rule missing action", `{` + models + `, "rules": [{"when": {"any": true}}]}`, "rules[0].action: required"},
		{"switch unknown model", `{` + models + `, "rules": [{"when": {"any": true}, "action": "switch", "model": "c"}]}`, `rules[0].model: unknown model "c"`},
		{"switch without model", `{` + models + `, "rules": [{"when": {"any": true}, "action": "switch"}]}`, "rules[0].model: required for a switch"},
		{"retry one attempt", `{` + models + `, "rules": [{"when": {"any": true}, "action": "retry", "attempts": 1}]}`, "rules[0].attempts: retry needs at least 2 attempts"},
		{"give-up with delay", `{` + models + `, "rules": [{"when": {"any": true}, "action": "give-up", "delay": "1s"}]}`, "rules[0].delay: not allowed with give-up"},
		{"bad duration", `{` + models + `, "rules": [{"when": {"any": true}, "action": "retry", "delay": "soon"}]}`, `rules[0].delay: invalid duration "soon"`},
		{"number duration", `{` + models + `, "deadlines": {"attempt": 5}}`, `deadlines.attempt: want a duration string such as "250ms", got a number`},
		{"negative duration", `{` + models + `, "deadlines": {"gap": "-1s"}}`, `deadlines.gap: negative duration "-1s"`},
		{"bad status", `{` + models + `, "rules": [{"when": {"status": [429, 42]}, "action": "retry"}]}`, "rules[0].when.status[1]: 42 is not an HTTP status"},
		{"bad status range", `{` + models + `, "rules": [{"when": {"status_range": [599, 500]}, "action": "retry"}]}`, "rules[0].when.status_range: want [lo, hi]"},
		{"bad class", `{` + models + `, "rules": [{"when": {"class": ["ratelimit"]}, "action": "retry"}]}`, `rules[0].when.class[0]: unknown error class "ratelimit" (want one of unknown, timeout, canceled, rate-limit`},
		{"bad finish", `{` + models + `, "rules": [{"when": {"finish": ["halt"]}, "action": "retry"}]}`, `rules[0].when.finish[0]: unknown finish reason "halt"`},
		{"empty match", `{` + models + `, "rules": [{"when": {}, "action": "retry"}]}`, "rules[0].when: no criterion"},
		{"unknown match field", `{` + models + `, "rules": [{"when": {"code": 5}, "action": "retry"}]}`, "rules[0].when.code: unknown field"},
		{"bad jitter", `{` + models + `, "backoff": {"jitter": "some"}}`, `backoff.jitter: unknown jitter "some"`},
		{"low factor", `{` + models + `, "backoff": {"factor": 0.5}}`, "backoff.factor: factor 0.5 is below 1"},
		{"zero max attempts", `{` + models + `, "max_attempts": 0}`, "max_attempts: must be at least 1, got 0"},
		{"bad sticky", `{` + models + `, "sticky": "forever"}`, `sticky: unknown sticky policy "forever"`},
		{"bad commit", `{` + models + `, "commit": "eager"}`, `commit: unknown commit rule "eager"`},
		{"group without name", `{` + models + `, "groups": [{"models": ["a"]}]}`, "groups[0].name: required"},
		{"group name taken", `{` + models + `, "groups": [{"name": "a", "models": ["b"]}]}`, `groups[0].name: "a" is already the name of a model or group`},
		{"group bad strategy", `{` + models + `, "groups": [{"name": "g", "strategy": "fastest", "models": ["a"]}]}`, `groups[0].strategy: unknown strategy "fastest"`},
		{"group no models", `{` + models + `, "groups": [{"name": "g", "models": []}]}`, "groups[0].models: at least one model is required"},
		{"group unknown model", `{` + models + `, "groups": [{"name": "g", "models": ["a", "c"]}]}`, `groups[0].models[1]: unknown model "c"`},
		{"group model twice", `{` + models + `, "groups": [{"name": "g", "models": ["a", "a"]}]}`, `groups[0].models[1]: "a" is listed twice`},
		{"group of a group", `{` + models + `, "groups": [{"name": "g", "models": ["a"]}, {"name": "h", "models": ["g"]}]}`, `groups[1].models[0]: "g" is a group`},
		{"group weights count", `{` + models + `, "groups": [{"name": "g", "models": ["a", "b"], "weights": [1]}]}`, "groups[0].weights: 1 weights for 2 models"},
		{"group weight zero", `{` + models + `, "groups": [{"name": "g", "models": ["a", "b"], "weights": [1, 0]}]}`, "groups[0].weights[1]: must be a positive integer, got 0"},
		{"group weights not weighted", `{` + models + `, "groups": [{"name": "g", "strategy": "latency", "models": ["a", "b"], "weights": [1, 2]}]}`, "groups[0].weights: only for the weighted strategy"},
		{"group unknown field", `{` + models + `, "groups": [{"name": "g", "models": ["a"], "order": "shuffle"}]}`, "groups[0].order: unknown field"},
		{"unknown start", `{` + models + `, "start": "c"}`, `start: unknown model or group "c"`},
		{"budget percent 0", `{` + models + `, "retry_budget": {"percent": 0}}`, "retry_budget.percent: must be 1-100, got 0"},
		{"budget percent 150", `{` + models + `, "retry_budget": {"percent": 150}}`, "retry_budget.percent: must be 1-100, got 150"},
		{"budget min 0", `{` + models + `, "retry_budget": {"min_retries": 0}}`, "retry_budget.min_retries: must be at least 1"},
		{"budget unknown field", `{` + models + `, "retry_budget": {"ratio": 0.2}}`, "retry_budget.ratio: unknown field"},
		{"budget percent as text", `{` + models + `, "retry_budget": {"percent": "20%"}}`, "retry_budget.percent"},
		{"cooldown without failures", `{` + models + `, "cooldown": {"for": "30s"}}`, "cooldown.failures: must be at least 1, got 0"},
		{"cooldown without for", `{` + models + `, "cooldown": {"failures": 3}}`, "cooldown.for: a positive duration is required"},
		{"cooldown bad when", `{` + models + `, "cooldown": {"failures": 3, "for": "1m", "when": {"class": ["slow"]}}}`, `cooldown.when.class[0]: unknown error class "slow"`},
		{"bad memory", `{` + models + `, "sandbox": {"memory": "lots"}}`, `sandbox.memory: want a byte count`},
		{"tiny memory", `{` + models + `, "sandbox": {"memory": 1000}}`, "sandbox.memory: 1000 bytes is below one 64 KiB page"},
		{"transform needs one", `{` + models + `, "transforms": [{}]}`, "transforms[0]: give exactly one of refusal"},
		{"empty phrase", `{` + models + `, "transforms": [{"refusal": {"phrases": ["  "]}}]}`, "transforms[0].refusal.phrases:"},
		{"unknown reasoning", `{` + models + `, "transforms": [{"refusal": {"reasoning": "skip"}}]}`, `transforms[0].refusal.reasoning: unknown reasoning "skip" (want detach or hold)`},
		{"plugin path and builtin", `{` + models + `, "transforms": [{"plugin": {"path": "x.wasm", "builtin": "refusal"}}]}`, "transforms[0].plugin: give exactly one of path, builtin or oci"},
		{"oci without a resolver", `{` + models + `, "transforms": [{"plugin": {"oci": "r.example/t/x@sha256:` + strings.Repeat("0", 64) + `"}}]}`, "transforms[0].plugin.oci: an oci plugin needs Options.OCI"},
		{"plugin missing file", `{` + models + `, "transforms": [{"plugin": {"path": "nope.wasm"}}]}`, "transforms[0].plugin.path: open ../host/testdata/nope.wasm: no such file or directory"},
		{"unknown builtin", `{` + models + `, "transforms": [{"plugin": {"builtin": "nope"}}]}`, `transforms[0].plugin.builtin: unknown built-in plugin "nope"`},
		{"bad sha", `{` + models + `, "transforms": [{"plugin": {"path": "upper.wasm", "sha256": "abc"}}]}`, `transforms[0].plugin.sha256: want 64 hex digits`},
		{"sha mismatch", `{` + models + `, "transforms": [{"plugin": {"path": "upper.wasm", "sha256": "` + strings.Repeat("0", 64) + `"}}]}`, "transforms[0].plugin: host: load plugin \"upper.wasm\": sha256 does not match the pin"},
		{"wrong abi", `{` + models + `, "transforms": [{"plugin": {"path": "wrongabi.wasm"}}]}`, "transforms[0].plugin: host: load plugin \"wrongabi.wasm\": unsupported ABI version"},
		{"rejected config", `{` + models + `, "transforms": [{"plugin": {"path": "rejectconfig.wasm", "config": "no"}}]}`, "transforms[0].plugin: host: load plugin \"rejectconfig.wasm\": plugin rejected its config"},
		{"condition as transform", `{` + models + `, "transforms": [{"plugin": {"path": "condition.wasm", "config": "b"}}]}`, `transforms[0].plugin: plugin "condition.wasm" is not a transform`},
		{"transform as condition", `{` + models + `, "rules": [{"plugin": {"path": "upper.wasm"}}]}`, `rules[0].plugin: plugin "upper.wasm" is not a condition`},
		{"plugin rule fields without action", `{` + models + `, "rules": [{"plugin": {"path": "condition.wasm", "config": "b"}, "attempts": 3}]}`, "rules[0].attempts: only with an action"},
		{"bad fail policy", `{` + models + `, "transforms": [{"plugin": {"path": "upper.wasm", "fail": "maybe"}}]}`, `transforms[0].plugin.fail: unknown fail policy "maybe" (want open or closed)`},
		{"unknown after_commit", `{` + models + `, "after_commit": "resume"}`, `after_commit: unknown after_commit "resume" (want error or continue)`},
		{"unknown unsupported_params", `{"models": [{"name": "a", "provider": "scripted", "unsupported_params": "ignore"}]}`, `models[0].unsupported_params: "ignore" is not a choice (want drop, the default, or skip)`},
		{"unknown model after_commit", `{"models": [{"name": "a", "provider": "scripted", "after_commit": "yes"}]}`, `models[0].after_commit: unknown after_commit "yes"`},
		{"unknown group after_commit", `{` + models + `, "groups": [{"name": "g", "models": ["a", "b"], "after_commit": "no"}]}`, `groups[0].after_commit: unknown after_commit "no"`},
		{"no continuations", `{` + models + `, "max_continuations": 0}`, "max_continuations: must be at least 1"},
		{"floor without rate", `{` + models + `, "throughput_floor": {"window": "2s"}}`, "throughput_floor.chars_per_second: a positive rate is required"},
		{"floor without window", `{` + models + `, "throughput_floor": {"chars_per_second": 5}}`, "throughput_floor.window: a positive duration is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policy.Parse(context.Background(), []byte(tt.doc), bound())
			require.Error(t, err)
			require.Nil(t, p)
			require.Contains(t, err.Error(), tt.want)
			var pe *policy.Error
			if !strings.Contains(tt.name, "syntax") {
				require.ErrorAs(t, err, &pe, "a typed error with the place")
				require.Positive(t, pe.Line, "every error names its line")
			}
		})
	}
}

// A bedrock model takes its region from the file, else from AWS_REGION,
// and its key (a Bedrock API key) is optional.
func TestParseBuildsBedrockModel(t *testing.T) {
	for name, c := range map[string]struct{ doc, env, want string }{
		"file's region": {`{"models": [{"name": "nova", "provider": "bedrock", "model": "amazon.nova-lite-v1:0", "region": "eu-west-3", "api_key_env": "SET_KEY"}]}`, "", "eu-west-3"},
		"AWS_REGION":    {`{"models": [{"name": "nova", "provider": "bedrock", "model": "amazon.nova-lite-v1:0", "api_key_env": "SET_KEY"}]}`, "ap-south-1", "ap-south-1"},
	} {
		t.Run(name, func(t *testing.T) {
			opts := bound()
			opts.Getenv = func(k string) string {
				switch k {
				case "SET_KEY":
					return "ABSK-test"
				case "AWS_REGION":
					return c.env
				}
				return ""
			}
			p, err := policy.Parse(context.Background(), []byte(c.doc), opts)
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close(context.Background()) })
			m := p.Models["nova"]
			prov, id := driver.Describe(m)
			require.Equal(t, "bedrock", prov)
			require.Equal(t, "amazon.nova-lite-v1:0", id)
			scoper, ok := m.(driver.RateLimitScoper)
			require.True(t, ok)
			require.Contains(t, scoper.RateLimitScope(), "https://bedrock-runtime."+c.want+".amazonaws.com")
		})
	}
}

func TestParseBuildsPolicy(t *testing.T) {
	ctx := context.Background()
	doc := `{
	  "models": [
	    {"name": "a", "provider": "scripted"},
	    {"name": "b", "provider": "scripted"},
	    {"name": "gpt", "provider": "openai", "model": "gpt-4o-mini", "base_url": "http://127.0.0.1:1/v1", "api_key_env": "SET_KEY"}
	  ],
	  "rules": [
	    {"when": {"status": [401, 403]}, "action": "give-up"},
	    {"when": {"class": ["rate-limit"]}, "action": "retry", "attempts": 3, "delay": "1ms", "backoff": 2, "retry_after": true},
	    {"plugin": {"path": "condition.wasm", "config": "b", "fail": "closed"}},
	    {"plugin": {"path": "condition.wasm", "config": "b"}, "action": "switch", "model": "gpt"},
	    {"when": {"any": true}, "action": "switch", "model": "b", "timeout": "2s"}
	  ],
	  "transforms": [{"refusal": {}}, {"plugin": {"path": "upper.wasm", "instances": 1}}],
	  "deadlines": {"attempt": "10s", "budget": "1m", "first_content": "2s", "gap": "5s"},
	  "backoff": {"max_delay": "1s", "jitter": "full", "seed": 7},
	  "max_attempts": 5,
	  "retry_after_cap": "3s",
	  "sticky": "after-2-requests",
	  "commit": "legacy",
	  "sandbox": {"memory": "8MiB", "call_timeout": "100ms", "breaker": {"failures": 3, "span": "1m"}}
	}`
	p, err := policy.Parse(ctx, []byte(doc), bound())
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	require.NotNil(t, p.Runner)
	require.NotNil(t, p.Model)
	require.NotNil(t, p.Runtime)
	require.Equal(t, "a", p.Runner.Base().Key(), "a bound model's key is the file's name for it")
	require.Equal(t, "a", p.Model.Key())
	require.Len(t, p.Models, 3)
	require.Equal(t, "gpt", p.Models["gpt"].Key())
	provider, id := driver.Describe(p.Models["gpt"])
	require.Equal(t, []string{"openai", "gpt-4o-mini"}, []string{provider, id}, "provider and model id stay attributes")
	provider, id = driver.Describe(p.Models["a"])
	require.Equal(t, []string{"s", "a"}, []string{provider, id}, "a bound model keeps its own attributes")
}

func TestLoadResolvesPluginsBesideTheFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	wasm, err := os.ReadFile("../host/testdata/upper.wasm")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "upper.wasm"), wasm, 0o600))
	path := filepath.Join(dir, "policy.json")
	require.NoError(t, os.WriteFile(path, []byte(`{`+models+`, "transforms": [{"plugin": {"path": "upper.wasm"}}]}`), 0o600))
	opts := bound()
	opts.Dir, opts.Name = "", ""
	p, err := policy.Load(ctx, path, opts)
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))

	require.NoError(t, os.WriteFile(path, []byte(`{"models": 1}`), 0o600))
	_, err = policy.Load(ctx, path, opts)
	require.EqualError(t, err, path+": line 1:12: models: want an array, got a number")
}

func TestBuiltinPlugins(t *testing.T) {
	ctx := context.Background()
	upper, err := os.ReadFile("../host/testdata/upper.wasm")
	require.NoError(t, err)
	opts := bound()
	opts.Builtin = func(name string) ([]byte, bool) {
		if name == "upper" {
			return upper, true
		}
		return nil, false
	}
	p, err := policy.Parse(ctx, []byte(`{`+models+`, "transforms": [{"plugin": {"builtin": "upper", "fail": "closed"}}]}`), opts)
	require.NoError(t, err)
	require.NotNil(t, p.Runtime)
	require.NoError(t, p.Close(ctx))

	_, err = policy.Parse(ctx, []byte(`{`+models+`, "transforms": [{"plugin": {"builtin": "refusal"}}]}`), opts)
	require.EqualError(t, err, `p.json: line 1:130: transforms[0].plugin.builtin: unknown built-in plugin "refusal"`)
}

// TestCooldownFromTheFile: the file's cooldown reaches the Runner: after one
// counted failure on the base model, the next request starts on b.
func TestCooldownFromTheFile(t *testing.T) {
	ctx := context.Background()
	p, err := policy.Parse(ctx, []byte(`{`+models+`,
	  "rules": [{"when": {"any": true}, "action": "switch", "model": "b"}],
	  "cooldown": {"failures": 1, "for": "1h", "when": {"status": [503]}}}`), bound())
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	var tried []string
	call := func(fail int) {
		_, err := driver.Do(ctx, p.Runner, func(_ context.Context, c *driver.Call) (string, error) {
			tried = append(tried, c.Model.Key())
			if c.Model.Key() == "a" && fail != 0 {
				return "", &driver.ProviderError{Status: fail, Message: "x"}
			}
			return "ok", nil
		})
		require.NoError(t, err)
	}
	call(500) // not counted by the file's when
	call(503) // counted: a cools down
	call(0)
	require.Equal(t, []string{"a", "b", "a", "b", "b"}, tried)
}

// TestRetryBudgetFromTheFile: the file's retry budget reaches the Runner:
// with min_retries 1 and a low percent, while one request's retry is in
// flight another's is refused with ErrBudgetExhausted.
func TestRetryBudgetFromTheFile(t *testing.T) {
	ctx := context.Background()
	p, err := policy.Parse(ctx, []byte(`{`+models+`,
	  "rules": [{"when": {"status": [503]}, "action": "retry"}],
	  "retry_budget": {"percent": 10, "min_retries": 1}}`), bound())
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	inRetry, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := driver.Do(ctx, p.Runner, func(_ context.Context, c *driver.Call) (string, error) {
			if c.Number == 1 {
				return "", &driver.ProviderError{Status: 503, Message: "x"}
			}
			close(inRetry)
			<-release
			return "ok", nil
		})
		done <- err
	}()
	<-inRetry
	attempts := 0
	_, err = driver.Do(ctx, p.Runner, func(_ context.Context, c *driver.Call) (string, error) {
		attempts++
		return "", &driver.ProviderError{Status: 503, Message: "x"}
	})
	require.ErrorIs(t, err, driver.ErrBudgetExhausted)
	require.Equal(t, 1, attempts)
	close(release)
	require.NoError(t, <-done)
}

// TestGroupsFromTheFile: a file's group is a start and a rule target: the
// request starts on the group (start), fails over inside it on a 503, and
// the rule then switches to the other group.
func TestGroupsFromTheFile(t *testing.T) {
	ctx := context.Background()
	opts := bound()
	opts.Models["c"] = fakeModel{"s/c"}
	p, err := policy.Parse(ctx, []byte(`{"models": [{"name": "a", "provider": "scripted"}, {"name": "b", "provider": "scripted"},
	    {"name": "c", "provider": "scripted"}],
	  "groups": [{"name": "gpt-4o", "strategy": "weighted", "models": ["a", "b"], "weights": [3, 1]},
	             {"name": "backup", "strategy": "latency", "models": ["c"]}],
	  "start": "gpt-4o",
	  "rules": [{"when": {"status": [503]}, "action": "switch", "model": "backup"}]}`), opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	require.Equal(t, "gpt-4o", p.Runner.Base().Key())
	require.Equal(t, "gpt-4o", p.Models["gpt-4o"].Key())
	var tried []string
	_, err = driver.Do(ctx, p.Runner, func(_ context.Context, c *driver.Call) (string, error) {
		tried = append(tried, c.Model.Key())
		if c.Model.Key() != "c" {
			return "", &driver.ProviderError{Status: 503, Message: "x"}
		}
		return "ok", nil
	})
	require.NoError(t, err)
	require.Len(t, tried, 3)
	require.ElementsMatch(t, []string{"a", "b"}, tried[:2], "inside the group first")
	require.Equal(t, "c", tried[2], "then the rule's group")
}

// slowModel answers Generate only when its context ends.
type slowModel struct{ key string }

func (m slowModel) Key() string { return m.key }
func (m slowModel) Generate(ctx context.Context, _ *driver.Request) (*driver.Response, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (m slowModel) Stream(context.Context, *driver.Request) (driver.Stream, error) { return nil, nil }

// TestHedgeFromTheFile: "hedge" starts the fail-over target beside a
// silent attempt, so the request is answered while the first still hangs
// (without it, this request would wait for the caller's deadline); its
// mistakes are errors at their place.
func TestHedgeFromTheFile(t *testing.T) {
	ctx := context.Background()
	opts := bound()
	opts.Models["a"] = slowModel{"s/a"}
	p, err := policy.Parse(ctx, []byte(`{`+models+`,
	  "rules": [{"when": {"any": true}, "action": "switch", "model": "b"}],
	  "hedge": {"after": "20ms"}}`), opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = p.Model.Generate(cctx, &driver.Request{Messages: []driver.Message{driver.UserText("hi")}})
	require.NoError(t, err)
	require.NoError(t, cctx.Err(), "answered by the hedge, not at the caller's deadline")

	for _, tc := range []struct{ hedge, want string }{
		{`{}`, "hedge.after: required"},
		{`{"after": "0s"}`, "hedge.after: must be a positive duration"},
		{`{"after": "1s", "max": 0}`, "hedge.max: must be at least 1"},
		{`{"after": "1s", "maximum": 2}`, "hedge.maximum: unknown field"},
	} {
		_, err := policy.Parse(ctx, []byte(`{`+models+`, "hedge": `+tc.hedge+`}`), bound())
		require.ErrorContains(t, err, tc.want, tc.hedge)
	}
}

// TestDefaultBackoff: Options.DefaultBackoff is the retries' backoff in a
// file without backoff.delay (the fields the file does give win; a switch
// does not wait), and never in a file that sets a delay, even "0s".
func TestDefaultBackoff(t *testing.T) {
	ctx := context.Background()
	def := &driver.Backoff{Delay: 2 * time.Millisecond, Factor: 3, MaxDelay: 10 * time.Millisecond}
	for _, c := range []struct {
		name, backoff string
		want          []time.Duration
	}{
		{"no backoff", ``, []time.Duration{2 * time.Millisecond, 6 * time.Millisecond, 10 * time.Millisecond}},
		{"a factor only", `, "backoff": {"factor": 2}`, []time.Duration{2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond}},
		{"a delay", `, "backoff": {"delay": "1ms"}`, []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}},
		{"a zero delay", `, "backoff": {"delay": "0s", "factor": 2}`, []time.Duration{0, 0, 0}},
		{"a retry rule's own delay", `, "rules": [{"when": {"any": true}, "action": "retry", "attempts": 4, "delay": "1ms"}]`, []time.Duration{time.Millisecond, 3 * time.Millisecond, 9 * time.Millisecond}},
		{"a switch does not wait", `, "rules": [{"when": {"any": true}, "action": "retry"}, {"when": {"any": true}, "action": "switch", "model": "b"}]`, []time.Duration{2 * time.Millisecond, 0, 6 * time.Millisecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var delays []time.Duration
			o := bound()
			o.DefaultBackoff = def
			o.RunnerOptions = []driver.Option{driver.WithOnRetry(func(_ context.Context, ri driver.RetryInfo) *driver.Overrides {
				delays = append(delays, ri.Delay)
				return nil
			})}
			rules := `, "rules": [{"when": {"any": true}, "action": "retry", "attempts": 4}]`
			if strings.Contains(c.backoff, `"rules"`) {
				rules = ""
			}
			p, err := policy.Parse(ctx, []byte(`{`+models+rules+c.backoff+`}`), o)
			require.NoError(t, err)
			defer func() { require.NoError(t, p.Close(ctx)) }()
			_, err = driver.Do(ctx, p.Runner, func(context.Context, *driver.Call) (string, error) {
				return "", &driver.ProviderError{Status: 500, Message: "x"}
			})
			require.Error(t, err)
			require.Equal(t, c.want, delays)
		})
	}
}

// TestDefaultCooldown: Options.DefaultCooldown applies to a file with no
// cooldown key whose rules may switch models; "cooldown": null keeps it
// off, and so does a policy with no switch rule (it has nowhere else to go).
func TestDefaultCooldown(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, extra string
		want        []string
	}{
		{"applied", `"rules": [{"when": {"any": true}, "action": "switch", "model": "b"}]`, []string{"a", "b", "b"}},
		{"off with null", `"rules": [{"when": {"any": true}, "action": "switch", "model": "b"}], "cooldown": null`, []string{"a", "b", "a", "b"}},
		{"no switch rule", `"rules": [{"when": {"any": true}, "action": "retry"}]`, []string{"a", "a", "a", "a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := bound()
			o.DefaultCooldown = &driver.Cooldown{Failures: 1, For: time.Hour}
			p, err := policy.Parse(ctx, []byte(`{`+models+`, `+c.extra+`}`), o)
			require.NoError(t, err)
			defer func() { require.NoError(t, p.Close(ctx)) }()
			var tried []string
			for range 2 {
				_, _ = driver.Do(ctx, p.Runner, func(_ context.Context, call *driver.Call) (string, error) {
					tried = append(tried, call.Model.Key())
					if call.Model.Key() == "a" {
						return "", &driver.ProviderError{Status: 503, Message: "x"}
					}
					return "ok", nil
				})
			}
			require.Equal(t, c.want, tried)
		})
	}
}

// TestDefaultBackoffForAPluginRetry: a plugin condition that decides a
// retry without a delay of its own waits the default backoff's delay too.
func TestDefaultBackoffForAPluginRetry(t *testing.T) {
	ctx := context.Background()
	var delays []time.Duration
	o := bound()
	o.DefaultBackoff = &driver.Backoff{Delay: 2 * time.Millisecond, Factor: 1}
	o.RunnerOptions = []driver.Option{driver.WithOnRetry(func(_ context.Context, ri driver.RetryInfo) *driver.Overrides {
		delays = append(delays, ri.Delay)
		return nil
	})}
	p, err := policy.Parse(ctx, []byte(`{`+models+`, "rules": [{"plugin": {"path": "condition.wasm", "config": "b"}}]}`), o)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	_, err = driver.Do(ctx, p.Runner, func(context.Context, *driver.Call) (string, error) {
		return "", &driver.ProviderError{Status: 429, Message: "slow down"}
	})
	require.Error(t, err)
	require.Equal(t, []time.Duration{2 * time.Millisecond, 2 * time.Millisecond}, delays, "the plugin's 3 attempts, each retry after the default delay")
}

// thoughtModel answers with thinking and then text, whole (Generate): its
// content goes through the policy's transforms as a stream would.
type thoughtModel struct{ key, text string }

func (m thoughtModel) Key() string { return m.key }
func (m thoughtModel) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	content := []driver.Part{
		{Kind: abi.KindReasoningStart, ID: "r0"},
		{Kind: abi.KindReasoningDelta, ID: "r0", Delta: "The user wants something I must decline."},
		{Kind: abi.KindReasoningEnd, ID: "r0"},
		{Kind: abi.KindTextDelta, ID: "t0", Delta: m.text},
	}
	return &driver.Response{Content: content, Finish: abi.FinishReason{Unified: abi.ReasonStop}}, nil
}
func (m thoughtModel) Stream(context.Context, *driver.Request) (driver.Stream, error) {
	return nil, errors.New("not streamed")
}

// TestRefusalReasoning: the native refusal transform's "reasoning": "hold"
// judges the text after the thinking, so a refusal after thinking fails
// over to the rule's model; "detach" and the default pass it, as before.
func TestRefusalReasoning(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ spec, want string }{
		{`{"reasoning": "hold"}`, "Here you are."},
		{`{"reasoning": "detach"}`, "I'm sorry, but I can't help with that."},
		{`{}`, "I'm sorry, but I can't help with that."},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			opts := bound()
			opts.Models = map[string]driver.Model{
				"a": thoughtModel{"s/a", "I'm sorry, but I can't help with that."},
				"b": thoughtModel{"s/b", "Here you are."},
			}
			p, err := policy.Parse(ctx, []byte(`{`+models+`,
			  "rules": [{"when": {"class": ["refusal"]}, "action": "switch", "model": "b"}],
			  "transforms": [{"refusal": `+tc.spec+`}]}`), opts)
			require.NoError(t, err)
			defer func() { require.NoError(t, p.Close(ctx)) }()
			resp, err := p.Model.Generate(ctx, &driver.Request{})
			require.NoError(t, err)
			require.Equal(t, tc.want, resp.Text())
		})
	}
}

// TestDefaultRules: Options.DefaultRules gives the rules of a file with no
// rules key, called with the models' names in order; "rules": [] keeps
// none, and a file's own rules replace them. A default rule's attempts
// count as a file's do.
func TestDefaultRules(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, extra string
		want        []string
	}{
		{"applied, attempts and all", ``, []string{"a", "b", "b", "b"}},
		{"none with an empty list", `, "rules": []`, []string{"a"}},
		{"the file's own", `, "rules": [{"when": {"any": true}, "action": "retry"}]`, []string{"a", "a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := bound()
			var got []string
			o.DefaultRules = func(models []string) []policy.RuleSpec {
				got = models
				return []policy.RuleSpec{{When: &policy.MatchSpec{Status: []int{503}}, Action: "switch", Model: models[len(models)-1]},
					{When: &policy.MatchSpec{Status: []int{503}}, Action: "retry", Attempts: 3}}
			}
			p, err := policy.Parse(ctx, []byte(`{`+models+c.extra+`}`), o)
			require.NoError(t, err)
			defer func() { require.NoError(t, p.Close(ctx)) }()
			var tried []string
			_, _ = driver.Do(ctx, p.Runner, func(_ context.Context, call *driver.Call) (string, error) {
				tried = append(tried, call.Model.Key())
				return "", &driver.ProviderError{Status: 503, Message: "x"}
			})
			require.Equal(t, c.want, tried)
			if c.extra == "" {
				require.Equal(t, []string{"a", "b"}, got)
			}
		})
	}
}

// TestEmptyAnswer: "empty_answer": "fail" (or Options.DefaultEmptyAnswer,
// which the file's own value overrides) fails an answer with no content
// over; "accept" and the default take it; anything else is an error.
func TestEmptyAnswer(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, extra, def, want string
	}{
		{"default", ``, "", ""},
		{"fail", `, "empty_answer": "fail"`, "", "from b"},
		{"the caller's default", ``, "fail", "from b"},
		{"the file's over the caller's", `, "empty_answer": "accept"`, "fail", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := bound()
			o.DefaultEmptyAnswer = c.def
			fin := abi.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop}}}
			o.Models = map[string]driver.Model{"a": partsModel{key: "s/a", parts: []abi.Part{{Kind: abi.KindStreamStart}, fin}},
				"b": partsModel{key: "s/b", parts: []abi.Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindTextDelta, ID: "0", Delta: "from b"}, fin}}}
			p, err := policy.Parse(ctx, []byte(`{`+models+`, "rules": [{"when": {"class": ["server"]}, "action": "switch", "model": "b"}]`+c.extra+`}`), o)
			require.NoError(t, err)
			defer func() { require.NoError(t, p.Close(ctx)) }()
			s, err := p.Model.Stream(ctx, &driver.Request{})
			require.NoError(t, err)
			defer s.Close()
			var text string
			for {
				part, err := s.Recv()
				if err == io.EOF {
					break
				}
				require.NoError(t, err)
				text += part.Delta
			}
			require.Equal(t, c.want, text)
		})
	}
	_, err := policy.Parse(ctx, []byte(`{`+models+`, "empty_answer": "maybe"}`), bound())
	require.ErrorContains(t, err, `empty_answer: unknown empty_answer "maybe" (want accept or fail)`)
}

// TestDefaultHedge: Options.DefaultHedge starts the next candidate beside
// an attempt with no first content, in a file with no hedge, no
// first-content deadline and a switch rule; "hedge": null, a file's own
// first_content, and a file with no switch rule keep it off.
func TestDefaultHedge(t *testing.T) {
	ctx := context.Background()
	fin := abi.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop}}}
	sw := `"rules": [{"when": {"class": ["timeout"]}, "action": "switch", "model": "b"}]`
	for _, c := range []struct {
		name, doc string
		hedged    bool
	}{
		{"applied", `{` + models + `, ` + sw + `}`, true},
		{"off with null", `{` + models + `, ` + sw + `, "hedge": null}`, false},
		{"the file's first_content", `{` + models + `, ` + sw + `, "deadlines": {"first_content": "1h"}}`, false},
		{"no switch rule", `{` + models + `, "rules": [{"when": {"any": true}, "action": "retry"}]}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := bound()
			o.DefaultHedge = time.Millisecond
			o.Models = map[string]driver.Model{"a": stallModel{"s/a"},
				"b": partsModel{key: "s/b", parts: []abi.Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindTextDelta, ID: "0", Delta: "from b"}, fin}}}
			p, err := policy.Parse(ctx, []byte(c.doc), o)
			require.NoError(t, err)
			defer func() { require.NoError(t, p.Close(ctx)) }()
			sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond) // a guard: unhedged, a stalls until it
			defer cancel()
			s, err := p.Model.Stream(sctx, &driver.Request{})
			if !c.hedged {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			defer s.Close()
			part, err := s.Recv()
			for err == nil && part.Kind != abi.KindTextDelta {
				part, err = s.Recv()
			}
			require.NoError(t, err)
			require.Equal(t, "from b", part.Delta)
		})
	}
}

// TestDefaultHedgeNeedsASecondModel: a plugin rule that decides its own
// action may switch models, but in a policy of one model there is none to
// switch to, so Options.DefaultHedge stays off: a stalled attempt is not
// joined by a second request to the same model.
func TestDefaultHedgeNeedsASecondModel(t *testing.T) {
	ctx := context.Background()
	o := bound()
	o.Builtin = plugins.Module
	o.DefaultHedge = time.Millisecond
	var streams atomic.Int32
	o.Models = map[string]driver.Model{"a": countingStall{n: &streams}}
	doc := `{"models": [{"name": "a", "provider": "scripted"}], "rules": [{"plugin": {"builtin": "errmatch", "config": {"rules": [{"class": ["timeout"], "retry": {"max_attempts": 3}}]}}}]}`
	p, err := policy.Parse(ctx, []byte(doc), o)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond) // a guard: the attempt stalls until it
	defer cancel()
	_, err = p.Model.Stream(sctx, &driver.Request{})
	require.Error(t, err)
	require.Equal(t, int32(1), streams.Load(), "a hedge started a second attempt on the only model")
}

// countingStall is a stallModel that counts the streams it opens.
type countingStall struct{ n *atomic.Int32 }

func (m countingStall) Key() string { return "s/a" }
func (m countingStall) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	return nil, errors.New("stream only")
}
func (m countingStall) Stream(ctx context.Context, _ *driver.Request) (driver.Stream, error) {
	m.n.Add(1)
	return stallStream{ctx}, nil
}

// stallModel's streams send nothing until their context ends.
type stallModel struct{ key string }

func (m stallModel) Key() string { return m.key }
func (m stallModel) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	return nil, errors.New("stream only")
}
func (m stallModel) Stream(ctx context.Context, _ *driver.Request) (driver.Stream, error) {
	return stallStream{ctx}, nil
}

type stallStream struct{ ctx context.Context }

func (s stallStream) Recv() (abi.Part, error) { <-s.ctx.Done(); return abi.Part{}, s.ctx.Err() }
func (s stallStream) Close() error            { return nil }

// TestCooldownMax: cooldown.max is accepted at or above for, refused
// below it.
func TestCooldownMax(t *testing.T) {
	ctx := context.Background()
	p, err := policy.Parse(ctx, []byte(`{`+models+`, "cooldown": {"failures": 2, "for": "1s", "max": "10s"}}`), bound())
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))
	_, err = policy.Parse(ctx, []byte(`{`+models+`, "cooldown": {"failures": 2, "for": "1s", "max": "500ms"}}`), bound())
	require.ErrorContains(t, err, "cooldown.max: must be at least for (1s), got 500ms")
}
