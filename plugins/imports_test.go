package plugins_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
)

// allowedWASI is ABI.md §4.5's list: any other WASI import fails the load.
var allowedWASI = []string{"args_get", "args_sizes_get", "environ_get", "environ_sizes_get", "clock_res_get",
	"clock_time_get", "fd_write", "fd_close", "fd_fdstat_get", "fd_fdstat_set_flags", "fd_prestat_get",
	"fd_prestat_dir_name", "poll_oneoff", "proc_exit", "random_get", "sched_yield"}

// TestBuiltinsImportsAndExports checks each built plugin against ABI.md
// §3, §4 and §6 statically: the version marker, only allowed imports, and
// the exports of its kind with their exact signatures.
func TestBuiltinsImportsAndExports(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	i32, i64 := "i32", "i64"
	sigs := map[string][2][]string{
		abi.ExportInit:   {{i32}, {i32}},
		abi.ExportDecide: {{i32}, {i32}},
		abi.ExportOpen:   {{i64, i32}, {i32}},
		abi.ExportPart:   {{i64, i32}, {i64}},
		abi.ExportEnd:    {{i64}, {i64}},
		abi.ExportClose:  {{i64}, nil},
		abi.ExportParts:  {{i32, i32}, {i32}},
	}
	names := func(ts []uint8) []string {
		var out []string
		for _, x := range ts {
			out = append(out, map[uint8]string{0x7f: i32, 0x7e: i64, 0x7d: "f32", 0x7c: "f64"}[x])
		}
		return out
	}
	all := plugins.All()
	for _, p := range slices.Clone(all) { // and the Go-SDK reference builds
		if p.Name == "refusal" || p.Name == "errmatch" || p.Name == "finish" {
			p.Name, p.Language, p.Wasm = "go-"+p.Name, "go", plugintest.GoRef(p.Name)
			all = append(all, p)
		}
	}
	for _, p := range all {
		t.Run(p.Name, func(t *testing.T) {
			cm, err := rt.CompileModule(ctx, p.Wasm)
			require.NoError(t, err)
			for _, f := range cm.ImportedFunctions() {
				mod, name, _ := f.Import()
				switch mod {
				case abi.ModuleName:
					require.Contains(t, []string{abi.ImportBuffer, abi.ImportInput, abi.ImportPolicy, abi.ImportLog}, name)
				case "wasi_snapshot_preview1":
					require.Contains(t, allowedWASI, name, "forbidden WASI import")
				default:
					t.Fatalf("import from namespace %q", mod)
				}
			}
			exp := cm.ExportedFunctions()
			require.Contains(t, exp, abi.ExportABIVersion)
			require.Contains(t, cm.ExportedMemories(), abi.ExportMemory)
			want := []string{abi.ExportInit}
			if p.Kind == plugins.Condition {
				want = append(want, abi.ExportDecide)
			} else {
				want = append(want, abi.ExportOpen, abi.ExportPart, abi.ExportEnd, abi.ExportClose, abi.ExportParts)
			}
			for name, sig := range sigs {
				f, ok := exp[name]
				if !slices.Contains(want, name) {
					require.False(t, ok, "%s must not export %s (it would change its kind)", p.Name, name)
					continue
				}
				require.True(t, ok, "missing export %s", name)
				require.Equal(t, sig[0], names(f.ParamTypes()), "%s params", name)
				require.Equal(t, sig[1], names(f.ResultTypes()), "%s results", name)
			}
		})
	}
}
