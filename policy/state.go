package policy

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/link/stateplug"
)

// redisURLForms is what checkRedisURL's errors show.
const redisURLForms = "redis://host:port/db (rediss:// for TLS, or unix:///path), redis+sentinel://sentinel:port/db?master_name=NAME&addr=sentinel2:port, or redis+cluster://node:port?addr=node2:port (rediss+… for TLS)"

// checkRedisURL checks a state URL's form without go-redis, which a
// policy does not link: the scheme names a topology, a host (or a path
// for unix://) is there, a Sentinel URL names its primary, a cluster has
// no database, every addr parameter is a host:port, and no password is in
// it. go-redis checks the rest (its own query parameters) when the state
// is built. It returns "" for a URL it accepts.
func checkRedisURL(raw string) string {
	if raw == "" {
		return "required: the server, as " + redisURLForms
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "not a URL: " + redisURLForms
	}
	scheme := strings.ToLower(u.Scheme)
	base, topo, _ := strings.Cut(scheme, "+")
	q := u.Query()
	switch {
	case base != "redis" && base != "rediss" && !(base == "unix" && topo == ""),
		topo != "" && topo != "sentinel" && topo != "cluster":
		return fmt.Sprintf("scheme %q is not one of redis, rediss, unix, redis+sentinel, rediss+sentinel, redis+cluster, rediss+cluster: %s", u.Scheme, redisURLForms)
	case base != "unix" && u.Host == "":
		return "no host: " + redisURLForms
	case base == "unix" && u.Path == "":
		return "no socket path: unix:///path/to/redis.sock"
	case topo == "sentinel" && q.Get("master_name") == "":
		return "a Sentinel URL names the primary the Sentinels watch: ?master_name=NAME"
	case topo != "sentinel" && q.Has("master_name"):
		return "master_name is for a redis+sentinel:// url"
	case topo == "cluster" && strings.Trim(u.Path, "/") != "":
		return "a cluster has only database 0: no /db in a redis+cluster:// url"
	case topo == "" && q.Has("addr"):
		return "addr parameters are for redis+sentinel:// and redis+cluster:// urls (more Sentinels, more seed nodes)"
	case q.Has("password") || q.Has("sentinel_password"):
		return "the URL holds a password: put it in an environment variable named by password_env (sentinel_password_env for the Sentinels')"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			return "the URL holds a password: put it in an environment variable named by password_env (sentinel_password_env for the Sentinels')"
		}
	}
	for _, a := range q["addr"] {
		if h, p, err := net.SplitHostPort(a); err != nil || h == "" || p == "" {
			return fmt.Sprintf("addr %q is not a host:port", a)
		}
	}
	return ""
}

// lookupState finds a linked state store's factory (a variable for tests).
var lookupState = stateplug.Lookup

// state builds the shared state the file names, or checks it (Validate:
// no connection).
func (b *builder) state(ss *StateSpec) (driver.Option, error) {
	rs := ss.Redis
	if rs == nil {
		return nil, b.errf("state", "name the store to share the state in: \"state\": {\"redis\": {\"url\": \"redis://host:6379/0\"}}")
	}
	spec := stateplug.Spec{Kind: "redis", URL: rs.URL, Prefix: rs.Prefix, OpTimeout: dur(rs.OpTimeout), Logger: b.opts.Logger}
	if msg := checkRedisURL(rs.URL); msg != "" {
		return nil, b.errf("state.redis.url", "%s", msg)
	}
	if rs.OpTimeout != nil && *rs.OpTimeout <= 0 {
		return nil, b.errf("state.redis.op_timeout", "must be a positive duration")
	}
	if rs.PasswordEnv != "" {
		if looksLikeSecret(rs.PasswordEnv) || !envPattern.MatchString(rs.PasswordEnv) {
			return nil, b.errf("state.redis.password_env", "not an environment variable name (letters, digits, '_'); it holds the NAME of the variable with the password, never the password (the value is not shown)")
		}
		if !b.opts.validate {
			if spec.Password = b.opts.Getenv(rs.PasswordEnv); spec.Password == "" {
				return nil, b.errf("state.redis.password_env", "environment variable %s is not set", rs.PasswordEnv)
			}
		}
	}
	if rs.SentinelPasswordEnv != "" {
		if !strings.Contains(strings.ToLower(rs.URL), "+sentinel://") {
			return nil, b.errf("state.redis.sentinel_password_env", "only for a redis+sentinel:// or rediss+sentinel:// url")
		}
		if looksLikeSecret(rs.SentinelPasswordEnv) || !envPattern.MatchString(rs.SentinelPasswordEnv) {
			return nil, b.errf("state.redis.sentinel_password_env", "not an environment variable name (letters, digits, '_'); it holds the NAME of the variable with the Sentinels' password, never the password (the value is not shown)")
		}
		if !b.opts.validate {
			if spec.SentinelPassword = b.opts.Getenv(rs.SentinelPasswordEnv); spec.SentinelPassword == "" {
				return nil, b.errf("state.redis.sentinel_password_env", "environment variable %s is not set", rs.SentinelPasswordEnv)
			}
		}
	}
	if b.opts.validate {
		return nil, nil
	}
	f := lookupState("redis")
	if f == nil {
		return nil, b.errf("state.redis", "the Redis state is not linked into this program: import _ \"github.com/retryhost/retryhost/state/redis\"")
	}
	st, err := f(spec)
	if err != nil {
		return nil, b.errf("state.redis", "%v", err)
	}
	b.p.closers = append(b.p.closers, st.Close)
	b.p.stats = st.Stats
	return st.Option, nil
}
