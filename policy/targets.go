package policy

import (
	"encoding/json"
	"slices"
	"strings"
)

// checkTargets reports, at load, a built-in condition plugin whose config
// names a switch target that is not a model of this policy. The driver
// would only find out at request time (and then say so loudly: an
// UnknownModelError), but here the target is known statically, so the
// mistake is an error with the config's position. Only the built-ins whose
// config format this package knows are checked: errmatch and finish.
func (b *builder) checkTargets(at string, ps *PluginSpec) error {
	targets := switchTargets(ps.Builtin, ps.Config)
	if len(targets) == 0 {
		return nil
	}
	known := make([]string, 0, len(b.p.Models))
	for _, m := range b.p.Models {
		known = append(known, m.Key())
	}
	slices.Sort(known)
	for _, t := range targets {
		if !slices.Contains(known, t) {
			return b.errf(at+".config", "the %s plugin switches to model %q, which is not a model of this policy (its models' keys: %s)",
				ps.Builtin, t, strings.Join(known, ", "))
		}
	}
	return nil
}

// switchTargets returns the model keys a built-in condition's config
// switches to, in config order; nil for a plugin it does not know or a
// config it cannot read (the plugin itself has validated it at load).
func switchTargets(builtin string, raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil { // a config given as a JSON string
		raw = json.RawMessage(s)
	}
	var out []string
	switch builtin {
	case "errmatch":
		var c struct {
			Rules []struct {
				Switch *struct {
					Model string `json:"model"`
				} `json:"switch"`
			} `json:"rules"`
		}
		if json.Unmarshal(raw, &c) != nil {
			return nil
		}
		for _, r := range c.Rules {
			if r.Switch != nil && r.Switch.Model != "" {
				out = append(out, r.Switch.Model)
			}
		}
	case "finish":
		var c struct {
			Switch map[string]string `json:"switch"`
			Raw    map[string]string `json:"raw"`
		}
		if json.Unmarshal(raw, &c) != nil {
			return nil
		}
		for _, m := range []map[string]string{c.Switch, c.Raw} {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			slices.Sort(keys) // a stable order for the error
			for _, k := range keys {
				out = append(out, m[k])
			}
		}
	}
	return out
}
