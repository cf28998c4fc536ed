package host

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/internal/testkit/wasmgen"
)

// bomb is a module the load path must refuse, cheaply, before wazero.
type bomb struct {
	name   string
	wasm   func(t testing.TB) []byte
	reason error
	limit  string // the LimitError's Limit, for ErrLimit
}

// loadBombs are the load-time classes of hostile modules: tables (1), the start
// section (2), and unbounded loads (4). The big ones are generated: 200,000
// exports, 100,000 nested blocks, a 63 MB module holding a 60 MB data
// segment.
var loadBombs = []bomb{
	{"tablegrow", fx("tablegrow"), ErrLimit, "TableEntries"},
	{"tablefill", fx("tablefill"), ErrLimit, "TableEntries"},
	{"tablehuge", fx("tablehuge"), ErrLimit, "TableEntries"},
	{"startloop", fx("startloop"), ErrStartSection, ""},
	{"exports", gen(func() []byte { return wasmgen.Exports(200_000) }), ErrLimit, "Exports"},
	{"nesting", gen(func() []byte { return wasmgen.Nested(1, 100_000) }), ErrLimit, "Nesting"},
	{"module size", gen(func() []byte { return wasmgen.Data(60 << 20) }), ErrLimit, "ModuleBytes"},
	{"data bytes", gen(func() []byte { return wasmgen.Data(9 << 20) }), ErrLimit, "DataBytes"},
	{"locals", gen(func() []byte { return wasmgen.Locals(1 << 30) }), ErrLimit, "Locals"},
	{"locals in all", gen(func() []byte { return wasmgen.ManyLocals(50_000, 50_000) }), ErrLimit, "AllLocals"},
	{"many functions", gen(func() []byte { return wasmgen.Nested(60_000, 0) }), ErrLimit, "Functions"},
	{"huge body", gen(func() []byte { return wasmgen.Nested(1, 1<<19) }), ErrLimit, "BodyBytes"},
	{"types", gen(func() []byte { return wasmgen.Types(1_000_000) }), ErrLimit, "Types"},
	{"globals", gen(func() []byte { return wasmgen.Globals(1_000_000) }), ErrLimit, "Globals"},
	{"data segments", gen(func() []byte { return wasmgen.DataSegments(1_000_000) }), ErrLimit, "DataSegments"},
	{"elements", gen(func() []byte { return wasmgen.Elements(1_000_000) }), ErrLimit, "Elements"},
	{"names", gen(func() []byte { return wasmgen.Names(1_000_000) }), ErrLimit, "Names"},
	{"sibling blocks branching out", gen(func() []byte { return wasmgen.SiblingBranches(20_000) }), ErrLimit, "Blocks"},
	{"branches", gen(func() []byte { return wasmgen.BrIfs(5000) }), ErrLimit, "Branches"},
	{"br_table labels", gen(func() []byte { return wasmgen.BrTables(4, 2000) }), ErrLimit, "Branches"},
	{"params", gen(func() []byte { return wasmgen.WideTypes(1, 1001, 0) }), ErrLimit, "Params"},
	{"results", gen(func() []byte { return wasmgen.WideTypes(1, 0, 1001) }), ErrLimit, "Results"},
	{"type bytes", gen(func() []byte { return wasmgen.WideTypes(1100, 1000, 0) }), ErrLimit, "TypeBytes"},
	// 400 functions each within Blocks and Branches, 34 s of compile CPU
	// together; 400 functions each within Nesting, 5 s.
	{"compile work across functions", gen(func() []byte { return wasmgen.SiblingBranchFuncs(400, 2000) }), ErrLimit, "CompileWork"},
	{"nesting across functions", gen(func() []byte { return wasmgen.Nested(400, 2000) }), ErrLimit, "CompileWork"},
	{"declared lengths past the end", gen(func() []byte {
		// A 60-byte module found by the fuzzer: its import vector claims
		// 2^32-1 entries, which made wazero allocate ~200 GB and kill the
		// process.
		return []byte("\x00asm\x01\x00\x00\x00\x01\x05\x01\x60\x00\x00\x00\x02\x01\xff\xff\xff\xff\x07")
	}), ErrInvalidModule, ""},
}

func fx(name string) func(testing.TB) []byte {
	return func(t testing.TB) []byte { return fixture(t, name) }
}

func gen(f func() []byte) func(testing.TB) []byte { return func(testing.TB) []byte { return f() } }

func requireRefused(t *testing.T, err error, b bomb) {
	t.Helper()
	require.ErrorIs(t, err, b.reason)
	var le *LoadError
	require.ErrorAs(t, err, &le)
	require.Equal(t, b.name, le.Plugin)
	require.Equal(t, 1, strings.Count(err.Error(), "host:"), "one host: prefix: %s", err)
	if b.limit != "" {
		var lim *LimitError
		require.ErrorAs(t, err, &lim)
		require.Equal(t, b.limit, lim.Limit)
		require.Contains(t, err.Error(), b.limit, "the message names the limit")
	}
}

func TestLoad_RefusesLoadTimeBombs(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		for _, trusted := range []bool{false, true} {
			o := opts
			if trusted {
				o = append(o, WithTrusted())
			}
			rt := newRuntime(t, o...)
			for _, b := range loadBombs {
				t.Run(b.name, func(t *testing.T) {
					p, err := rt.Load(context.Background(), b.name, b.wasm(t))
					require.Nil(t, p)
					requireRefused(t, err, b)
				})
			}
		}
	})
}

// TestLoad_LimitsAreTheOperators: every limit moves with WithModuleLimits;
// a module past the default loads (as far as its ABI) once allowed.
func TestLoad_LimitsAreTheOperators(t *testing.T) {
	ctx := context.Background()
	exports := wasmgen.Exports(1500)
	_, err := newRuntime(t).Load(ctx, "x", exports)
	require.ErrorIs(t, err, ErrLimit)
	_, err = newRuntime(t, WithModuleLimits(ModuleLimits{Exports: 2000})).Load(ctx, "x", exports)
	require.ErrorIs(t, err, ErrABIVersion, "past the pre-parse: a generated module is no retryhost plugin")

	// Each limit, set below what a shipped module declares (the other
	// fields at their defaults), refuses it.
	tight := []struct {
		limit   string
		value   int
		fixture string
	}{
		{"ModuleBytes", 64, "refusal"},
		{"Functions", 1, "refusal"},
		{"Imports", 2, "hinted"},
		{"Exports", 1, "refusal"},
		{"DataBytes", 1, "refusal"},
		{"BodyBytes", 1, "refusal"},
		{"Nesting", 1, "refusal"},
		{"Locals", 1, "refusal"},
		{"AllLocals", 1, "refusal"},
		{"Tables", 3, "tablehuge"},
		{"TableEntries", 4095, "tablegrowmax"},
		{"Types", 2, "refusal"},
		{"Globals", 1, "hinted"},
		{"DataSegments", 1, "refusal"},
		{"Elements", 1, "tablegrowmax"},
		{"CompileWork", 1, "refusal"},
	}
	for _, tc := range tight {
		t.Run(tc.limit, func(t *testing.T) {
			l := ModuleLimits{}
			*limitField(&l, tc.limit) = tc.value
			_, err := newRuntime(t, WithModuleLimits(l)).Load(ctx, tc.fixture, fixture(t, tc.fixture))
			require.ErrorIs(t, err, ErrLimit)
			var le *LimitError
			require.ErrorAs(t, err, &le)
			require.Equal(t, tc.limit, le.Limit)
			require.Equal(t, tc.value, le.Max)
		})
	}
	_, err = newRuntime(t, WithModuleLimits(ModuleLimits{})).Load(ctx, "refusal", fixture(t, "refusal"))
	require.NoError(t, err, "a zero ModuleLimits keeps every default")
}

func limitField(l *ModuleLimits, name string) *int {
	return map[string]*int{
		"ModuleBytes": &l.ModuleBytes, "Functions": &l.Functions, "Imports": &l.Imports,
		"Exports": &l.Exports, "DataBytes": &l.DataBytes, "BodyBytes": &l.BodyBytes,
		"Nesting": &l.Nesting, "Locals": &l.Locals, "AllLocals": &l.AllLocals, "Tables": &l.Tables, "TableEntries": &l.TableEntries,
		"Types": &l.Types, "Globals": &l.Globals, "DataSegments": &l.DataSegments, "Elements": &l.Elements,
		"Names": &l.Names, "CompileWork": &l.CompileWork,
	}[name]
}

// slowCompile takes the compiler seconds: 400 functions of 2,000 nested
// blocks each, within every per-function limit; slowLimits admit it (the
// default CompileWork does not).
func slowCompile() []byte { return wasmgen.Nested(400, 2000) }

var slowLimits = ModuleLimits{CompileWork: 1 << 40}

// TestLoad_CompileHonoursContext: the Load context and CompileTimeout stop
// a compile, in trusted mode too (a module that compiled for 24 s under a
// 3 s context used to load).
func TestLoad_CompileHonoursContext(t *testing.T) {
	wasm := slowCompile()
	for _, trusted := range []bool{false, true} {
		opts := []Option{WithModuleLimits(slowLimits)}
		if trusted {
			opts = append(opts, WithTrusted())
		}
		t.Run("context", func(t *testing.T) {
			rt := newRuntime(t, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err := rt.Load(ctx, "slow", wasm)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			var le *LoadError
			require.ErrorAs(t, err, &le)
		})
		t.Run("CompileTimeout", func(t *testing.T) {
			rt := newRuntime(t, append(opts, WithModuleLimits(ModuleLimits{CompileTimeout: 100 * time.Millisecond}))...)
			_, err := rt.Load(context.Background(), "slow", wasm)
			require.ErrorIs(t, err, ErrLimit)
			require.NotErrorIs(t, err, context.DeadlineExceeded, "not the caller's deadline")
			var le *LimitError
			require.ErrorAs(t, err, &le)
			require.Equal(t, "CompileTimeout", le.Limit)
		})
	}
}

// TestLoad_ContextEndsInit: in guarded mode a plugin's init stops when the
// Load context ends, not only at the init deadline.
func TestLoad_ContextEndsInit(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		rt := newRuntime(t, append(opts, WithInitTimeout(time.Hour))...)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := rt.Load(ctx, "initloop", fixture(t, "initloop"))
		require.ErrorIs(t, err, context.DeadlineExceeded)

		// With a live context the init deadline stops it.
		rt = newRuntime(t, append(opts, WithInitTimeout(100*time.Millisecond))...)
		_, err = rt.Load(context.Background(), "initloop", fixture(t, "initloop"))
		require.ErrorIs(t, err, ErrInit)
		require.ErrorIs(t, err, ErrTimeout)
	})
}

// TestHostile_Recursion: unbounded recursion traps with ErrStackOverflow
// (wazero's ceiling: about 100 MB of stack on the compiler, 2,000 frames
// on the interpreter), not a timeout, and the instance is replaced. The
// deadline is generous: on the compiler reaching the ceiling takes 60–250
// ms (docs/security.md, "Limits"), past the default 50 ms, where the same
// call ends as ErrTimeout.
func TestHostile_Recursion(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		rt := newRuntime(t, append(opts, WithCallTimeout(30*time.Second))...)
		p, err := rt.Load(context.Background(), "recurse", fixture(t, "recurse"), WithInstances(1))
		require.NoError(t, err)
		for range 2 {
			_, err = p.Decide(context.Background(), &abi.Attempt{Number: 1})
			require.ErrorIs(t, err, ErrTrap)
			require.ErrorIs(t, err, ErrStackOverflow)
			require.NotErrorIs(t, err, ErrTimeout)
			var pe *PluginError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, ErrTrap, pe.Kind)
			require.Equal(t, 1, strings.Count(err.Error(), "host:"), "one host: prefix: %s", err)
			require.Contains(t, err.Error(), "plugin trapped: plugin call stack overflowed")
		}
	})
}

// TestHostile_TableGrowthStopsAtTheDeclaredMaximum: a table that declares
// a maximum within TableEntries may grow, and every growth past it fails
// inside the guest.
func TestHostile_TableGrowthStopsAtTheDeclaredMaximum(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		rt := newRuntime(t, opts...)
		p, err := rt.Load(context.Background(), "tablegrowmax", fixture(t, "tablegrowmax"))
		require.NoError(t, err)
		for i := range 3 {
			r := run(context.Background(), p, uint64(i), textStream("a", "b"))
			require.NoError(t, r.fail)
			require.Equal(t, render(textStream("a", "b")), render(r.out))
		}
		// The same table without a maximum is refused: see tablegrow.
		_, err = rt.Load(context.Background(), "tablegrow", fixture(t, "tablegrow"))
		require.True(t, errors.Is(err, ErrLimit))
	})
}

// TestRegistry_WatchSurvivesLoadBombs: a start loop and a 200,000-export
// module dropped into a watched directory are refused at once, and the
// watcher goes on picking up the other plugins (it used to wedge for ever
// on the start loop, in trusted mode too).
func TestRegistry_WatchSurvivesLoadBombs(t *testing.T) {
	for _, trusted := range []bool{false, true} {
		var opts []Option
		if trusted {
			opts = append(opts, WithTrusted())
		}
		ctx := context.Background()
		var logs logBuffer
		rt := newRuntime(t, append(opts, WithLogger(logs.logger()))...)
		reg := NewRegistry(rt)
		dir := t.TempDir()
		write := func(name string, b []byte) { t.Helper(); writeAtomic(t, dir, name, b) }
		write("xf.wasm", fixture(t, "upper"))
		require.NoError(t, reg.Scan(ctx, dir))
		xf, ok := reg.Get("xf")
		require.True(t, ok)

		wctx, cancel := context.WithCancel(ctx)
		watchErr := make(chan error, 1)
		go func() { watchErr <- reg.Watch(wctx, dir, time.Millisecond) }()
		write("a-start.wasm", fixture(t, "startloop"))
		write("b-exports.wasm", wasmgen.Exports(200_000))
		write("xf.wasm", fixture(t, "refusal"))
		waitFor(t, func() bool { return xf.Version() == sha(fixture(t, "refusal")) }, "the watcher to swap xf past the bombs")
		cancel()
		require.ErrorIs(t, <-watchErr, context.Canceled)
		require.Contains(t, logs.String(), "start section")
		require.Contains(t, logs.String(), "Exports")
		require.NoError(t, reg.Close(ctx))
	}
}

// TestPrecheck_CommittedModulesPassTheDefaults: every .wasm in the
// repository (plugins, SDK examples, examples, fixtures) passes the
// pre-parse with DefaultModuleLimits, CompileWork included, except the
// hostile fixtures that exist to be refused.
func TestPrecheck_CommittedModulesPassTheDefaults(t *testing.T) {
	refused := map[string]error{
		"tablegrow.wasm": ErrLimit, "tablefill.wasm": ErrLimit, "tablehuge.wasm": ErrLimit,
		"startloop.wasm": ErrStartSection,
	}
	rt := newRuntime(t)
	var files []string
	require.NoError(t, filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".wasm") {
			files = append(files, path)
		}
		return nil
	}))
	require.Greater(t, len(files), 50)
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			err = rt.precheck(f, b)
			if want, ok := refused[filepath.Base(f)]; ok {
				require.ErrorIs(t, err, want)
				return
			}
			require.NoError(t, err)
		})
	}
}
