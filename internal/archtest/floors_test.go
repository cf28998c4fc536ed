package archtest

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A room is a directory of the module whose packages sit on one floor. The
// packages of a room may import each other; an import into another room
// must go down at least one floor. docs/architecture.md draws this table.
type room struct {
	dir   string
	floor int
}

// floors is the building, bottom first. A package belongs to the room with
// the longest directory that holds it.
var floors = []room{
	{"internal/leaf", 0},          // utilities that import nothing of the module
	{"cmd/internal/gcfloor", 0},   // serve's garbage-collector floor, a leaf
	{"cmd/internal/connlimit", 0}, // serve's client connection limit, a leaf
	{"abi", 1},                    // the contract
	{"plugins/refusalcore", 1},    // the refusal decision, shared by the driver and the guests
	{"driver", 2},                 // the core: the retry loop and the stream driver
	{"host", 2},                   // the core: the Wasm host
	{"plugins", 2},                // the core: the guest SDK and the built-in modules
	{"internal/link", 3},          // registries through which adapters plug into policy
	{"provider", 4},               // one third-party client each
	{"oci", 4},
	{"state/redis", 4},
	{"policy", 5},                // a policy file into core objects
	{"gateway", 6},               // HTTP
	{"cmd/internal/scenario", 6}, // the scenario engine
	{"cmd/retryhost", 7},         // the CLI
	{"examples", 8},              // programs on top of everything
	{"bench", 8},                 // the benchmark tools
}

// leaves are the rooms of floor 0: utilities that import nothing of the
// module. The ones only cmd uses live under cmd/internal.
var leaves = []string{"internal/leaf", "cmd/internal/gcfloor", "cmd/internal/connlimit"}

// Test kits stand beside the floors: only tests import them, and they may
// import any floor below the code they test.
var testKits = []string{
	"internal/testkit",
	"plugins/internal/plugintest",
	"plugins/internal/wasmtest",
	"provider/internal/wiretest",
	"provider/internal/conformance",
}

// Packages that hold only tests of the repository or of several floors at
// once; nothing imports them.
var testOnly = []string{
	"internal/archtest",
	"internal/doccheck",
	"plugins/e2e",
	"provider/e2e",
}

func underAnyDir(path string, dirs []string) bool {
	for _, d := range dirs {
		if under(path, d) {
			return true
		}
	}
	return false
}

// roomOf returns the room of a module package, and false for a test kit, a
// test-only package or a package in no room.
func roomOf(path string) (room, bool) {
	if underAnyDir(path, testKits) || underAnyDir(path, testOnly) {
		return room{}, false
	}
	var best room
	found := false
	for _, r := range floors {
		if under(path, r.dir) && (!found || len(r.dir) > len(best.dir)) {
			best, found = r, true
		}
	}
	return best, found
}

// TestFloors: every module package is in a room, a test kit or a test-only
// package, and no import of a package's code runs sideways or back up a
// floor (tests may import across floors; the code they test may not).
func TestFloors(t *testing.T) {
	pkgs := listPackages(t)
	require.Contains(t, pkgs, module+"/internal/leaf/filecap")
	for path, p := range pkgs {
		if !strings.HasPrefix(path, module+"/") {
			continue
		}
		r, ok := roomOf(path)
		if !ok {
			require.Truef(t, underAnyDir(path, testKits) || underAnyDir(path, testOnly),
				"%s is in no room: give its directory a floor in floors (docs/architecture.md)", path)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			ir, ok := roomOf(imp)
			require.Truef(t, ok, "%s imports %s, a test kit or test-only package", path, imp)
			if ir.dir == r.dir {
				continue
			}
			require.Lessf(t, ir.floor, r.floor,
				"%s (floor %d, %s) must not import %s (floor %d, %s): an import goes down a floor",
				path, r.floor, r.dir, imp, ir.floor, ir.dir)
		}
	}
}

// TestLeavesImportNothingOfTheModule keeps the bottom floor a floor: a
// utility there may use the standard library and third-party packages, but
// nothing of the module, not even another leaf.
func TestLeavesImportNothingOfTheModule(t *testing.T) {
	pkgs := listPackages(t)
	for _, r := range floors {
		require.Equalf(t, r.floor == 0, slices.Contains(leaves, r.dir), "%s: floor 0 holds the leaves, and only them", r.dir)
	}
	for _, l := range leaves {
		require.Truef(t, slices.ContainsFunc(slices.Collect(maps.Keys(pkgs)), func(p string) bool { return under(p, l) }), "the leaf %s has packages", l)
	}
	for path, p := range pkgs {
		if !underAnyDir(path, leaves) {
			continue
		}
		for _, imp := range p.Imports {
			require.Falsef(t, strings.HasPrefix(imp, module+"/"), "%s must not import %s", path, imp)
		}
	}
}

// TestTestKitsOnlyInTests: no package's code imports a test kit (its tests
// may), so a test rig never reaches a program.
func TestTestKitsOnlyInTests(t *testing.T) {
	pkgs := listPackages(t)
	require.Contains(t, pkgs, module+"/internal/testkit")
	for path, p := range pkgs {
		if underAnyDir(path, testKits) {
			continue
		}
		for _, d := range p.Deps {
			require.Falsef(t, underAnyDir(d, testKits), "%s depends on the test kit %s outside its tests", path, d)
		}
	}
}
