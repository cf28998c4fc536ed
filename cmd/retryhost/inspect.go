package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/internal/leaf/filecap"
	"github.com/retryhost/retryhost/plugins"
)

func init() {
	names := make([]string, 0, len(plugins.All()))
	for _, p := range plugins.All() {
		names = append(names, p.Name)
	}
	register(&command{
		name:    "plugin",
		summary: "describe Wasm plugins",
		subs: []*command{{
			name:     "inspect",
			args:     "FILE.wasm|BUILTIN",
			argWords: names,
			summary:  "describe a Wasm plugin and try loading it (exit 1 if this host rejects it)",
			help: "Prints a plugin's ABI version, kinds, imports (WASI ones marked as the host's stubs), " +
				"exports, memory and sha256, and whether this host accepts it: it really loads the module, " +
				"so a rejection comes with the host's reason (forbidden-import, abi-version, no-kind, …).\n\n" +
				"BUILTIN is a built-in plugin's name (" + strings.Join(names, ", ") + "), used when no " +
				"file of that name exists; without --config it loads with the built-in's example config. " +
				"A plugin whose init rejects an empty config is reported as needs-config. A file over the host's " +
				"module size limit (16 MiB) is rejected as limit without being read further (no sha256).\n\n" +
				"Exit 0 when accepted, 1 when rejected, 3 when the file cannot be read.",
			setup: func(fs *flag.FlagSet) runFunc {
				asJSON := fs.Bool("json", false, "print the report as JSON")
				config := fs.String("config", "", "the config (`STR`) handed to the plugin's init while trying to load it")
				debug := fs.Bool("debug", false, "keep the module's DWARF debug info, so a trap names source lines (costly on large debug sections)")
				return func(ctx context.Context, e *env, args []string) int {
					cfg := (*string)(nil)
					fs.Visit(func(f *flag.Flag) {
						if f.Name == "config" {
							cfg = config
						}
					})
					return runInspect(ctx, e, args, *asJSON, cfg, *debug)
				}
			},
		}, pushCommand(), pullCommand(), testCommand(), newCommand()},
	})
}

// loadReasons names each load sentinel of package host for output a script
// can branch on.
var loadReasons = []struct {
	err  error
	name string
}{
	{host.ErrInvalidModule, "invalid-module"},
	{host.ErrChecksum, "checksum"},
	{host.ErrABIVersion, "abi-version"},
	{host.ErrForbiddenImport, "forbidden-import"},
	{host.ErrBadExport, "bad-export"},
	{host.ErrNoKind, "no-kind"},
	{host.ErrInit, "init"},
	{host.ErrConfigRejected, "config-rejected"},
	{host.ErrNoBuffer, "no-buffer"},
	{host.ErrLimit, "limit"},
	{host.ErrStartSection, "start-section"},
}

// report is what inspect prints; --json prints it as is.
type report struct {
	File     string     `json:"file"`
	Size     int        `json:"size"`
	SHA256   string     `json:"sha256"`
	ABI      string     `json:"abi"` // "v1", another "vN", or "none"
	Kinds    []string   `json:"kinds"`
	Imports  []function `json:"imports"`
	Exports  []function `json:"exports"`
	Memories []memory   `json:"memories"`
	Accepted bool       `json:"accepted"`
	// FailPolicy is an accepted transform's declared fail policy: what
	// happens to a stream when the plugin traps or times out at call time.
	FailPolicy string `json:"fail_policy,omitempty"`
	// Reason is the load failure's reason (see loadReasons) and Error the
	// host's full message, when not accepted.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	// Config is the config the load used when it was not given: a
	// built-in's example config (ExampleConfig true).
	Config        string `json:"config,omitempty"`
	ExampleConfig bool   `json:"example_config,omitempty"`
	// Policy is what an accepted plugin declared in its init: its transform
	// policy (fail mode, hold caps, what happens at a cap) and hints.
	Policy *declared `json:"policy,omitempty"`
	// Load is what trying to load it cost this host.
	Load *loadCost `json:"load,omitempty"`
	// sizeUnknown: a pipe or device over the limit, Size the bytes read.
	sizeUnknown bool
}

// declared is a plugin's declared policy and hints, as the host applies
// them (hold caps clamped to the host's maxima).
type declared struct {
	Fail         string            `json:"fail"`
	MaxHeldParts int               `json:"max_held_parts,omitempty"`
	MaxHeldBytes int               `json:"max_held_bytes,omitempty"`
	MaxHoldTime  string            `json:"max_hold_time,omitempty"`
	OnCap        string            `json:"on_cap,omitempty"`
	Static       map[string]string `json:"static,omitempty"`
	AutoClose    bool              `json:"auto_close,omitempty"`
	MaxStreams   int               `json:"max_streams,omitempty"`
}

// loadCost is the wall time the load took (pre-parse, compile and init of
// its instances), the bytes the Go heap allocated during it, and the
// process's peak resident memory after it.
type loadCost struct {
	Millis         int64  `json:"millis"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
	PeakRSSBytes   uint64 `json:"peak_rss_bytes,omitempty"`
}

func (c *loadCost) String() string {
	s := fmt.Sprintf("%d ms, %.1f MiB allocated", c.Millis, float64(c.AllocatedBytes)/(1<<20))
	if c.PeakRSSBytes > 0 {
		s += fmt.Sprintf(", process peak %.1f MiB", float64(c.PeakRSSBytes)/(1<<20))
	}
	return s
}

func (d *declared) String() string {
	s := "fail " + d.Fail
	if d.MaxHeldParts > 0 || d.MaxHeldBytes > 0 || d.MaxHoldTime != "" {
		s += fmt.Sprintf(", hold at most %d parts, %d bytes, %s", d.MaxHeldParts, d.MaxHeldBytes, d.MaxHoldTime)
	}
	if d.OnCap != "" {
		s += ", at a cap " + d.OnCap
	}
	if len(d.Static) > 0 {
		kinds := make([]string, 0, len(d.Static))
		for k, a := range d.Static {
			kinds = append(kinds, k+"="+a)
		}
		slices.Sort(kinds)
		s += ", static " + strings.Join(kinds, " ")
	}
	if d.AutoClose {
		s += ", auto-close"
	}
	if d.MaxStreams > 0 {
		s += fmt.Sprintf(", at most %d streams per instance", d.MaxStreams)
	}
	return s
}

func declaredOf(p *host.Plugin) *declared {
	pol, h := p.Policy(), p.Hints()
	d := &declared{Fail: pol.Fail.String(), AutoClose: h.AutoClose, MaxStreams: h.MaxStreams}
	if p.IsTransform() {
		d.MaxHeldParts, d.MaxHeldBytes, d.MaxHoldTime = pol.MaxHeldParts, pol.MaxHeldBytes, pol.MaxHoldTime.String()
		d.OnCap = pol.OnCap.String()
	}
	if len(h.Static) > 0 {
		d.Static = make(map[string]string, len(h.Static))
		for k, a := range h.Static {
			d.Static[k.String()] = a.String()
		}
	}
	return d
}

// hostOpts are the CLI's host options, with debug info where the plugin
// author asked for it (--debug).
func hostOpts(ctx context.Context, e *env, debug bool) []host.Option {
	opts := e.hostOptions(ctx)
	if debug {
		opts = append(opts, host.WithDebugInfo())
	}
	return opts
}

type function struct {
	Module  string   `json:"module,omitempty"` // imports only
	Name    string   `json:"name"`
	Params  []string `json:"params"`
	Results []string `json:"results"`
	// WASI says what the host puts behind a WASI import: its stub
	// ("stub: …") or "forbidden" (the load fails).
	WASI string `json:"wasi,omitempty"`
}

// wasiStubs is what the host gives each WASI import it allows (abi/ABI.md
// §4.5): stubs with nothing behind them. Any other WASI import fails the
// load.
var wasiStubs = map[string]string{
	"args_get": "empty", "args_sizes_get": "empty", "environ_get": "empty", "environ_sizes_get": "empty",
	"clock_res_get": "fake clock", "clock_time_get": "fake clock, +1 ms per read",
	"fd_write": "stdout/stderr to the host's logger, capped; no files",
	"fd_close": "no files", "fd_fdstat_get": "no files", "fd_fdstat_set_flags": "no files",
	"fd_prestat_get": "no preopened directories", "fd_prestat_dir_name": "no preopened directories",
	"poll_oneoff": "sleeps return at once", "proc_exit": "ends the instance",
	"random_get": "deterministic, not random", "sched_yield": "no-op",
}

const wasiModule = "wasi_snapshot_preview1"

func (f function) String() string {
	s := f.Name
	if f.Module != "" {
		s = f.Module + "." + s
	}
	s += "(" + strings.Join(f.Params, ", ") + ")"
	if len(f.Results) > 0 {
		s += " " + strings.Join(f.Results, ", ")
	}
	if f.WASI != "" {
		s += "  [" + f.WASI + "]"
	}
	return s
}

type memory struct {
	Name     string  `json:"name"`
	Imported bool    `json:"imported,omitempty"`
	MinPages uint32  `json:"min_pages"`
	MaxPages *uint32 `json:"max_pages"` // null: no declared maximum
}

func (m memory) String() string {
	s := fmt.Sprintf("%s: min %d pages (%s)", m.Name, m.MinPages, pagesSize(m.MinPages))
	if m.MaxPages == nil {
		s += ", no declared max"
	} else {
		s += fmt.Sprintf(", max %d pages (%s)", *m.MaxPages, pagesSize(*m.MaxPages))
	}
	if m.Imported {
		s += ", imported"
	}
	return s
}

func pagesSize(n uint32) string {
	b := uint64(n) * 64 << 10
	if b >= 1<<20 {
		return fmt.Sprintf("%g MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", b>>10)
}

// runInspect inspects one plugin; config is nil when --config was not given.
func runInspect(ctx context.Context, e *env, args []string, asJSON bool, config *string, debug bool) int {
	if len(args) != 1 {
		return e.usageError(commands["plugin"].subs[0], "want one FILE.wasm or built-in name")
	}
	file := args[0]
	limit := host.DefaultModuleLimits().ModuleBytes
	b, err := filecap.Read(file, int64(limit))
	var big *filecap.TooLargeError // reported as rejected (limit), not an unreadable file
	if errors.As(err, &big) {
		err = nil
	}
	var cfg []byte
	if config != nil {
		cfg = []byte(*config)
	}
	builtin := false
	if errors.Is(err, fs.ErrNotExist) && !strings.ContainsAny(file, `/\`) {
		p, ok := plugins.Lookup(file)
		if !ok { // most likely a mistyped built-in: name them
			names := make([]string, 0, 4)
			for _, p := range plugins.All() {
				names = append(names, p.Name)
			}
			return e.errorf(exitInput, "%v, and no built-in plugin is called %q (built-ins: %s)", err, file, strings.Join(names, ", "))
		}
		b, err, builtin = p.Wasm, nil, true
		file += " (built-in)"
		if config == nil {
			cfg = []byte(p.ExampleConfig)
		}
	}
	if err != nil {
		return e.errorf(exitInput, "%v", err)
	}
	var r *report
	if big != nil {
		r = overLimit(file, big, limit)
	} else if r, err = inspect(ctx, file, b, cfg, hostOpts(ctx, e, debug)...); err != nil {
		return e.errorf(exitFail, "%v", err)
	}
	if builtin && config == nil {
		r.Config = string(cfg)
		r.ExampleConfig = true
	}
	if !r.Accepted && r.Reason == "config-rejected" && len(cfg) == 0 {
		r.Reason = "needs-config"
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return e.errorf(exitFail, "%v", err)
		}
	} else {
		printReport(e.stdout, termFor(e.stdout), r)
	}
	if !r.Accepted {
		return exitFail
	}
	return exitOK
}

// overLimit is the report on a file over the host's ModuleBytes limit,
// which the host refuses unread: no sha256 (the file was not read whole),
// and, unless its size is known (a regular file), a size of limit+1 (the
// bytes read: at least that many).
func overLimit(file string, big *filecap.TooLargeError, limit int) *report {
	size, got := int(min(big.Size, math.MaxInt)), int(min(big.Size, math.MaxInt))
	if big.Size < 0 {
		size, got = limit+1, 0 // LimitError: "over the host's limit", no size
	}
	err := &host.LoadError{Plugin: file, Reason: host.ErrLimit, Err: &host.LimitError{Limit: "ModuleBytes", Got: got, Max: limit}}
	return &report{File: file, Size: size, ABI: "none", Kinds: []string{}, Imports: []function{},
		Exports: []function{}, Memories: []memory{}, Reason: "limit", Error: err.Error(), sizeUnknown: big.Size < 0}
}

// inspect describes wasm from wazero's compiled module, then tries to load
// it with a default host to say whether this host accepts it. The error is
// for the machinery itself failing (not the module being rejected).
//
// opts configure the host (its logger, a compilation cache).
func inspect(ctx context.Context, file string, wasm, config []byte, opts ...host.Option) (*report, error) {
	sum := sha256.Sum256(wasm)
	r := &report{File: file, Size: len(wasm), SHA256: hex.EncodeToString(sum[:]), ABI: "none",
		Kinds: []string{}, Imports: []function{}, Exports: []function{}, Memories: []memory{}}

	rt, err := host.New(ctx, opts...)
	if err != nil {
		return nil, err
	}
	defer rt.Close(ctx)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	p, lerr := rt.Load(ctx, file, wasm, host.WithConfig(config))
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	r.Load = &loadCost{Millis: took.Milliseconds(), AllocatedBytes: after.TotalAlloc - before.TotalAlloc, PeakRSSBytes: peakRSS()}
	// Describe from wazero's own compile only what the host's pre-parse let
	// through: a module over a limit can take wazero minutes or the
	// process's memory to decode. The interpreter compiles fastest, and
	// introspection needs no code. Nothing more once ctx ended (a signal):
	// wazero's compile does not stop for it.
	if !errors.Is(lerr, host.ErrLimit) && !errors.Is(lerr, host.ErrInvalidModule) && ctx.Err() == nil {
		wr := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
		defer wr.Close(ctx)
		if cm, err := wr.CompileModule(ctx, wasm); err == nil {
			describe(r, cm)
		}
	}
	if err := lerr; err != nil {
		var le *host.LoadError
		if !errors.As(err, &le) {
			return nil, err
		}
		r.Error = err.Error()
		r.Reason = "unknown"
		for _, lr := range loadReasons {
			if errors.Is(le, lr.err) {
				r.Reason = lr.name
			}
		}
		return r, nil
	}
	r.Accepted = true
	if p.IsTransform() {
		r.FailPolicy = p.FailPolicy().String()
	}
	r.Policy = declaredOf(p)
	return r, p.Close(ctx)
}

func describe(r *report, cm wazero.CompiledModule) {
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		fn := function{Module: mod, Name: name, Params: types(f.ParamTypes()), Results: types(f.ResultTypes())}
		if mod == wasiModule {
			fn.WASI = "forbidden"
			if stub, ok := wasiStubs[name]; ok {
				fn.WASI = "stub: " + stub
			}
		}
		r.Imports = append(r.Imports, fn)
		if v, ok := strings.CutPrefix(mod, "retryhost_"); ok && r.ABI == "none" {
			r.ABI = v
		}
	}
	for name, f := range cm.ExportedFunctions() {
		r.Exports = append(r.Exports, function{Name: name, Params: types(f.ParamTypes()), Results: types(f.ResultTypes())})
		if v, ok := strings.CutPrefix(name, "retryhost_abi_"); ok {
			r.ABI = v // the version marker wins over the imports
		}
	}
	slices.SortFunc(r.Imports, func(a, b function) int { return strings.Compare(a.Module+"."+a.Name, b.Module+"."+b.Name) })
	slices.SortFunc(r.Exports, func(a, b function) int { return strings.Compare(a.Name, b.Name) })
	exported := cm.ExportedFunctions()
	if _, ok := exported[abi.ExportDecide]; ok {
		r.Kinds = append(r.Kinds, "condition")
	}
	for _, name := range []string{abi.ExportOpen, abi.ExportPart, abi.ExportEnd, abi.ExportClose} {
		if _, ok := exported[name]; ok {
			r.Kinds = append(r.Kinds, "transform")
			break
		}
	}
	for name, m := range cm.ExportedMemories() {
		r.Memories = append(r.Memories, memDef(name, false, m))
	}
	for _, m := range cm.ImportedMemories() {
		mod, name, _ := m.Import()
		r.Memories = append(r.Memories, memDef(mod+"."+name, true, m))
	}
	slices.SortFunc(r.Memories, func(a, b memory) int { return strings.Compare(a.Name, b.Name) })
}

func memDef(name string, imported bool, m api.MemoryDefinition) memory {
	out := memory{Name: name, Imported: imported, MinPages: m.Min()}
	if max, ok := m.Max(); ok {
		out.MaxPages = &max
	}
	return out
}

func types(ts []api.ValueType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = api.ValueTypeName(t)
	}
	return out
}

// printReport writes one "key: value" line per fact (lists: one indented
// line per item), so grep and cut work on it; colour only on a terminal.
func printReport(w io.Writer, t term, r *report) {
	var b strings.Builder
	line := func(k, v string) { fmt.Fprintf(&b, "%-9s %s\n", k+":", v) }
	list := func(k string, items []string) {
		if len(items) == 0 {
			line(k, "none")
			return
		}
		line(k, fmt.Sprint(len(items)))
		for _, it := range items {
			fmt.Fprintf(&b, "  %s\n", it)
		}
	}
	line("file", r.File)
	if r.SHA256 == "" { // over the limit, not read whole (overLimit)
		size := fmt.Sprintf("%d bytes", r.Size)
		if r.sizeUnknown { // the bytes read are the limit + 1
			size = fmt.Sprintf("more than %d bytes", r.Size-1)
		}
		line("size", size+", over the host's limit (ModuleBytes)")
		line("sha256", "not computed (the file was not read)")
	} else {
		line("size", fmt.Sprintf("%d bytes", r.Size))
		line("sha256", r.SHA256)
	}
	abiLine := r.ABI
	if r.ABI != fmt.Sprintf("v%d", abi.VersionMajor) {
		abiLine += fmt.Sprintf(" (this host speaks v%d.%d)", abi.VersionMajor, abi.VersionMinor)
	}
	line("abi", abiLine)
	kinds := strings.Join(r.Kinds, ", ")
	if kinds == "" {
		kinds = "none"
	}
	line("kind", kinds)
	mems := make([]string, len(r.Memories))
	for i, m := range r.Memories {
		mems[i] = m.String()
	}
	list("memory", mems)
	imps := make([]string, len(r.Imports))
	for i, f := range r.Imports {
		imps[i] = f.String()
	}
	list("imports", imps)
	exps := make([]string, len(r.Exports))
	for i, f := range r.Exports {
		exps[i] = f.String()
	}
	list("exports", exps)
	if r.Load != nil {
		line("load", r.Load.String())
	}
	if r.Policy != nil {
		line("declares", r.Policy.String())
	}
	if r.ExampleConfig {
		line("config", "none given; loaded with the built-in's example config: "+strconv.Quote(r.Config))
	}
	if r.Accepted {
		line("accepted", t.paint(ansiGreen+ansiBold, "yes"))
		switch r.FailPolicy {
		case "":
		case abi.FailOpen.String():
			line("on fail", r.FailPolicy+" (if it traps or times out, the stream goes on untransformed)")
		default:
			line("on fail", r.FailPolicy+" (if it traps or times out, that attempt fails and the rules decide)")
		}
		line("note", "load checks passed; at call time every call is bounded by the host's deadline and memory cap")
	} else {
		line("accepted", t.paint(ansiRed+ansiBold, "no")+" ("+r.Reason+")")
		line("why", r.Error)
		if r.Reason == "needs-config" {
			line("hint", "its init rejects an empty config; pass one with --config")
		}
	}
	io.WriteString(w, b.String())
}
