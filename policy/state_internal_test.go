package policy

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/link/stateplug"
)

const stateModels = "models:\n  - {name: a, provider: scripted}\n"

type stateModel struct{}

func (stateModel) Key() string { return "a" }
func (stateModel) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	return &driver.Response{}, nil
}
func (stateModel) Stream(context.Context, *driver.Request) (driver.Stream, error) { return nil, nil }

func stateOpts() Options {
	return Options{Name: "p.yaml", Models: map[string]driver.Model{"a": stateModel{}},
		Getenv: func(k string) string {
			if k == "REDIS_PW" {
				return "s3cret"
			}
			return ""
		}}
}

// TestStateNotLinked: a policy naming redis in a program that did not
// import state/redis fails to load with the import to add; Validate,
// which opens no connection, accepts it.
func TestStateNotLinked(t *testing.T) {
	lookupState = func(string) stateplug.Factory { return nil }
	t.Cleanup(func() { lookupState = stateplug.Lookup })
	doc := []byte(stateModels + "state:\n  redis: {url: \"redis://127.0.0.1:6379/0\"}\n")
	_, err := Parse(context.Background(), doc, stateOpts())
	require.EqualError(t, err, `p.yaml: line 4:10: state.redis: the Redis state is not linked into this program: import _ "github.com/retryhost/retryhost/state/redis"`)
	require.NoError(t, Validate(context.Background(), doc, stateOpts()))
}

// TestStateBuilt: the file's state section reaches the store's factory
// resolved (password from the environment, op timeout), the store's
// counters are the Policy's, and Close releases the store once, as does a
// load that fails after the store was built.
func TestStateBuilt(t *testing.T) {
	var got stateplug.Spec
	closed := 0
	lookupState = func(kind string) stateplug.Factory {
		require.Equal(t, "redis", kind)
		return func(s stateplug.Spec) (*stateplug.Store, error) {
			got = s
			return &stateplug.Store{Option: driver.WithLogger(s.Logger),
				Stats: func() stateplug.Stats { return stateplug.Stats{Errors: 3, Outages: 1, Local: 7, Down: true} },
				Close: func() error { closed++; return nil }}, nil
		}
	}
	t.Cleanup(func() { lookupState = stateplug.Lookup })
	ctx := context.Background()
	doc := stateModels + `state:
  redis:
    url: redis://10.0.0.5:6380/2
    password_env: REDIS_PW
    prefix: "team-a:"
    op_timeout: 20ms
`
	p, err := Parse(ctx, []byte(doc), stateOpts())
	require.NoError(t, err)
	require.Equal(t, "redis://10.0.0.5:6380/2", got.URL)
	require.Equal(t, "s3cret", got.Password)
	require.Equal(t, "team-a:", got.Prefix)
	require.Equal(t, 20*time.Millisecond, got.OpTimeout)
	st, ok := p.StateStats()
	require.True(t, ok)
	require.Equal(t, StateStats{Errors: 3, Outages: 1, LocalOps: 7, Down: true}, st)
	require.NoError(t, p.Close(ctx))
	require.NoError(t, p.Close(ctx))
	require.Equal(t, 1, closed)

	// A mistake found after the state section is built releases the store.
	_, err = Parse(ctx, []byte(doc+"commit: nope\n"), stateOpts())
	require.ErrorContains(t, err, "unknown commit rule")
	require.Equal(t, 2, closed)

	p, err = Parse(ctx, []byte(stateModels), stateOpts())
	require.NoError(t, err)
	_, ok = p.StateStats()
	require.False(t, ok, "no state section: nothing shared")
}

// TestStateErrors: mistakes in the state section are reported with their
// path, line and column, in YAML and JSON alike, and never quote a secret.
func TestStateErrors(t *testing.T) {
	lookupState = func(string) stateplug.Factory { return nil }
	t.Cleanup(func() { lookupState = stateplug.Lookup })
	for _, tc := range []struct{ name, doc, want string }{
		{"no store", stateModels + "state: {}\n", `p.yaml: line 3:8: state: name the store`},
		{"no url", stateModels + "state: {redis: {prefix: x}}\n", `p.yaml: line 3:16: state.redis.url: required`},
		{"bad scheme", stateModels + "state: {redis: {url: \"http://h:1\"}}\n", `line 3:22: state.redis.url: scheme "http" is not one of redis, rediss, unix, redis+sentinel`},
		{"unknown topology", stateModels + "state: {redis: {url: \"redis+raft://h:1\"}}\n", `state.redis.url: scheme "redis+raft" is not one of`},
		{"sentinel without master", stateModels + "state: {redis: {url: \"redis+sentinel://h:26379/0?addr=h2:26379\"}}\n", `state.redis.url: a Sentinel URL names the primary the Sentinels watch: ?master_name=NAME`},
		{"master without sentinel", stateModels + "state: {redis: {url: \"redis://h:1/0?master_name=m\"}}\n", `state.redis.url: master_name is for a redis+sentinel:// url`},
		{"cluster database", stateModels + "state: {redis: {url: \"redis+cluster://h:1/2\"}}\n", `state.redis.url: a cluster has only database 0`},
		{"addr on one server", stateModels + "state: {redis: {url: \"redis://h:1/0?addr=h2:1\"}}\n", `state.redis.url: addr parameters are for redis+sentinel:// and redis+cluster://`},
		{"bad addr", stateModels + "state: {redis: {url: \"redis+cluster://h:1?addr=h2\"}}\n", `state.redis.url: addr "h2" is not a host:port`},
		{"no host", stateModels + "state: {redis: {url: \"redis+cluster:///0\"}}\n", `state.redis.url: no host`},
		{"password parameter", stateModels + "state: {redis: {url: \"redis+sentinel://h:1/0?master_name=m&password=hunter2\"}}\n", `state.redis.url: the URL holds a password`},
		{"sentinel password on one server", stateModels + "state: {redis: {url: \"redis://h:1/0\", sentinel_password_env: REDIS_PW}}\n", `state.redis.sentinel_password_env: only for a redis+sentinel://`},
		{"sentinel password unset", stateModels + "state: {redis: {url: \"redis+sentinel://h:1/0?master_name=m\", sentinel_password_env: NOPE}}\n", `state.redis.sentinel_password_env: environment variable NOPE is not set`},
		{"password in url", stateModels + "state: {redis: {url: \"redis://u:hunter2@h:1/0\"}}\n", `state.redis.url: the URL holds a password`},
		{"unknown field", stateModels + "state: {redis: {url: \"redis://h:1\", prefx: x}}\n", `line 3:37: state.redis.prefx: unknown field`},
		{"unknown store", stateModels + "state: {memcached: {}}\n", `state.memcached: unknown field`},
		{"bad timeout", stateModels + "state: {redis: {url: \"redis://h:1\", op_timeout: 50}}\n", `state.redis.op_timeout`},
		{"zero timeout", stateModels + "state: {redis: {url: \"redis://h:1\", op_timeout: 0s}}\n", `state.redis.op_timeout: must be a positive duration`},
		{"secret as env", stateModels + "state: {redis: {url: \"redis://h:1\", password_env: \"pw-Abc123xyzQwe456Rty789Uio\"}}\n", `state.redis.password_env: not an environment variable name`},
		{"env unset", stateModels + "state: {redis: {url: \"redis://h:1\", password_env: NOPE}}\n", `state.redis.password_env: environment variable NOPE is not set`},
		{"json", `{"models": [{"name": "a", "provider": "scripted"}],
 "state": {"redis": {"url": "redis://h:1", "prefix": 7}}}`, `line 2:54: state.redis.prefix: want a string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := stateOpts()
			if tc.name == "json" {
				o.Name = "p.json"
			}
			_, err := Parse(context.Background(), []byte(tc.doc), o)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "hunter2")
			require.NotContains(t, err.Error(), "Abc123")
		})
	}
}

// TestStateHighlyAvailableURLs: a Sentinel URL (with the Sentinels' own
// password from the environment) and a Cluster URL reach the store's
// factory as written; Validate accepts them without the variables.
func TestStateHighlyAvailableURLs(t *testing.T) {
	var got stateplug.Spec
	lookupState = func(string) stateplug.Factory {
		return func(s stateplug.Spec) (*stateplug.Store, error) {
			got = s
			return &stateplug.Store{Option: driver.WithLogger(s.Logger), Stats: func() stateplug.Stats { return stateplug.Stats{} },
				Close: func() error { return nil }}, nil
		}
	}
	t.Cleanup(func() { lookupState = stateplug.Lookup })
	ctx := context.Background()
	for _, tc := range []struct{ url, sentinelEnv, sentinelPassword string }{
		{"redis+sentinel://127.0.0.1:26379/0?master_name=mymaster&addr=127.0.0.1:26380&addr=127.0.0.1:26381", "REDIS_PW", "s3cret"},
		{"rediss+sentinel://sentinel-user@127.0.0.1:26379?master_name=mymaster", "", ""},
		{"redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002", "", ""},
		{"rediss+cluster://127.0.0.1:7000", "", ""},
	} {
		doc := stateModels + "state:\n  redis:\n    url: \"" + tc.url + "\"\n    password_env: REDIS_PW\n"
		if tc.sentinelEnv != "" {
			doc += "    sentinel_password_env: " + tc.sentinelEnv + "\n"
		}
		vo := stateOpts()
		vo.Getenv = func(string) string { return "" }
		require.NoError(t, Validate(ctx, []byte(doc), vo), tc.url)
		p, err := Parse(ctx, []byte(doc), stateOpts())
		require.NoError(t, err, tc.url)
		require.Equal(t, tc.url, got.URL)
		require.Equal(t, "s3cret", got.Password)
		require.Equal(t, tc.sentinelPassword, got.SentinelPassword)
		require.NoError(t, p.Close(ctx))
	}
}
