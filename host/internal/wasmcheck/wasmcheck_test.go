package wasmcheck

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"

	"github.com/retryhost/retryhost/internal/testkit/wasmgen"
)

// generous are limits no real plugin comes near, far below the bombs.
var generous = Limits{
	ModuleBytes: 16 << 20, Functions: 50_000, Imports: 1000, Exports: 1000,
	DataBytes: 8 << 20, BodyBytes: 1 << 20, Nesting: 2048, Locals: 50_000,
	Tables: 4, TableEntries: 1 << 20, Types: 10_000, Globals: 10_000,
	DataSegments: 500_000, Elements: 1 << 18, Names: 1 << 18, AllLocals: 1 << 20,
	Blocks: 2048, Branches: 4096, Params: 1000, Results: 1000, TypeBytes: 1 << 20,
	CompileWork: 1 << 27,
}

func wasmFiles(t testing.TB) []string {
	var files []string
	for _, pat := range []string{"../../testdata/*.wasm", "../../../plugins/*/*.wasm",
		"../../../plugins/sdk/*/examples/*/*.wasm", "../../../examples/*/guest/*.wasm"} {
		m, err := filepath.Glob(pat)
		require.NoError(t, err)
		files = append(files, m...)
	}
	require.NotEmpty(t, files)
	return files
}

// TestCheck_RealModules: every module the project ships passes the
// pre-parse unchanged, except the hostile fixtures it exists to refuse.
func TestCheck_RealModules(t *testing.T) {
	refused := map[string]error{
		"tablegrow.wasm": &LimitError{}, "tablefill.wasm": &LimitError{},
		"tablehuge.wasm": &LimitError{}, "startloop.wasm": ErrStartSection,
		"garbage_bytes.wasm": nil,
	}
	for _, f := range wasmFiles(t) {
		t.Run(f, func(t *testing.T) {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			info, err := Check(b, generous)
			want, special := refused[filepath.Base(f)]
			switch {
			case !special:
				require.NoError(t, err)
				require.Positive(t, info.Functions)
			case errors.Is(want, ErrStartSection):
				require.ErrorIs(t, err, want)
			default:
				var le *LimitError
				require.ErrorAs(t, err, &le)
			}
		})
	}
}

// TestCheck_GoGuestCounts pins what the Go-SDK builds declare, the figures
// the host's defaults are chosen against (docs/security.md, "Limits").
func TestCheck_GoGuestCounts(t *testing.T) {
	b, err := os.ReadFile("../../../plugins/errmatch/errmatch.wasm")
	require.NoError(t, err)
	info, err := Check(b, Limits{})
	require.NoError(t, err)
	require.Less(t, info.Functions, uint64(5000))
	require.Less(t, info.MaxNesting, uint64(1024))
	require.Less(t, info.MaxBody, uint64(128<<10))
	require.Less(t, info.DataBytes, uint64(2<<20))
	require.Less(t, info.TableEntries, uint64(16<<10))
	require.Less(t, info.MaxLocals, uint64(100))
	require.Less(t, info.AllLocals, uint64(64<<10))
	t.Logf("%+v", info)
	require.Less(t, info.Types, uint64(100))
	require.Less(t, info.Globals, uint64(100))
	require.Less(t, info.DataSegments, uint64(100_000))
	require.Less(t, info.Elements, uint64(16<<10))
	require.Less(t, info.Names, uint64(16<<10))
	require.Less(t, info.MaxBlocks, uint64(1024))
	require.Less(t, info.Branches, uint64(2048))
	require.Less(t, info.MaxParams, uint64(16))
	require.Less(t, info.MaxResults, uint64(4))
	require.Less(t, info.TypeBytes, uint64(1024))
	require.Less(t, info.CompileWork, uint64(64<<20))
}

// TestCheck_CompileWork pins the cost model on small bodies: 1,024 a
// body, 256 a block or jump, half of blocks squared, jumps × (jumps + 3 ×
// blocks).
func TestCheck_CompileWork(t *testing.T) {
	work := func(blocks, jumps uint64) uint64 {
		return 1024 + 256*(blocks+jumps) + blocks*blocks/2 + jumps*(jumps+3*blocks)
	}
	tests := []struct {
		name string
		wasm []byte
		want uint64
	}{
		{"sibling blocks branching out", wasmgen.SiblingBranches(10), work(10, 10)},
		{"br_ifs in no block", wasmgen.BrIfs(10), work(0, 10)},
		{"nested blocks", wasmgen.Nested(1, 10), work(10, 0)},
		{"br_table labels", wasmgen.BrTables(1, 100), work(1, 0)},
		{"summed over functions", wasmgen.SiblingBranchFuncs(3, 10), 3 * work(10, 10)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			info, err := Check(tc.wasm, Limits{})
			require.NoError(t, err)
			require.Equal(t, tc.want, info.CompileWork)
		})
	}
}

func TestCheck_Limits(t *testing.T) {
	imports := func(n int) []byte {
		p := wasmgen.LEB(nil, uint64(n))
		for range n {
			p = append(p, 1, 'm', 1, 'f', 0, 0)
		}
		m := wasmgen.Section([]byte(wasmgen.Header), 1, []byte{1, 0x60, 0, 0})
		return wasmgen.Section(m, 2, p)
	}
	table := func(flags byte, lims ...uint64) []byte {
		p := []byte{1, 0x70, flags}
		for _, l := range lims {
			p = wasmgen.LEB(p, l)
		}
		return wasmgen.Section([]byte(wasmgen.Header), 4, p)
	}
	tests := []struct {
		name  string
		wasm  []byte
		lim   Limits
		limit string // "" for a sentinel
		err   error
	}{
		{"module size", wasmgen.Data(1 << 20), Limits{ModuleBytes: 1 << 20}, "ModuleBytes", nil},
		{"exports", wasmgen.Exports(1001), generous, "Exports", nil},
		{"functions", wasmgen.Nested(11, 1), Limits{Functions: 10}, "Functions", nil},
		{"imports", imports(11), Limits{Imports: 10}, "Imports", nil},
		{"imported functions", imports(11), Limits{Functions: 10}, "Functions", nil},
		{"data bytes", wasmgen.Data(8<<20 + 1), generous, "DataBytes", nil},
		{"nesting", wasmgen.Nested(1, 2049), generous, "Nesting", nil},
		{"body size", wasmgen.Nested(1, 1000), Limits{BodyBytes: 2000}, "BodyBytes", nil},
		{"locals", wasmgen.Locals(50_001), generous, "Locals", nil},
		{"sibling blocks", wasmgen.SiblingBranches(20_000), generous, "Blocks", nil},
		{"branches", wasmgen.BrIfs(4097), generous, "Branches", nil},
		{"br_table labels", wasmgen.BrTables(1, 100_000), generous, "Branches", nil},
		{"br_table labels across tables", wasmgen.BrTables(100, 1000), generous, "Branches", nil},
		{"params", wasmgen.WideTypes(1, 1001, 0), generous, "Params", nil},
		{"results", wasmgen.WideTypes(1, 0, 1001), generous, "Results", nil},
		{"type bytes", wasmgen.WideTypes(2000, 1000, 0), generous, "TypeBytes", nil},
		{"compile work across functions", wasmgen.SiblingBranchFuncs(400, 2000), generous, "CompileWork", nil},
		{"nesting across functions", wasmgen.Nested(400, 2000), generous, "CompileWork", nil},
		{"blocks across functions", wasmgen.Nested(100, 2000), generous, "CompileWork", nil},
		{"tables", table(0, 1), Limits{Tables: 0}, "", nil}, // no limit: accepted
		{"table minimum", table(0, 1<<20+1), generous, "TableEntries", nil},
		{"table maximum", table(1, 0, 1<<20+1), generous, "TableEntries", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Check(tc.wasm, tc.lim)
			if tc.limit == "" && tc.err == nil {
				require.NoError(t, err)
				return
			}
			var le *LimitError
			require.ErrorAs(t, err, &le)
			require.Equal(t, tc.limit, le.Limit)
			require.Greater(t, le.Got, le.Max)
			require.Contains(t, le.Error(), tc.limit)
			// The same module passes once the limit allows it.
			_, err = Check(tc.wasm, Limits{})
			require.NoError(t, err)
		})
	}
}

// TestCheck_Truncated: a prefix of a real module is refused as malformed
// unless it ends exactly between two sections; never a panic.
func TestCheck_Truncated(t *testing.T) {
	b, err := os.ReadFile("../../../plugins/c/status.wasm")
	require.NoError(t, err)
	whole := 0
	for n := range len(b) {
		_, err := Check(b[:n], generous)
		if err == nil {
			whole++
			continue
		}
		var fe *FormatError
		require.ErrorAs(t, err, &fe, "prefix of %d bytes", n)
	}
	require.LessOrEqual(t, whole, 12, "only the prefixes that end between sections")
}

// FuzzCheck: the pre-parse never panics, and it agrees with wazero: a
// module wazero compiles is never malformed to it (so no limit is ever
// computed on misread bytes).
func FuzzCheck(f *testing.F) {
	for _, file := range wasmFiles(f) {
		if b, err := os.ReadFile(file); err == nil && len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Add(wasmgen.Nested(2, 3))
	f.Add(wasmgen.Exports(3))
	f.Add(wasmgen.Locals(3))
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := Check(b, Limits{})
		var fe *FormatError
		// A length past the end of its bytes may make wazero allocate
		// terabytes (see FormatError.Short): never handed to it.
		if !errors.As(err, &fe) || fe.Short {
			return
		}
		if cm, werr := rt.CompileModule(ctx, b); werr == nil {
			_ = cm.Close(ctx)
			t.Fatalf("wazero compiles a module the pre-parse calls malformed: %v", err)
		}
	})
}

// BenchmarkCheck_GoGuest: the pre-parse's cost on a 4 MB Go-SDK plugin,
// next to the seconds wazero takes to compile it.
func BenchmarkCheck_GoGuest(b *testing.B) {
	wasm, err := os.ReadFile("../../../plugins/errmatch/errmatch.wasm")
	require.NoError(b, err)
	b.SetBytes(int64(len(wasm)))
	for b.Loop() {
		if _, err := Check(wasm, generous); err != nil {
			b.Fatal(err)
		}
	}
}
