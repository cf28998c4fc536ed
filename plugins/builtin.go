package plugins

import _ "embed"

// The built-in plugins' bytes: the C builds (plugins/c), a few KB each,
// which load in milliseconds. Load them with the host package. Each takes
// the same config as the Go-SDK build of the same plugin (plugins/refusal,
// plugins/errmatch, plugins/finish), the reference for SDK authors, and
// decides the same (the differential tests in this package check it); the
// Go builds are not embedded: they are ~4 MB each and take seconds to
// compile (see docs/decisions.md, "Why are the built-in plugins C builds?").
var (
	//go:embed c/refusal.wasm
	Refusal []byte
	//go:embed c/errmatch.wasm
	ErrMatch []byte
	//go:embed c/finish.wasm
	Finish []byte
	//go:embed c/status.wasm
	CStatus []byte
	// CRefusal is Refusal (the same bytes and config): the C refusal
	// build was a separate built-in with a phrases-per-line config before
	// it became the refusal built-in.
	//
	// Deprecated: use Refusal.
	CRefusal = Refusal
)

// Kind says what a plugin is.
type Kind string

// The kinds.
const (
	Condition Kind = "condition"
	Transform Kind = "transform"
)

// Plugin describes one embedded plugin.
type Plugin struct {
	Name     string // "refusal", "errmatch", …
	Kind     Kind
	Language string // "c": every embedded build is C
	Wasm     []byte
	// Config says what the config is, with an example; see plugins/README.md.
	Config        string
	ExampleConfig string
}

// aliases are other names Lookup accepts: "c-refusal" named the C
// refusal build when the Go build was the built-in; it is the same
// plugin now, with the same JSON config.
var aliases = map[string]string{"c-refusal": "refusal"}

// All lists the embedded plugins (not their aliases). The slice is new on
// each call, the bytes are shared: do not modify them.
func All() []Plugin {
	return []Plugin{
		{Name: "refusal", Kind: Transform, Language: "c", Wasm: Refusal,
			Config: `JSON, every field optional: {"phrases": [...] (replaces refusalcore's defaults), "fail": "open"|"closed", ` +
				`"on_cap": "flush"|"fail", "max_held_parts": n, "max_held_bytes": n, "max_hold_time": "10s"}`,
			ExampleConfig: `{"fail": "open"}`},
		{Name: "errmatch", Kind: Condition, Language: "c", Wasm: ErrMatch,
			Config: `JSON: {"rules": [{match fields: "status": [429, "500-599"], "class": ["rate-limit", …], "message": "regex", ` +
				`"error_name": "regex", "model": "glob", "min_attempt": n, "max_attempt": n; one action: "retry": {"delay", "backoff", ` +
				`"max_attempts", "timeout", "retry_after"} | "switch": {"model", …same} | "give_up": true}], "fail": "open"|"closed"}; ` +
				`first match decides; regexes in the RE2 subset of plugins/README.md`,
			ExampleConfig: `{"rules": [{"status": [429], "retry": {"delay": "1s", "backoff": 2, "max_attempts": 3, "retry_after": true}}, ` +
				`{"status": ["500-599"], "switch": {"model": "anthropic/claude-sonnet-4"}}]}`},
		{Name: "finish", Kind: Condition, Language: "c", Wasm: Finish,
			Config:        `JSON: {"switch": {"content-filter"|"length"|"other"|…: "provider/model"}, "raw": {"PROVIDER_WORD": "provider/model"}, "max_attempts": n}`,
			ExampleConfig: `{"switch": {"content-filter": "anthropic/claude-sonnet-4", "length": "google/gemini-2.5-pro"}}`},
		{Name: "c-status", Kind: Condition, Language: "c", Wasm: CStatus,
			Config:        "key=value lines: status=429,500-599 action=retry|switch|give-up model= delay_ms= backoff= max_attempts= retry_after=true|false max_attempt=",
			ExampleConfig: "status=429\naction=retry\ndelay_ms=500\nbackoff=2\nmax_attempts=3\nretry_after=true\n"},
	}
}

// Lookup returns the embedded plugin called name, or by an alias
// ("c-refusal" is "refusal").
func Lookup(name string) (Plugin, bool) {
	if to, ok := aliases[name]; ok {
		name = to
	}
	for _, p := range All() {
		if p.Name == name {
			return p, true
		}
	}
	return Plugin{}, false
}

// Module returns the Wasm bytes of the embedded plugin called name, the
// form policy.Options.Builtin takes (Builtin: plugins.Module allows a
// policy file to name the built-in plugins).
func Module(name string) ([]byte, bool) {
	p, ok := Lookup(name)
	return p.Wasm, ok
}
