// Package policy builds retry and fail-over from a declarative file: a
// policy (YAML, or JSON with // comments) names the models, the ordered
// rules (native conditions, or Wasm condition plugins by path or built-in
// name), the stream transforms, the deadlines, backoff and caps, the
// sandbox and the sticky policy, and Load turns it into the same objects a
// Go user would build by hand: a *driver.Runner for calls, a
// *driver.RetryableModel for streams and, when the policy names Wasm
// plugins, a *host.Runtime with them loaded. The file's schema is [File].
//
// A policy lets operators change rules without a rebuild, and lets one file
// drive the CLI (retryhost run --policy), the scenario replays and a
// service alike. Every mistake is reported at load with the field's path,
// line and column, and unknown fields, duplicate keys and wrong types are
// errors in both formats, so a typo fails the load instead of silently
// changing behaviour:
//
//	policy.json: line 3:51: rules[0].action: unknown action "retyr" (want switch, retry or give-up)
//
// [Validate] checks a file without building its providers (no keys, no
// network): for CI, as `retryhost policy check FILE` does. The complete,
// commented reference files are policy/testdata/example.json and
// example.yaml, and policy/schema.json is the JSON Schema for editors.
//
// # Models and their keys
//
// Every model has a name the file chooses, and that name is the model's
// key: its identity in the driver (rules, Wasm conditions' switch targets,
// attempt budgets, stickiness, cooldown, telemetry's retryhost.model). The
// provider and the model id are attributes, so one model can be declared
// twice (gpt-4o in two regions, on Azure and on OpenAI, on two Anthropic
// accounts). API keys are never in the file: a model names the environment
// variable that holds its key (api_key_env).
//
// # Providers are linked by import
//
// This package links no provider SDK. A program names the adapters its
// policies may use by importing them, as database/sql drivers are:
//
//	import _ "github.com/retryhost/retryhost/provider/openai"    // openai, azure, openrouter, vllm, ollama
//	import _ "github.com/retryhost/retryhost/provider/anthropic" // anthropic
//
// so a service that uses one provider links one SDK. A policy naming a
// provider whose adapter is not linked fails to load with the import to
// add. Validate needs no adapter.
//
// Built-in plugin names ("builtin": "refusal") resolve only through
// Options.Builtin; set it to plugins.Module (package
// github.com/retryhost/retryhost/plugins) to allow them. This package does
// not import the built-in plugins itself, so a program that never names one
// does not embed their Wasm. Likewise plugins from an OCI registry ("oci":
// "registry.example.com/team/refusal@sha256:…") resolve only through
// Options.OCI, set from package github.com/retryhost/retryhost/oci, so a
// program that never names one links no registry client. A shared state
// ("state": {"redis": {"url": …}}) is linked the same way, by importing
// github.com/retryhost/retryhost/state/redis; a policy that names it in a
// program that did not fails to load with the import to add.
//
// # Stability
//
// Experimental: the file's schema is still growing (model identity,
// YAML); a field's meaning does not change silently, and every change is
// listed in CHANGELOG.md.
package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/internal/leaf/filecap"
	"github.com/retryhost/retryhost/internal/leaf/strict"
	"github.com/retryhost/retryhost/internal/link/policyhook"
	"github.com/retryhost/retryhost/internal/link/stateplug"
)

//go:generate go run ./internal/jsonschema/gen -src schema.go -o schema.json

func init() { policyhook.Build = buildDoc }

// Error is a mistake in a policy file, with its place. Branch on it with
// errors.As. Its message never quotes an api_key_env value that looks like
// a key rather than a variable's name.
type Error struct {
	Path string // the field: rules[2].action; empty for the document itself
	Line int    // 1-based; 0 when unknown
	Col  int    // 1-based; 0 when unknown (a YAML syntax error has a line only)
	Msg  string // what is wrong
}

// Error formats the mistake as "line 3:51: rules[0].action: unknown action …".
func (e *Error) Error() string { return (*strict.Error)(e).Error() }

// Duration is a Go duration string in the file ("250ms", "1m30s"). A bare
// number is an error: its unit would be a guess.
type Duration = strict.Duration

// Options are what the caller supplies beyond the file. The zero Options
// reads keys with os.Getenv, resolves plugin paths against the file's
// directory (Load) or the working directory, tells YAML from JSON by the
// name's extension or the content, allows no built-in plugins and logs
// nothing.
type Options struct {
	// Name labels the policy in errors (usually its file name). Load
	// defaults it to the path. A name ending in .yaml or .yml is YAML, one
	// ending in .json is JSON; otherwise a document whose first character
	// (past white space and // comments) is '{' is JSON, anything else YAML.
	Name string
	// Dir resolves relative plugin paths. Default: the file's directory
	// (Load), else the working directory.
	Dir string
	// Models binds model names to models built by the caller. A "scripted"
	// model must be bound; a bound model of another provider replaces the
	// adapter the file describes (for tests). Either way the model's key
	// in the driver is the file's name for it.
	Models map[string]driver.Model
	// Builtin returns a built-in plugin's bytes by name; nil: no built-ins.
	Builtin func(name string) ([]byte, bool)
	// OCI resolves a plugin's "oci" reference to its module; set it to
	// the Source method of an *oci.Client (package
	// github.com/retryhost/retryhost/oci), which pulls, verifies and caches
	// it. Nil: "oci" plugins are refused (this package links no registry
	// client). A tag reaches it only from a plugin with "follow_tag" (the
	// policy refuses other tags itself), and the client must allow tags
	// (oci.WithAllowTags) for it to load.
	OCI func(ref string) host.Source
	// Getenv reads API keys. Default os.Getenv.
	Getenv func(string) string
	// Logger receives the driver's and host's logs. Default: discard.
	Logger *slog.Logger
	// HTTPClient, when set, is the HTTP client of the file's provider
	// models (a gateway bounds its upstream connections and
	// response-header wait with it). Default: each SDK's own.
	HTTPClient *http.Client
	// RunnerOptions and StreamOptions are appended to the ones the file
	// produces (callbacks, for instance).
	RunnerOptions []driver.Option
	StreamOptions []driver.StreamOption
	// RawChunks makes the file's provider models stream, for every chunk,
	// a KindRaw part with what the adapter does not map (an
	// openai.ChunkFields from OpenAI-compatible models, with
	// openai.WithChunkFields, which leaves out those that would repeat
	// the last; the SDK's event from Anthropic's, but for
	// the text, thinking and tool-input deltas its parts carry whole, with
	// anthropic.WithUnmappedEvents), for the fields the driver does not
	// model: the gateway takes logprobs, system_fingerprint and
	// service_tier from OpenAI's; signatures, citations, redacted thinking,
	// newer blocks and the blocks' own fields from Anthropic's. The file's
	// transforms never see the raw parts (the driver keeps them in their
	// place around the parts a transform holds, see
	// driver.WithTransforms). It is ignored in a file whose commit rule is
	// "legacy", under which a raw part commits the stream (so the first
	// chunk would, before any content). Default false.
	RawChunks bool
	// DefaultBackoff, when set, applies to a file that gives no
	// backoff.delay: every retry (a retry rule without its own delay, a
	// plugin's retry decision without one) waits its Delay, and the
	// backoff fields the file leaves out (factor, max_delay, jitter) take
	// its values. A switch to another model does not wait. A file that
	// writes "delay": "0s" keeps no delay. Default: none (the driver's, no
	// delay). The gateway sets it so that a policy without a backoff never
	// bursts on a rate limit.
	DefaultBackoff *driver.Backoff
	// DefaultRules, when set, gives the rules of a file with no "rules"
	// key ("rules": [] keeps none): it is called with the names of the
	// file's models, in order, and what it returns is built as if the
	// file said it (under the file's backoff, DefaultBackoff's, and
	// DefaultCooldown's condition). Default: none (a file without rules
	// never retries). The gateway sets it so that a policy of models
	// alone fails over.
	DefaultRules func(models []string) []RuleSpec
	// DefaultEmptyAnswer, when set ("accept" or "fail"), is the
	// empty_answer of a file that gives none. Default: none ("accept").
	// The gateway sets "fail", so that a 200 with no content fails over.
	DefaultEmptyAnswer string
	// DefaultHedge, when positive, is the hedge of a file with no "hedge"
	// key ("hedge": null keeps it off), no deadlines.first_content, a rule
	// that may switch models and more than one model (a file of one model
	// is never hedged by default): an attempt with no first content after
	// DefaultHedge has the next candidate started beside it, and the first
	// to commit answers (one hedge a request). Default: none. The gateway
	// sets it so that a slow first token, or an upstream that sends no
	// headers, does not hold a client for the first-content deadline.
	DefaultHedge time.Duration
	// DefaultCooldown, when set, is the cooldown of a file with no
	// "cooldown" key ("cooldown": null keeps it off) and at least one rule
	// that may switch models. Default: none. The gateway sets it so that
	// requests during an outage go straight to the fallback.
	DefaultCooldown *driver.Cooldown
	// DefaultFirstContent and DefaultGap, when positive, are the first
	// content and gap deadlines of a file that gives no
	// deadlines.first_content, respectively no deadlines.gap. A file
	// cannot turn them off ("0s" is refused): it gives a long deadline
	// instead. Default: none (the driver's, no deadline). The gateway sets
	// them so that an upstream that answers its headers and then stays
	// silent never holds a client for ever.
	DefaultFirstContent time.Duration
	DefaultGap          time.Duration
	// DefaultUpstreamJSON, when true, is "upstream_json": true for every
	// model of the file that gives no "upstream_json" and could take it
	// (an OpenAI-compatible provider with api chat), when the file needs
	// no streamed upstream for a request that commits at its end: no
	// transforms, no deadlines.first_content or deadlines.gap, and no
	// hedge (the file's or DefaultHedge). Such a request (a gateway's
	// non-streaming client's) is then non-streamed upstream, and
	// DefaultFirstContent bounds its whole answer. Default: false. The
	// gateway sets it, so that its JSON answers cost what a plain proxy's
	// do unless the policy needs the stream.
	DefaultUpstreamJSON bool
	// HostOptions are appended to the Wasm runtime's options the file's
	// sandbox section produces (a compilation cache directory, an observer).
	HostOptions []host.Option
	// PluginCalls, when set, receives every finished call into the file's
	// Wasm plugins, after the observers HostOptions install: how a layer
	// above the policy (the gateway's per-request accounting) sees its
	// plugins without building on the host. Default: nil.
	PluginCalls func(ctx context.Context, c PluginCall)

	validate bool // Validate: no keys, no adapters
}

// PluginCall is one finished call into a plugin (host.PluginCall), as
// Options.PluginCalls receives it.
type PluginCall = host.PluginCall

// pluginCalls makes Options.PluginCalls a host.Observer.
type pluginCalls func(ctx context.Context, c PluginCall)

func (f pluginCalls) PluginCall(ctx context.Context, c PluginCall) { f(ctx, c) }

// Policy is a loaded policy. Close it to release its plugins. A Policy's
// Runner and Model are safe for concurrent use.
type Policy struct {
	Runner *driver.Runner
	Model  *driver.RetryableModel
	// Models are the file's models and groups by name (which is their key).
	Models map[string]driver.Model
	// Runtime hosts the policy's Wasm plugins; nil when there are none.
	Runtime *host.Runtime
	// Prices are the priced models' prices (ModelSpec.Price) by model
	// name; nil when the file prices none.
	Prices map[string]Price

	skips      map[string]bool          // the models with "unsupported_params": "skip"
	closers    []func() error           // the shared state's, released by Close
	embeddings map[string]EmbeddingSpec // the models' and groups' embedding declarations (Embedding)
	stats      func() stateplug.Stats
	fetched    []fetched // the "oci" plugins' sources, once each
}

// fetched is one "oci" reference as the policy loaded it.
type fetched struct {
	ref  string
	src  host.Source
	sum  string // the module's sha256
	wasm []byte // kept during the build only
	tag  bool   // followed ("follow_tag")
}

// SkipsUnsupported reports whether the model named model is ineligible
// for a request with a parameter it cannot honour
// (ModelSpec.UnsupportedParams "skip") rather than sent it without.
func (p *Policy) SkipsUnsupported(model string) bool { return p.skips[model] }

// Followed lists the "oci" references the policy follows by tag
// ("follow_tag"), in the order the file names them; nil when it follows
// none, and then Moved has nothing to ask.
func (p *Policy) Followed() []string {
	var refs []string
	for _, f := range p.fetched {
		if f.tag {
			refs = append(refs, f.ref)
		}
	}
	return refs
}

// Moved asks the source of each reference the policy follows by tag for
// the module behind it now, and returns those whose module is no longer
// the one the policy loaded, each with the new module's sha256 (nil: none
// moved). The policy itself never changes: load it again to serve the new
// modules (a gateway's Reload; gateway.WithPluginPoll does it on its own).
// A new module is downloaded into the source's cache here, so the reload
// that follows does not download it again. Moved is safe for concurrent
// use.
//
// # Errors
//
// The first source's error, wrapped with its reference; the references
// asked before it are reported in the map.
func (p *Policy) Moved(ctx context.Context) (map[string]string, error) {
	var moved map[string]string
	for _, f := range p.fetched {
		if !f.tag {
			continue
		}
		sum, _, err := f.src.Fetch(ctx, f.sum)
		if err != nil {
			return moved, fmt.Errorf("policy: %s: %w", f.ref, err)
		}
		if sum != f.sum {
			if moved == nil {
				moved = map[string]string{}
			}
			moved[f.ref] = sum
		}
	}
	return moved, nil
}

// StateStats are the counters of a policy's shared state (its "state"
// section): operations that failed against the store, the outages during
// which this process used its local state instead, the operations that
// state served, and whether it is on its local state now.
type StateStats struct {
	Errors, Outages, LocalOps int64
	Down                      bool
}

// StateStats returns the shared state's counters, and false when the
// policy shares no state (each process keeps its own).
func (p *Policy) StateStats() (StateStats, bool) {
	if p == nil || p.stats == nil {
		return StateStats{}, false
	}
	s := p.stats()
	return StateStats{Errors: s.Errors, Outages: s.Outages, LocalOps: s.Local, Down: s.Down}, true
}

// Close releases the plugins, the Wasm runtime and the shared state's
// connections (when no other policy uses them), waiting for calls in
// flight until ctx is done.
func (p *Policy) Close(ctx context.Context) error {
	if p == nil {
		return nil
	}
	var errs []error
	if p.Runtime != nil {
		errs = append(errs, p.Runtime.Close(ctx))
	}
	for _, c := range p.closers {
		errs = append(errs, c())
	}
	p.closers = nil
	return errors.Join(errs...)
}

// Load reads and builds the policy file at path. Relative plugin paths are
// resolved against the file's directory unless opts.Dir says otherwise;
// errors are prefixed with path unless opts.Name says otherwise.
func Load(ctx context.Context, path string, opts Options) (*Policy, error) {
	data, err := readFile(path, &opts)
	if err != nil {
		return nil, err
	}
	return Parse(ctx, data, opts)
}

// Parse builds a policy from the file's bytes (opts.Name labels errors and
// names the format).
func Parse(ctx context.Context, data []byte, opts Options) (*Policy, error) {
	var f File
	doc, err := decode(data, opts.Name, &f)
	if err != nil {
		return nil, opts.wrap(err)
	}
	p, err := buildDoc(ctx, doc, &f, "", opts)
	return p, opts.wrap(err)
}

// Validate checks a policy as Parse would, without building its providers:
// it reads no API key (api_key_env must name a variable, which need not be
// set), needs no provider adapter linked and opens no connection. Wasm
// plugins are loaded and closed, since a plugin that rejects its config is
// a mistake of the file. A nil error means Parse would fail only on what
// Validate leaves out: a key that is not set, an adapter not linked.
func Validate(ctx context.Context, data []byte, opts Options) error {
	var f File
	doc, err := decode(data, opts.Name, &f)
	if err != nil {
		return opts.wrap(err)
	}
	opts.validate = true
	p, err := buildDoc(ctx, doc, &f, "", opts)
	if err != nil {
		return opts.wrap(err)
	}
	return p.Close(ctx)
}

// ValidateFile is Validate for the file at path, with Load's defaults.
func ValidateFile(ctx context.Context, path string, opts Options) error {
	data, err := readFile(path, &opts)
	if err != nil {
		return err
	}
	return Validate(ctx, data, opts)
}

// MaxFileSize bounds a policy file read by Load and ValidateFile (real
// policies are kilobytes): a path to a device or a runaway file is refused,
// as a *fs.PathError, instead of being read until memory runs out.
const MaxFileSize = 16 << 20

func readFile(path string, opts *Options) ([]byte, error) {
	data, err := filecap.Read(path, MaxFileSize)
	if errors.As(err, new(*filecap.TooLargeError)) {
		return nil, &fs.PathError{Op: "read", Path: path,
			Err: fmt.Errorf("larger than the %d MiB limit of a policy file", MaxFileSize>>20)}
	}
	if err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = path
	}
	if opts.Dir == "" {
		opts.Dir = filepath.Dir(path)
	}
	return data, nil
}

// isYAML tells the format: by the name's extension, else by the content.
func isYAML(name string, data []byte) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml":
		return true
	case ".json", ".jsonc":
		return false
	}
	for s := string(data); s != ""; {
		s = strings.TrimLeft(s, " \t\r\n\ufeff")
		if rest, ok := strings.CutPrefix(s, "//"); ok {
			_, s, _ = strings.Cut(rest, "\n")
			continue
		}
		return !strings.HasPrefix(s, "{")
	}
	return false
}

// decode reads the file in its format. A leading UTF-8 byte order mark,
// which some editors write and encoding/json refuses ("invalid character
// 'ï'"), is dropped, as isYAML's sniffing already skips it.
func decode(data []byte, name string, f *File) (*strict.Doc, error) {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	if isYAML(name, data) {
		return strict.DecodeYAML(data, f)
	}
	doc, err := strict.Decode(data, f)
	// A YAML policy saved as .json fails on its first character with
	// encoding/json's words; say why, since the extension decided.
	var se *strict.Error
	if errors.As(err, &se) && isYAML("", data) {
		if _, yerr := strict.DecodeYAML(data, &File{}); yerr == nil {
			se.Msg += fmt.Sprintf(" (the %s name reads the file as JSON, and it looks like YAML: name it .yaml)", filepath.Ext(name))
		}
	}
	return doc, err
}

func (o *Options) wrap(err error) error {
	if se, ok := err.(*strict.Error); ok {
		err = (*Error)(se)
	}
	if err == nil || o.Name == "" {
		return err
	}
	return fmt.Errorf("%s: %w", o.Name, err)
}

// buildDoc builds a policy already decoded, maybe as part of a larger
// document (a scenario embeds one, and reaches this through
// internal/link/policyhook) whose fields sit under prefix in doc.
func buildDoc(ctx context.Context, doc *strict.Doc, f *File, prefix string, opts Options) (*Policy, error) {
	b := &builder{index: map[string]int{}, doc: doc, prefix: prefix, opts: opts, p: &Policy{Models: map[string]driver.Model{}}}
	if b.opts.Getenv == nil {
		b.opts.Getenv = os.Getenv
	}
	if b.opts.Logger == nil {
		b.opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := b.build(ctx, f); err != nil {
		_ = b.p.Close(ctx)
		return nil, err
	}
	for i := range b.p.fetched {
		b.p.fetched[i].wasm = nil // loaded: the runtime has its own copy
	}
	return b.p, nil
}
