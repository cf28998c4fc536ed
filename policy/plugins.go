package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
)

func (b *builder) transform(ctx context.Context, i int, ts *TransformSpec) (driver.Transformer, error) {
	at := fmt.Sprintf("transforms[%d]", i)
	if (ts.Refusal == nil) == (ts.Plugin == nil) {
		return nil, b.errf(at, "give exactly one of refusal (the native detector) or plugin (a Wasm transform)")
	}
	if ts.Refusal != nil {
		c := driver.RefusalConfig{Phrases: ts.Refusal.Phrases}
		switch ts.Refusal.Reasoning {
		case "", "detach":
		case "hold":
			c.Reasoning = driver.ReasoningHold
		default:
			return nil, b.errf(at+".refusal.reasoning", "unknown reasoning %q (want detach or hold)", ts.Refusal.Reasoning)
		}
		d, err := driver.NewRefusalDetectorWith(c)
		if err != nil {
			return nil, b.errf(at+".refusal.phrases", "%v", err)
		}
		return d, nil
	}
	p, err := b.plugin(ctx, at+".plugin", ts.Plugin)
	if err != nil {
		return nil, err
	}
	if !p.IsTransform() {
		return nil, b.errf(at+".plugin", "plugin %q is not a transform", p.Name())
	}
	return p, nil
}

func (b *builder) plugin(ctx context.Context, at string, ps *PluginSpec) (*host.Plugin, error) {
	if n := btoi(ps.Path != "") + btoi(ps.Builtin != "") + btoi(ps.OCI != ""); n != 1 {
		return nil, b.errf(at, "give exactly one of path, builtin or oci")
	}
	if ps.FollowTag && ps.OCI == "" {
		return nil, b.errf(at+".follow_tag", "follow_tag applies to an oci reference only")
	}
	var lo []host.LoadOption
	if ps.SHA256 != "" {
		if len(ps.SHA256) != 64 || strings.Trim(strings.ToLower(ps.SHA256), "0123456789abcdef") != "" {
			return nil, b.errf(at+".sha256", "want 64 hex digits, got %q", ps.SHA256)
		}
		lo = append(lo, host.WithSHA256(ps.SHA256))
	}
	if len(ps.Config) > 0 {
		var s string
		if err := json.Unmarshal(ps.Config, &s); err == nil {
			lo = append(lo, host.WithConfig([]byte(s)))
		} else {
			lo = append(lo, host.WithConfig(ps.Config))
		}
	}
	if ps.Instances < 0 {
		return nil, b.errf(at+".instances", "must not be negative")
	}
	if ps.Instances > 0 {
		lo = append(lo, host.WithInstances(ps.Instances))
	}
	name, wasm, lo, err := b.module(ctx, at, ps, lo)
	if err != nil {
		return nil, err
	}
	if b.plugins == nil {
		b.plugins = map[string]int{}
	}
	if b.plugins[name]++; b.plugins[name] > 1 {
		name = fmt.Sprintf("%s#%d", name, b.plugins[name])
	}
	rt, err := b.runtime(ctx)
	if err != nil {
		return nil, err
	}
	p, err := rt.Load(ctx, name, wasm, lo...)
	if err != nil {
		return nil, b.errf(at, "%v", err)
	}
	switch ps.Fail {
	case "":
	case "open", "closed":
		pol := p.Policy()
		pol.Fail = abi.FailOpen
		if ps.Fail == "closed" {
			pol.Fail = abi.FailClosed
		}
		// The policy is applied at load: load again with it (a plugin is
		// cheap to load twice, and the host keeps its policy immutable).
		_ = p.Close(ctx)
		if p, err = rt.Load(ctx, name, wasm, append(lo, host.WithPolicy(pol))...); err != nil {
			return nil, b.errf(at, "%v", err)
		}
	default:
		return nil, b.errf(at+".fail", "unknown fail policy %q (want open or closed)", ps.Fail)
	}
	return p, nil
}

// module reads the module a plugin names (a built-in, an OCI reference or
// a file) and returns the plugin's name, its bytes and the load options,
// with the digest an OCI module was fetched by added.
func (b *builder) module(ctx context.Context, at string, ps *PluginSpec, lo []host.LoadOption) (string, []byte, []host.LoadOption, error) {
	var wasm []byte
	name := ps.Builtin
	if ps.Builtin != "" {
		var ok bool
		if b.opts.Builtin != nil {
			wasm, ok = b.opts.Builtin(ps.Builtin)
		}
		if !ok {
			return "", nil, nil, b.errf(at+".builtin", "unknown built-in plugin %q", ps.Builtin)
		}
	} else if ps.OCI != "" {
		sum, mod, err := b.ociModule(ctx, at, ps)
		if err != nil {
			return "", nil, nil, err
		}
		if ps.SHA256 != "" && !strings.EqualFold(ps.SHA256, sum) {
			return "", nil, nil, b.errf(at+".sha256", "the module behind %s has sha256 %s", ps.OCI, sum)
		}
		wasm, name = mod, ociName(ps.OCI)
		lo = append(lo, host.WithSHA256(sum))
	} else {
		path := ps.Path
		if !filepath.IsAbs(path) && b.opts.Dir != "" {
			path = filepath.Join(b.opts.Dir, path)
		}
		rt, err := b.runtime(ctx)
		if err != nil {
			return "", nil, nil, err
		}
		// Read no more than the module size limit allows (+1, so Load
		// rejects it by that limit): a device or an endless pipe is not
		// read until memory runs out.
		if wasm, err = readAtMost(path, int64(rt.ModuleLimits().ModuleBytes)+1); err != nil {
			return "", nil, nil, b.errf(at+".path", "%v", err)
		}
		name = filepath.Base(ps.Path)
	}
	return name, wasm, lo, nil
}

func (b *builder) runtime(ctx context.Context) (*host.Runtime, error) {
	if b.p.Runtime != nil {
		return b.p.Runtime, nil
	}
	sb := b.sb
	ho := []host.Option{host.WithLogger(b.opts.Logger)}
	mem, err := b.memory()
	if err != nil {
		return nil, err
	}
	if mem > 0 {
		ho = append(ho, host.WithMemoryLimit(mem))
	}
	if sb.CallTimeout != nil {
		if dur(sb.CallTimeout) <= 0 {
			return nil, b.errf("sandbox.call_timeout", "must be positive")
		}
		ho = append(ho, host.WithCallTimeout(dur(sb.CallTimeout)))
	}
	if sb.Trusted {
		ho = append(ho, host.WithTrusted())
	}
	if sb.Interpreter {
		ho = append(ho, host.WithInterpreter())
	}
	if sb.Breaker != nil {
		ho = append(ho, host.WithBreaker(sb.Breaker.Failures, time.Duration(sb.Breaker.Span)))
	}
	ho = append(ho, b.opts.HostOptions...)
	if b.opts.PluginCalls != nil {
		ho = append(ho, host.WithObserver(pluginCalls(b.opts.PluginCalls)))
	}
	rt, err := host.New(ctx, ho...)
	if err != nil {
		return nil, b.errf("sandbox", "%v", err)
	}
	b.p.Runtime = rt
	return rt, nil
}

var errMemory = errors.New("want a byte count (an integer) or a size such as \"16MiB\"")

// memory parses sandbox.memory; 0 means the default.
func (b *builder) memory() (uint64, error) {
	raw := b.sb.Memory
	if len(raw) == 0 {
		return 0, nil
	}
	var n uint64
	if err := json.Unmarshal(raw, &n); err != nil {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, b.errf("sandbox.memory", "%v", errMemory)
		}
		mult := uint64(1)
		for _, u := range []struct {
			suf string
			m   uint64
		}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
			if v, ok := strings.CutSuffix(s, u.suf); ok {
				s, mult = strings.TrimSpace(v), u.m
				break
			}
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, b.errf("sandbox.memory", "%v, got %s", errMemory, raw)
		}
		n = v * mult
	}
	if n < 64<<10 {
		return 0, b.errf("sandbox.memory", "%d bytes is below one 64 KiB page", n)
	}
	return n, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ociName names a plugin after its repository's last element:
// registry.example.com/team/refusal@sha256:… is "refusal".
func ociName(ref string) string {
	if i := strings.IndexAny(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, "/"); i >= 0 {
		ref = ref[i+1:]
	}
	if i := strings.Index(ref, ":"); i >= 0 {
		ref = ref[:i]
	}
	return ref
}

// ociModule fetches the module behind an "oci" plugin. A reference is
// fetched once per load, so two plugins naming the same tag get the same
// module even if the tag moves during the load. A tag needs follow_tag,
// and is then recorded for Policy.Moved.
func (b *builder) ociModule(ctx context.Context, at string, ps *PluginSpec) (string, []byte, error) {
	tag := !strings.Contains(ps.OCI, "@")
	switch {
	case tag && !ps.FollowTag:
		return "", nil, b.errf(at+".oci", "%s names a tag, not a digest: pin it (…@sha256:…), or set \"follow_tag\": true to follow the tag", ps.OCI)
	case !tag && ps.FollowTag:
		return "", nil, b.errf(at+".follow_tag", "%s is pinned by digest, which never moves: follow_tag needs a tag", ps.OCI)
	case tag && ps.SHA256 != "":
		return "", nil, b.errf(at+".sha256", "a followed tag's module changes: pin a digest (…@sha256:…) instead of sha256")
	case b.opts.OCI == nil:
		return "", nil, b.errf(at+".oci", "an oci plugin needs Options.OCI (package oci)")
	}
	for _, f := range b.p.fetched {
		if f.ref == ps.OCI {
			return f.sum, f.wasm, nil
		}
	}
	src := b.opts.OCI(ps.OCI)
	sum, wasm, err := src.Fetch(ctx, "")
	if err != nil {
		return "", nil, b.errf(at+".oci", "%v", err)
	}
	b.p.fetched = append(b.p.fetched, fetched{ref: ps.OCI, src: src, sum: sum, wasm: wasm, tag: tag})
	return sum, wasm, nil
}

// readAtMost reads the file at path, stopping after n bytes.
func readAtMost(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}
