package plugins

import _ "embed"

// The built plugins' bytes. Load them with the host package (each is the
// .wasm committed beside its source).
var (
	//go:embed refusal/refusal.wasm
	Refusal []byte
	//go:embed errmatch/errmatch.wasm
	ErrMatch []byte
	//go:embed finish/finish.wasm
	Finish []byte
	//go:embed c/status.wasm
	CStatus []byte
	//go:embed c/refusal.wasm
	CRefusal []byte
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
	Language string // "go" or "c"
	Wasm     []byte
	// Config says what the config is, with an example; see plugins/README.md.
	Config        string
	ExampleConfig string
}

// All lists the embedded plugins. The slice and the bytes are shared: do
// not modify them.
func All() []Plugin {
	return []Plugin{
		{Name: "refusal", Kind: Transform, Language: "go", Wasm: Refusal,
			Config: `JSON, every field optional: {"phrases": [...] (replaces refusalcore's defaults), "fail": "open"|"closed", ` +
				`"on_cap": "flush"|"fail", "max_held_parts": n, "max_held_bytes": n, "max_hold_time": "10s"}`,
			ExampleConfig: `{"fail": "open"}`},
		{Name: "errmatch", Kind: Condition, Language: "go", Wasm: ErrMatch,
			Config: `JSON: {"rules": [{match fields: "status": [429, "500-599"], "class": ["rate-limit", …], "message": "RE2", ` +
				`"error_name": "RE2", "model": "glob", "min_attempt": n, "max_attempt": n; one action: "retry": {"delay", "backoff", ` +
				`"max_attempts", "timeout", "retry_after"} | "switch": {"model", …same} | "give_up": true}], "fail": "open"|"closed"}; first match decides`,
			ExampleConfig: `{"rules": [{"status": [429], "retry": {"delay": "1s", "backoff": 2, "max_attempts": 3, "retry_after": true}}, ` +
				`{"status": ["500-599"], "switch": {"model": "anthropic/claude-sonnet-4"}}]}`},
		{Name: "finish", Kind: Condition, Language: "go", Wasm: Finish,
			Config:        `JSON: {"switch": {"content-filter"|"length"|"other"|…: "provider/model"}, "raw": {"PROVIDER_WORD": "provider/model"}, "max_attempts": n}`,
			ExampleConfig: `{"switch": {"content-filter": "anthropic/claude-sonnet-4", "length": "google/gemini-2.5-pro"}}`},
		{Name: "c-status", Kind: Condition, Language: "c", Wasm: CStatus,
			Config:        "key=value lines: status=429,500-599 action=retry|switch|give-up model= delay_ms= backoff= max_attempts= retry_after=true|false max_attempt=",
			ExampleConfig: "status=429\naction=retry\ndelay_ms=500\nbackoff=2\nmax_attempts=3\nretry_after=true\n"},
		{Name: "c-refusal", Kind: Transform, Language: "c", Wasm: CRefusal,
			Config:        "one phrase per line (# comments); empty for refusalcore's default phrases",
			ExampleConfig: ""},
	}
}

// Lookup returns the embedded plugin called name.
func Lookup(name string) (Plugin, bool) {
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
